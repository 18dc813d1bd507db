import { readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { openAuditLog } from '../src/index.js';
import { DirLock } from '../src/lock.js';
import { tempDir } from './helpers.js';

const staged = async (dir: string) => (await readdir(dir)).filter((n) => n.endsWith('.tmp'));

describe('the prepared lock directory', () => {
  it('is made after each append, so the next takes the lock with one rename; close() removes it', async () => {
    const dir = await tempDir();
    const log = await openAuditLog(join(dir, 'audit.log'));
    await log.append('t.one', { n: 1 });
    await sleep(50); // made after the release, in the background
    const first = await staged(dir);
    expect(first).toHaveLength(1);
    await log.append('t.two', { n: 2 });
    await sleep(50);
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
    const holder = new DirLock(path, { staleMs: 400, timeoutMs: 2000 });
    holder.prepare();
    await sleep(300); // older than staleMs / 4
    await holder.acquire();
    expect(Date.now() - (await stat(path)).mtimeMs).toBeLessThan(150);
    // A waiter that could only break the lock for staleness waits for the release instead.
    const waiter = new DirLock(path, { staleMs: 400, timeoutMs: 2000 });
    let got = false;
    const waiting = waiter.acquire().then(() => {
      got = true;
    });
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
    await sleep(50);
    const [name] = await staged(dir);
    expect(name).toBeDefined();
    await rm(join(dir, name as string), { recursive: true });
    await lock.acquire();
    expect((await stat(join(path, 'owner'))).isFile()).toBe(true);
    await lock.release();
    expect(await readdir(dir)).toEqual([]);
  });
});
