import { readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { openAuditLog, verifyLog } from '../src/index.js';
import { checkAcks, expectCleanExit, readAcks, readChain, spawnWriter, waitFor } from './children.js';
import { tempDir } from './helpers.js';

/** The state letter of a process (field 3 of /proc/<pid>/stat): 'T' once SIGSTOP has taken hold. */
function processState(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
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
