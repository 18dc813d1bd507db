import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { waitFor } from '@forge/test-utils';
import { describe, expect, it, onTestFinished } from 'vitest';
import { openAuditLog, verifyLog } from '../src/index.js';
import { checkAcks, expectCleanExit, readAcks, readChain, spawnWriter, WRITER } from './children.js';
import { tempDir } from './helpers.js';

/** The state letter of a process (field 3 of /proc/<pid>/stat): 'T' stopped, 'Z' zombie. */
function processState(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
}

/** Stops `pid` at the end of the current test, if it still runs. */
function killAtEnd(pid: number): void {
  onTestFinished(() => {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {}
  });
}

describe('a writer that stalls while holding the lock', () => {
  // A machine under heavy load can leave a holder unscheduled for longer than the stale period
  // between reading the head and writing its batch; SIGSTOP makes that stall exact. A waiter
  // that then took the lock for stale would append from the same head, and the holder, resumed,
  // would append a second entry with the same seq after it: a forked chain.
  it('keeps the lock while its process lives: a waiter times out instead of appending from the same head', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    // A short stale period: the holder's lock goes unrefreshed for it within the first waits.
    const lock = { staleMs: 200, timeoutMs: 2000 };
    const other = await openAuditLog(path, { lock });
    onTestFinished(() => other.close());
    const resume = join(dir, 'resume');
    const holder = spawnWriter(path, 10, 'holder', { acks: join(dir, 'holder.acks'), lock, holdWrite: resume });
    // The holder has taken the lock and read the head (seq 0): its batch is built, not written.
    await waitFor('the holder to hold its first write', async () => {
      if (holder.child.exitCode !== null) throw new Error(`the holder exited: ${holder.stderr()}`);
      return (await readAcks(holder.acksPath)).events.includes('write') ? true : undefined;
    });
    process.kill(holder.pid, 'SIGSTOP');
    await waitFor('the holder to stop', () => (processState(holder.pid) === 'T' ? true : undefined));

    // The holder's lock is not refreshed any more and passes the stale period during this wait.
    const waited = await other.append('t.write', { writer: 'other', i: 0 }).then(
      (r) => ({ seq: r.seq }),
      (err: { code?: string }) => ({ code: err.code }),
    );

    await writeFile(resume, '');
    process.kill(holder.pid, 'SIGCONT');
    await expectCleanExit(holder);
    const later = await other.append('t.write', { writer: 'other', i: 1 });

    const v = await verifyLog(path);
    expect(v.first_bad).toBeUndefined();
    expect(v).toMatchObject({ ok: true, entries: 11 });
    expect(waited).toEqual({ code: 'lock_timeout' });
    expect(later.seq).toBe(11);
    const { entries } = await readChain(path);
    const acks = (await readAcks(holder.acksPath)).acks;
    expect(acks).toHaveLength(10);
    expect(checkAcks(entries, [...acks, { id: 'other', i: 1, seq: later.seq, hash: later.hash }])).toEqual([]);
  });
});

describe('a holder killed but not yet reaped by its parent (a zombie)', () => {
  it('is proved dead: the next writer takes the lock without waiting for staleness', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const acks = join(dir, 'holder.acks');
    // The writer's parent is a shell that then becomes `sleep`, which never reaps its children.
    const options = JSON.stringify({ acks, hangDatasyncMs: 60_000 });
    const parent = spawn('sh', ['-c', '"$0" "$@" & exec sleep 600', process.execPath, WRITER, path, '1', 'holder', options], {
      stdio: 'ignore',
    });
    if (parent.pid !== undefined) killAtEnd(parent.pid);
    // Inside its batch (written, its data sync hanging): it holds the lock.
    await waitFor('the holder to hold the lock', async () => ((await readAcks(acks)).events.includes('datasync') ? true : undefined));
    const owner = JSON.parse(await readFile(join(`${path}.lock`, 'owner'), 'utf8')) as { pid: number };
    killAtEnd(owner.pid);
    process.kill(owner.pid, 'SIGKILL');
    await waitFor('the holder to be a zombie', () => (processState(owner.pid) === 'Z' ? true : undefined));

    // staleMs 60 s, timeout 3 s: success proves the zombie was judged dead.
    const log = await openAuditLog(path, { lock: { staleMs: 60_000, timeoutMs: 3000 } });
    onTestFinished(() => log.close());
    const r = await log.append('t.after', { ok: true });
    await log.close();
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: r.seq });
  });
});
