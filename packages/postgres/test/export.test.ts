/**
 * Export and in-database verification: the exported file log is the stored lines byte for byte,
 * verifyLog of @forge/audit-chain accepts it (signed checkpoints included), two exports are
 * identical, existing files are not replaced; verifyPostgresAuditLog finds a tampered, deleted,
 * rehashed or truncated history.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { encodeEntry, generateSigningKeys, verifyLog } from '@forge/audit-chain';
import { describe, expect, it } from 'vitest';
import { exportAuditLog, openPostgresAuditLog, verifyPostgresAuditLog } from '../src/index.js';
import { codeOf, poolOn, tempDir, usePostgres } from './helpers.js';

const pgs = usePostgres();

/** A database with `n` entries from 3 writers and a signed checkpoint after the first `n - 5`. */
async function filled(n: number, key?: string): Promise<string> {
  const url = await pgs.server().database();
  const logs = await Promise.all([1, 2, 3].map(() => openPostgresAuditLog(url, key ? { signingKey: key } : {})));
  const all: Promise<unknown>[] = [];
  for (let i = 0; i < n - 5; i++) all.push((logs[i % 3] as (typeof logs)[0]).append('t.e', { i, text: 'ünïcødé ✓ "q"' }));
  await Promise.all(all);
  await logs[0]?.checkpoint();
  for (let i = n - 5; i < n; i++) await logs[0]?.append('t.e', { i });
  await Promise.all(logs.map((l) => l.close()));
  return url;
}

describe('exportAuditLog', () => {
  it('writes the stored lines byte for byte; verifyLog accepts them with the signed checkpoint; two exports are identical', async () => {
    const keys = generateSigningKeys();
    const url = await filled(300, keys.privateKey);
    const dir = await tempDir();
    const a = await exportAuditLog(url, join(dir, 'a.log'));
    const b = await exportAuditLog(url, join(dir, 'b.log'));
    expect(a).toMatchObject({ entries: 300, checkpoints: 1, checkpointsPath: join(dir, 'a.log.checkpoints') });
    const [la, lb] = [await readFile(join(dir, 'a.log')), await readFile(join(dir, 'b.log'))];
    expect(la.equals(lb)).toBe(true);
    expect((await readFile(`${a.path}.checkpoints`)).equals(await readFile(`${b.path}.checkpoints`))).toBe(true);
    expect(la.length).toBe(a.bytes);
    const pool = poolOn(url);
    const stored = await pool.query<{ line: string }>('SELECT line FROM forge_audit_entries ORDER BY seq');
    expect(la.toString('utf8')).toBe(stored.rows.map((r) => r.line).join(''));
    const v = await verifyLog(a.path, { publicKey: keys.publicKey });
    expect(v).toMatchObject({ ok: true, entries: 300, head: a.head, checkpoint: { entries: 295, signed: true }, uncheckpointed: 5 });
    // And the lines are those the encoder of the format gives for the same fields.
    const first = JSON.parse(stored.rows[0]?.line ?? '') as { ts: string; type: string; data: never; prev: string };
    expect(encodeEntry({ seq: 1, ts: first.ts, type: first.type, data: first.data, prev: first.prev }).line).toBe(stored.rows[0]?.line);
    expect(await verifyPostgresAuditLog(url, { publicKey: keys.publicKey })).toMatchObject({
      ok: true,
      entries: 300,
      head: a.head,
      checkpoint: { entries: 295 },
      uncheckpointed: 5,
    });
  });

  it('an empty log exports as an empty file that verifies', async () => {
    const url = await pgs.server().database();
    await (await openPostgresAuditLog(url)).close();
    const dir = await tempDir();
    const r = await exportAuditLog(url, join(dir, 'e.log'));
    expect(r).toMatchObject({ entries: 0, bytes: 0, checkpoints: 0 });
    expect(await verifyLog(r.path)).toMatchObject({ ok: true, entries: 0 });
  });

  it('does not replace existing files (unless overwrite) and refuses a directory with sealed segments of that name', async () => {
    const url = await filled(10);
    const dir = await tempDir();
    const path = join(dir, 'x.log');
    await writeFile(path, 'precious');
    const err = (await exportAuditLog(url, path).catch((e: unknown) => e)) as Error & { code: string };
    expect(err).toMatchObject({ code: 'io_error' });
    expect(err.message).toBe(`cannot export to ${path}: ${path} exists; choose a new path (or pass overwrite)`);
    expect(await readFile(path, 'utf8')).toBe('precious');
    await exportAuditLog(url, path, { overwrite: true });
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 10 });
    await writeFile(`${path}.000001`, '');
    expect(await codeOf(exportAuditLog(url, path, { overwrite: true }))).toBe('io_error');
    expect(await codeOf(exportAuditLog(url, join(dir, 'missing', 'y.log')))).toBe('io_error');
  });
});

