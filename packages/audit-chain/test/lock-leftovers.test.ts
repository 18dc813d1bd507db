/**
 * What SIGKILLed writers leave beside the lock (staging, removal and break-marker directories)
 * is removed by the next acquire, and only that: a live holder's lock, and a directory another
 * process may be creating right now, stay.
 */

import { spawn } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync, readlinkSync } from 'node:fs';
import { mkdir, readdir, readFile, utimes, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { basename, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { scaled, waitFor } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { openAuditLog, verifyLog } from '../src/index.js';
import { DirLock } from '../src/lock.js';
import { expectCleanExit, readAcks, spawnWriter, type Writer } from './children.js';
import { tempDir } from './helpers.js';

/**
 * Lock options under which a writer may only get a held lock by proving its holder dead
 * (the timeout scaled to the machine; the stale period stays far beyond it).
 */
const NO_STALENESS = { staleMs: 60_000, timeoutMs: scaled(5000) };
/**
 * The same for two writers that append in a loop: the lock is not fair, so on a loaded host one
 * of them may wait seconds while the other takes it again and again. Waiting is not what these
 * cycles test; a writer that gave up (lock_timeout) would fail the cycle for the wrong reason.
 */
const CONTENDED = { staleMs: 60_000, timeoutMs: scaled(25_000) };

/** The directories beside the lock `<log>.lock` other than the lock itself. */
async function leftovers(dir: string, log: string): Promise<string[]> {
  const lock = `${basename(log)}.lock`;
  return (await readdir(dir)).filter((n) => n.startsWith(`${lock}.`)).sort();
}

async function killAfterAppending(w: Writer, ms: number): Promise<void> {
  await waitFor(`writer ${w.id} to acknowledge an append`, async () => {
    if (w.child.exitCode !== null) throw new Error(`writer ${w.id} exited: ${w.stderr()}`);
    return (await readAcks(w.acksPath)).acks.length > 0 ? true : undefined;
  });
  // Lets time pass: the kill is to land at a random point among the appends, which no event marks.
  await sleep(ms);
  w.child.kill('SIGKILL');
  expect(await w.exited, w.stderr()).toEqual({ code: null, signal: 'SIGKILL' });
}

describe('leftovers of SIGKILLed lock holders', () => {
  it('a break marker that names no one (its breaker killed as it made it) does not stall the next breaker of a dead holder', async () => {
    const dir = await tempDir();
    const path = join(dir, 'forge.log');
    // A holder that is provably dead: a process that ran and exited, on this host and pid namespace.
    const gone = spawn(process.execPath, ['-e', '']);
    const deadPid = gone.pid as number;
    await once(gone, 'exit');
    const token = 'a'.repeat(24);
    const lock = `${path}.lock`;
    await mkdir(lock);
    const owner = {
      host: hostname(),
      pidns: readlinkSync('/proc/self/ns/pid'),
      boot: readFileSync('/proc/sys/kernel/random/boot_id', 'latin1').trim(),
      pid: deadPid,
      start: '',
      token,
      time: new Date().toISOString(),
    };
    await writeFile(join(lock, 'owner'), `${JSON.stringify(owner)}\n`);
    // What a breaker killed between making its marker and writing who it is left behind.
    await mkdir(`${lock}.break-${token}`);
    // Under the old marker, this waited for the stale period (60 s) and gave up at the timeout (5 s).
    const log = await openAuditLog(path, { lock: NO_STALENESS });
    try {
      await log.append('t.after', {});
    } finally {
      await log.close();
    }
    expect(await verifyLog(path)).toMatchObject({ ok: true });
  });

  it('20 cycles of two writers killed at random points: none remain after the next acquire', { timeout: scaled(120_000) }, async () => {
    const dir = await tempDir();
    const path = join(dir, 'forge.log');
    let seen = 0;
    for (let k = 0; k < 20; k++) {
      // Two writers at once, so kills land while holding, waiting, staging, releasing and breaking.
      const a = spawnWriter(path, Number.POSITIVE_INFINITY, `a${k}`, {
        acks: join(dir, `a${k}.acks`),
        window: randomInt(1, 50),
        lock: CONTENDED,
      });
      const b = spawnWriter(path, Number.POSITIVE_INFINITY, `b${k}`, {
        acks: join(dir, `b${k}.acks`),
        window: randomInt(1, 50),
        lock: CONTENDED,
      });
      await Promise.all([killAfterAppending(a, randomInt(5, 120)), killAfterAppending(b, randomInt(5, 120))]);
      seen = Math.max(seen, (await leftovers(dir, path)).length);
    }
    // Random kill points may all miss the windows that leave something (a fast host, a lucky
    // draw): one more cycle kills a writer inside one on purpose. A holder hangs in its data
    // sync with the lock held; a second writer stages its directory, waiting, and is killed
    // there; then the holder is killed too.
    const holder = spawnWriter(path, 1, 'holder', { acks: join(dir, 'holder.acks'), hangDatasyncMs: 60_000, lock: CONTENDED });
    await waitFor('the holder to hold the lock', async () => {
      if (holder.child.exitCode !== null) throw new Error(`the holder exited: ${holder.stderr()}`);
      return (await readAcks(holder.acksPath)).events.includes('datasync') ? true : undefined;
    });
    const stager = spawnWriter(path, 1, 'stager', { acks: join(dir, 'stager.acks'), lock: CONTENDED });
    await waitFor('the second writer to stage its lock directory', async () => {
      if (stager.child.exitCode !== null) throw new Error(`the second writer exited: ${stager.stderr()}`);
      const staged = (await leftovers(dir, path)).filter((n) => n.endsWith('.tmp'));
      return staged.length > 0 ? true : undefined;
    });
    stager.child.kill('SIGKILL');
    holder.child.kill('SIGKILL');
    await Promise.all([stager.exited, holder.exited]);
    const before = await leftovers(dir, path);
    // A directory with no owner record yet is left alone while it is younger than the stale
    // period (its maker may be writing the record right now): every one of them is made older
    // than that (the sweep judges a leftover's age by its mtime).
    const staleMs = 1000;
    const past = new Date(Date.now() - 2 * staleMs);
    for (const n of before) await utimes(join(dir, n), past, past);
    const log = await openAuditLog(path, { lock: { staleMs, timeoutMs: scaled(5000) } });
    try {
      await log.append('t.next', {});
      expect(await leftovers(dir, path)).toEqual([]);
    } finally {
      await log.close();
    }
    expect(await leftovers(dir, path)).toEqual([]);
    expect(await verifyLog(path)).toMatchObject({ ok: true });
    console.log(`lock leftovers: at most ${seen} after a cycle, ${before.length} before the next acquire, 0 after it`);
    // The premise: the kills did leave something behind for the acquire to remove (the last
    // cycle's staging directory at least).
    expect(before.length).toBeGreaterThan(0);
  });

  it("never removes a live holder's lock, nor a directory being made now, while a third process acquires", {
    timeout: scaled(60_000),
  }, async () => {
    const dir = await tempDir();
    const path = join(dir, 'forge.log');
    const lockPath = `${path}.lock`;
    // The holder: a live process inside a batch whose data sync hangs, holding the lock.
    // Its sync outlasts what follows up to the third's timeout; then the holder finishes.
    const holder = spawnWriter(path, 1, 'holder', {
      acks: join(dir, 'holder.acks'),
      hangDatasyncMs: scaled(4000),
      lock: NO_STALENESS,
    });
    await waitFor('the holder to hold the lock', async () => {
      if (holder.child.exitCode !== null) throw new Error(`the holder exited: ${holder.stderr()}`);
      return (await readAcks(holder.acksPath)).events.includes('datasync') ? true : undefined;
    });
    const owner = JSON.parse(await readFile(join(lockPath, 'owner'), 'utf8')) as { pid: number; token: string };
    expect(owner.pid).toBe(holder.pid);
    // A second writer stages its directory, waits for the lock, and is killed: its staging
    // directory names a dead owner.
    const dead = spawnWriter(path, 1, 'dead', { acks: join(dir, 'dead.acks'), lock: NO_STALENESS });
    // Staged with its whole owner record written (a directory without one, or with one cut short,
    // counts as being made now).
    const complete = (n: string) => {
      try {
        return typeof JSON.parse(readFileSync(join(dir, n, 'owner'), 'utf8')).pid === 'number';
      } catch {
        return false;
      }
    };
    const staging = await waitFor('the second writer to stage its lock directory', async () => {
      const own = (await leftovers(dir, path)).filter((n) => n.endsWith('.tmp') && complete(n));
      return own.length > 0 ? own : undefined;
    });
    dead.child.kill('SIGKILL');
    await dead.exited;
    // Made by hand: a directory another process is creating right now (no owner record yet), one
    // with no owner record that is long past the stale period, and the break marker of a holder
    // long gone.
    const lock = basename(lockPath);
    const fresh = `${lock}.${randomBytes(12).toString('hex')}.tmp`;
    const old = `${lock}.${randomBytes(12).toString('hex')}.released`;
    const marker = `${lock}.break-${randomBytes(12).toString('hex')}`;
    for (const n of [fresh, old, marker]) await mkdir(join(dir, n));
    const past = new Date(Date.now() - 2 * NO_STALENESS.staleMs);
    await utimes(join(dir, old), past, past);
    await writeFile(join(dir, marker, 'owner'), '');
    await utimes(join(dir, marker), past, past);

    // The third: it cannot prove the holder dead (it is not), so it waits and times out.
    const third = new DirLock(lockPath, { staleMs: NO_STALENESS.staleMs, timeoutMs: 1000 });
    await expect(third.acquire()).rejects.toMatchObject({ code: 'lock_timeout' });
    expect(JSON.parse(await readFile(join(lockPath, 'owner'), 'utf8'))).toMatchObject({ pid: holder.pid, token: owner.token });
    const left = await leftovers(dir, path);
    expect(left).toContain(fresh);
    for (const n of staging) expect(left).not.toContain(n);
    // Anything else still there has no whole owner record: the killed writer may have been cut
    // between making a directory and finishing its owner, which is the same case as `fresh` (kept
    // for the stale period, since it cannot be told from one being made now).
    for (const n of left.filter((x) => x !== fresh)) expect(complete(n), n).toBe(false);

    // The holder finishes its batch and releases; the third then gets the lock.
    await expectCleanExit(holder);
    await third.acquire();
    await third.release();
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 1 });
  });
});
