/**
 * A writer checks the chain when it opens the log (SPEC.md section 7): the entries after the
 * newest checkpoint it trusts are verified, and a broken chain is refused (`log_corrupt`, naming
 * the entry) before anything is appended. The checkpoint vouches for the entries before it, which
 * are not read again. Real files, no mocks.
 */
import { appendFile, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type AuditLog, generateSigningKeys, type OpenAuditLogOptions, openAuditLog, reanchorAuditLog, verifyLog } from '../src/index.js';
import { tempDir } from './helpers.js';

/** A fixed clock: entries (and so their hashes) are the same at every run. */
const clock = () => new Date('2025-01-02T03:04:05.678Z');

async function appendN(log: AuditLog, n: number, from = 1): Promise<void> {
  for (let i = from; i < from + n; i++) await log.append('test.event', { i });
}

/** A log at `dir/audit.log` built by `build` with the fixed clock (and `options`). */
async function logWith(build: (log: AuditLog) => Promise<void>, options: OpenAuditLogOptions = {}) {
  const dir = await tempDir();
  const path = join(dir, 'audit.log');
  const log = await openAuditLog(path, { clock, ...options });
  await build(log);
  await log.close();
  return { dir, path };
}

/**
 * Changes one byte of line `line` (1-based) of `file`, same length: the digit of its `"i":N` data
 * goes one up, as bit rot or a careless edit would leave it.
 */
async function flipDigit(file: string, line: number): Promise<void> {
  const buf = await readFile(file);
  let start = 0;
  for (let l = 1; l < line; l++) start = buf.indexOf(0x0a, start) + 1;
  const at = buf.indexOf('"i":', start) + 4;
  expect(at).toBeGreaterThan(start);
  expect(at).toBeLessThan(buf.indexOf(0x0a, start));
  buf[at] = (buf[at] as number) === 0x39 ? 0x30 : (buf[at] as number) + 1;
  await writeFile(file, buf);
}

async function openError(path: string, options: OpenAuditLogOptions = {}): Promise<{ code?: string; message: string }> {
  try {
    const log = await openAuditLog(path, { clock, ...options });
    await log.close();
  } catch (err) {
    return err as { code?: string; message: string };
  }
  throw new Error(`${path} opened, but its chain is broken`);
}