describe('verifyPostgresAuditLog finds tampering', () => {
  /** Runs `sql` as a superuser who first turns the append-only triggers off (what an attacker would do). */
  async function tamper(url: string, sql: string): Promise<void> {
    const pool = poolOn(url);
    await pool.query(`ALTER TABLE forge_audit_entries DISABLE TRIGGER USER; ${sql}`);
  }

  it('an edited line: hash_mismatch at that entry (and the export fails verifyLog there too)', async () => {
    const url = await filled(40);
    await tamper(url, `UPDATE forge_audit_entries SET line = replace(line, '"i":', '"i":9') WHERE seq = 18`);
    const v = await verifyPostgresAuditLog(url);
    expect(v).toMatchObject({ ok: false, entries: 17, first_bad: { seq: 18, reason: 'hash_mismatch' } });
    const dir = await tempDir();
    const r = await exportAuditLog(url, join(dir, 't.log'));
    expect((await verifyLog(r.path)).first_bad).toMatchObject({ seq: 18, reason: 'hash_mismatch' });
  });

  it('a deleted entry: seq_gap; a rewritten hash column: hash_mismatch', async () => {
    const url = await filled(20);
    await tamper(url, 'DELETE FROM forge_audit_entries WHERE seq = 9');
    expect((await verifyPostgresAuditLog(url)).first_bad).toMatchObject({ seq: 9, reason: 'seq_gap' });
    const url2 = await filled(20);
    await tamper(url2, `UPDATE forge_audit_entries SET hash = repeat('a', 64) WHERE seq = 3`);
    expect((await verifyPostgresAuditLog(url2)).first_bad).toMatchObject({ seq: 3, reason: 'hash_mismatch' });
  });

  it('an entry replaced by a correctly hashed one: broken_link; the tail cut below a checkpoint: truncated', async () => {
    const url = await filled(20);
    const pool = poolOn(url);
    const e = (await pool.query<{ ts: string }>('SELECT line FROM forge_audit_entries WHERE seq = 6')).rows[0] as unknown as {
      line: string;
    };
    const old = JSON.parse(e.line) as { ts: string; prev: string };
    const forged = encodeEntry({ seq: 6, ts: old.ts, type: 't.e', data: { i: 'forged' }, prev: 'f'.repeat(64) });
    await tamper(url, `UPDATE forge_audit_entries SET line = '${forged.line}', hash = '${forged.hash}' WHERE seq = 6`);
    expect((await verifyPostgresAuditLog(url)).first_bad).toMatchObject({ seq: 6, reason: 'broken_link' });

    const url2 = await filled(20);
    await tamper(
      url2,
      `DELETE FROM forge_audit_entries WHERE seq > 10;
       UPDATE forge_audit_head SET seq = 10, hash = e.hash, bytes = e.end_offset FROM forge_audit_entries e WHERE e.seq = 10 AND id = 1;`,
    );
    expect(await verifyPostgresAuditLog(url2)).toMatchObject({ ok: false, entries: 10, first_bad: { seq: 11, reason: 'truncated' } });
  });
});
