import { mkdir, readdir, readFile, rm, stat, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { scaled, waitFor } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { openAuditLog } from '../src/index.js';
import { DirLock } from '../src/lock.js';
import { tempDir } from './helpers.js';

const staged = async (dir: string) => (await readdir(dir)).filter((n) => n.endsWith('.tmp'));

/**
 * Waits until a prepared lock directory other than `not` is made, its owner record written:
 * `prepare()` makes it in the background (after a release, in the writer), so nothing awaits it.
 */
async function prepared(dir: string, not: string[] = []): Promise<void> {
  await waitFor('a prepared lock directory with its owner record', async () => {
    for (const n of await staged(dir)) {
      if (not.includes(n)) continue;
      try {
        if (typeof JSON.parse(await readFile(join(dir, n, 'owner'), 'utf8')).token === 'string') return true;
      } catch {} // its owner record not written yet
    }
    return false;
  });
}

describe('the prepared lock directory', () => {
  it('is made after each append, so the next takes the lock with one rename; close() removes it', async () => {
    const dir = await tempDir();
    const log = await openAuditLog(join(dir, 'audit.log'));
    await log.append('t.one', { n: 1 });
    await prepared(dir); // made after the release, in the background
    const first = await staged(dir);
    expect(first).toHaveLength(1);
    await log.append('t.two', { n: 2 });
    await prepared(dir, first);
    const second = await staged(dir);
    expect(second).toHaveLength(1);
    expect(second).not.toEqual(first); // the first was used (renamed onto the lock), a new one made
    await log.close();
    expect(await staged(dir)).toEqual([]);
    expect((await readdir(dir)).some((n) => n.endsWith('.lock'))).toBe(false);
  });

  it('prepared a while ago, it is freshened when taken: a waiter does not break a live holder for stale', async () => {
    const dir = await tempDir();
    const path = join(dir, 'x.lock');
    const holder = new DirLock(path, { staleMs: 400, timeoutMs: scaled(2000) });
    holder.prepare();
    await prepared(dir);
    // Lets time pass: the lock judges a prepared directory's age by the time it noted in memory
    // when it made it (not an mtime a test could set), and it is to be older than staleMs / 4.
    await sleep(300);
    const taking = Date.now();
    await holder.acquire();
    // Freshened as it was taken (not left at the time it was prepared, 300 ms or more before);
    // 50 ms of slack for the file system's coarser clock.
    expect((await stat(path)).mtimeMs).toBeGreaterThanOrEqual(taking - 50);
    // A waiter that could only break the lock for staleness waits for the release instead.
    const waiter = new DirLock(path, { staleMs: 400, timeoutMs: scaled(2000) });
    let got = false;
    const waiting = waiter.acquire().then(() => {
      got = true;
    });
    // Lets time pass: time enough for the waiter to (wrongly) break the lock had it not been
    // freshened; a waiter that rightly keeps waiting gives no event to wait for.
    await sleep(250);
    expect(got).toBe(false);
    await holder.release();
    await waiting;
    expect(got).toBe(true);
    await waiter.release();
    await holder.discard();
  });

  it('removed meanwhile (another writer swept it), it is made again', async () => {
    const dir = await tempDir();
    const path = join(dir, 'x.lock');
    const lock = new DirLock(path);
    lock.prepare();
    await prepared(dir);
    const [name] = await staged(dir);
    expect(name).toBeDefined();
    await rm(join(dir, name as string), { recursive: true });
    await lock.acquire();
    expect((await stat(join(path, 'owner'))).isFile()).toBe(true);
    await lock.release();
    expect(await readdir(dir)).toEqual([]);
  });
});

describe('a lock of another design at the same path', () => {
  it("an empty lock directory (proper-lockfile's, an older forge's) is held until it is stale, never renamed over", async () => {
    const dir = await tempDir();
    const path = join(dir, 'x.lock');
    await mkdir(path); // what proper-lockfile's lock is: a bare directory, its mtime refreshed while held
    const waiter = new DirLock(path, { staleMs: 60_000, timeoutMs: 300 });
    await expect(waiter.acquire()).rejects.toMatchObject({ code: 'lock_timeout' });
    expect(await readdir(path)).toEqual([]); // still the other design's, untouched
    // Once stale (its holder stopped refreshing it), it is broken like any holder that cannot be inspected.
    const old = new Date(Date.now() - 120_000);
    await utimes(path, old, old);
    await waiter.acquire();
    expect(await readdir(path)).toEqual(['owner']);
    await waiter.release();
  });
});