describe('a writer opening a log with a damaged entry', () => {
  it('refuses one byte changed in a middle entry (same length): log_corrupt naming the entry, the line and the fix; nothing is written', async () => {
    const { dir, path } = await logWith((log) => appendN(log, 20));
    await flipDigit(path, 10);
    const before = await readFile(path);
    const err = await openError(path);
    expect(err.code).toBe('log_corrupt');
    expect(err.message.replaceAll(path, '<log>')).toMatchInlineSnapshot(
      `"<log>: entry 10 (audit.log line 10) hash_mismatch: hash mismatch — stored 4f96…, computed fc74…. The chain is broken there, so nothing is appended to it (every entry from 10 on is untrusted): see it with "forge-audit verify <log>" (forge audit verify), then restore the log from a backup, or move it aside with its .checkpoints file and sealed segments (keep them as evidence) so that a new log starts"`,
    );
    // The same entry verifyLog names; the log and its directory are as they were.
    expect((await verifyLog(path)).first_bad).toMatchObject({ seq: 10, line: 10, reason: 'hash_mismatch' });
    expect((await readFile(path)).equals(before)).toBe(true);
    expect(await readdir(dir)).toEqual(['audit.log']);
  });

  it('names the first damaged entry when the last one is damaged too', async () => {
    const { path } = await logWith((log) => appendN(log, 12));
    await flipDigit(path, 12);
    expect(await openError(path)).toMatchObject({ code: 'log_corrupt', message: expect.stringContaining('entry 12 (audit.log line 12)') });
    await flipDigit(path, 4);
    expect(await openError(path)).toMatchObject({ code: 'log_corrupt', message: expect.stringContaining('entry 4 (audit.log line 4)') });
  });

  it('a log under fullVerifyBytes (16 MiB by default) is read whole at open: damage before its newest checkpoint is refused too', async () => {
    const { path } = await logWith(async (log) => {
      await appendN(log, 20);
      await log.checkpoint();
      await appendN(log, 20, 21);
    });
    const before = await readFile(path);
    await flipDigit(path, 5);
    const damaged = await readFile(path);
    expect(await openError(path)).toMatchObject({ code: 'log_corrupt', message: expect.stringContaining('entry 5 (audit.log line 5)') });
    expect(await readFile(path)).toEqual(damaged);
    expect(damaged).not.toEqual(before);
  });

  it('past fullVerifyBytes only what the newest checkpoint does not cover is read: damage before it opens (verifyLog finds it), damage after it is refused', async () => {
    const { path } = await logWith(async (log) => {
      await appendN(log, 20);
      await log.checkpoint();
      await appendN(log, 20, 21);
    });
    const intact = await readFile(path);

    // Entry 5 is vouched for by the checkpoint at 20: not re-verified at open (bounded), so the
    // writer opens; the full verification still names it, and the bounded one agrees with the writer.
    await flipDigit(path, 5);
    const log = await openAuditLog(path, { clock, fullVerifyBytes: 0 });
    await log.close();
    expect((await verifyLog(path)).first_bad).toMatchObject({ seq: 5, reason: 'hash_mismatch' });
    expect(await verifyLog(path, { fromCheckpoint: true })).toMatchObject({
      ok: true,
      entries: 40,
      uncheckpointed: 20,
      checkpoint: { entries: 20 },
    });

    await writeFile(path, intact);
    await flipDigit(path, 30);
    expect(await openError(path)).toMatchObject({ code: 'log_corrupt', message: expect.stringContaining('entry 30 (audit.log line 30)') });
    expect(await verifyLog(path, { fromCheckpoint: true })).toMatchObject({
      ok: false,
      entries: 29,
      first_bad: { seq: 30, line: 30, reason: 'hash_mismatch', file: 'audit.log' },
    });
  });

  it('a damaged checkpointed entry is refused as damage; a sealed segment cut below its checkpoint is log_behind_checkpoint', async () => {
    const { path } = await logWith(async (log) => {
      await appendN(log, 10);
      await log.checkpoint();
      await appendN(log, 5, 11);
    });
    await flipDigit(path, 10);
    expect(await openError(path)).toMatchObject({ code: 'log_corrupt', message: expect.stringContaining('entry 10 (audit.log line 10)') });

    // The checkpoint in segment 1, which is then sealed: the writer reads the checkpointed entry there.
    const rotated = await logWith(async (log) => {
      await appendN(log, 5);
      await log.checkpoint();
      await log.rotate();
      await appendN(log, 2, 6);
    });
    const sealed = join(rotated.dir, 'audit.log.000001');
    const kept = (await readFile(sealed, 'utf8')).split('\n').slice(0, 3);
    await writeFile(sealed, `${kept.join('\n')}\n`);
    expect(await openError(rotated.path)).toMatchObject({
      code: 'log_behind_checkpoint',
      message: expect.stringContaining(
        'does not hold the checkpointed entry: a checkpoint of 2025-01-02T03:04:05.678Z records entry 5 in audit.log.000001 up to byte',
      ),
    });
  });

  it('with a signing key, only checkpoints that key signed vouch: a newer unsigned one does not move the start', async () => {
    const keys = generateSigningKeys();
    const { path } = await logWith(
      async (log) => {
        await appendN(log, 10);
        await log.checkpoint();
        await appendN(log, 10, 11);
      },
      { signingKey: keys.privateKey },
    );
    const unsigned = await openAuditLog(path, { clock });
    await unsigned.checkpoint();
    await unsigned.close();
    await flipDigit(path, 15);
    expect(await openError(path, { signingKey: keys.privateKey })).toMatchObject({
      code: 'log_corrupt',
      message: expect.stringContaining('entry 15 (audit.log line 15)'),
    });
    // Without the key the unsigned checkpoint at 20 counts (past fullVerifyBytes, where only the
    // checkpoint's start is read), as verifyLog without a key counts it.
    const log = await openAuditLog(path, { clock, fullVerifyBytes: 0 });
    await log.close();
    expect(await verifyLog(path, { fromCheckpoint: true, publicKey: keys.publicKey })).toMatchObject({
      ok: false,
      first_bad: { seq: 15, reason: 'hash_mismatch' },
    });
  });

  it('across segments: damage after a checkpoint in a sealed segment names the segment file and its line', async () => {
    // Segment 1: entries 1–5, seal 6. Segment 2: header 7, entries 8–10, checkpoint, 11–13, seal 14. Active: header 15, 16–17.
    const { dir, path } = await logWith(async (log) => {
      await appendN(log, 5);
      await log.rotate();
      await appendN(log, 3, 6);
      await log.checkpoint();
      await appendN(log, 3, 9);
      await log.rotate();
      await appendN(log, 2, 12);
    });
    const sealed = join(dir, 'audit.log.000002');
    await flipDigit(sealed, 6); // the entry after the checkpoint's second: seq 12
    expect(await openError(path)).toMatchObject({
      code: 'log_corrupt',
      message: expect.stringContaining('entry 12 (audit.log.000002 line 6)'),
    });
  });

  it('a torn last line (a crash mid-write) is still moved aside and appended after: only complete entries are refused', async () => {
    const { path } = await logWith((log) => appendN(log, 5));
    await appendFile(path, '{"seq":6,"ts":"2025-01-02T03:04');
    const log = await openAuditLog(path, { clock });
    await log.append('test.event', { i: 6 });
    await log.close();
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 7 });
    expect((await readFile(path, 'utf8')).split('\n')[5]).toContain('"type":"audit.repaired"');
  });

  it('re-anchoring refuses a broken chain too: nothing is signed over damage', async () => {
    const keys = generateSigningKeys();
    const { path } = await logWith((log) => appendN(log, 8));
    await flipDigit(path, 3);
    await expect(reanchorAuditLog(path, { signingKey: keys.privateKey, reason: 'keep it', clock })).rejects.toMatchObject({
      code: 'log_corrupt',
      message: expect.stringContaining('entry 3 (audit.log line 3)'),
    });
    expect(await readFile(`${path}.checkpoints`).catch(() => 'absent')).toBe('absent');
  });
});
