import { randomBytes } from 'node:crypto';
import { constants as fsc } from 'node:fs';
import { type FileHandle, open, readdir, rename, rm, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { decodeCheckpoint, decodeEntry, GENESIS_HASH, type KeyInput, type VerifyReason } from '@forge/audit-chain';
import { syncDir } from '@forge/registry';
import type pg from 'pg';
import { describeError, PostgresStoreError } from './errors.js';
import { assertMigrated } from './migrate.js';
import { checkConnection, type PoolHandle, poolFor } from './pool.js';

const PAGE = 2000;

/** What {@link exportAuditLog} wrote. */
export interface ExportResult {
  /** The log file written, and its checkpoint file beside it (`<path>.checkpoints`). */
  path: string;
  checkpointsPath: string;
  entries: number;
  /** Hash of the last entry (genesis when empty). */
  head: string;
  /** Size of the log file in bytes. */
  bytes: number;
  checkpoints: number;
}

/** Runs `fn` in a read-only REPEATABLE READ transaction: one snapshot for the whole read. */
async function inSnapshot<T>(h: PoolHandle, what: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  await checkConnection(h);
  await assertMigrated(h.pool);
  const c = await h.pool.connect();
  try {
    await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const out = await fn(c);
    await c.query('COMMIT');
    return out;
  } catch (err) {
    await c.query('ROLLBACK').catch(() => {});
    if (err instanceof PostgresStoreError) throw err;
    throw new PostgresStoreError('query_failed', `${what} from ${h.label} failed: ${describeError(err, h.secrets)}`, {
      cause: err,
      secrets: h.secrets,
    });
  } finally {
    c.release();
  }
}

/** Stored lines of entries from seq 1 on, in keyset pages (inside the caller's snapshot). */
async function* storedRows(c: pg.PoolClient): AsyncGenerator<{ seq: number; hash: string; end_offset: number; line: string }> {
  let after = 0;
  for (;;) {
    const r = await c.query<{ seq: string; hash: string; end_offset: string; line: string }>(
      'SELECT seq, hash, end_offset, line FROM forge_audit_entries WHERE seq > $1 ORDER BY seq LIMIT $2',
      [after, PAGE],
    );
    for (const row of r.rows) yield { seq: Number(row.seq), hash: row.hash, end_offset: Number(row.end_offset), line: row.line };
    if (r.rows.length < PAGE) return;
    after = Number(r.rows.at(-1)?.seq);
  }
}

/**
 * Writes the Postgres audit log as a file log at `path` (one segment) and its checkpoints at
 * `<path>.checkpoints`: the stored lines, byte for byte, from one consistent snapshot, so that
 * `verifyLog(path)` of @forge/audit-chain accepts it and two exports of the same database give the
 * same bytes. Files are 0600, written to temporary names, synced and renamed into place. Refuses
 * (`io_error`) to replace existing files unless `overwrite`, and always refuses a directory that
 * holds sealed segments of `path` (they would be read as part of the export).
 */
export async function exportAuditLog(target: pg.Pool | string, path: string, options: { overwrite?: boolean } = {}): Promise<ExportResult> {
  const h = poolFor(target, 1);
  const dir = dirname(path);
  const base = basename(path);
  const cpPath = `${path}.checkpoints`;
  try {
    await refuseExisting(path, cpPath, dir, base, options.overwrite ?? false);
    const token = randomBytes(6).toString('hex');
    const tmpLog = join(dir, `.${base}.export-${token}.tmp`);
    const tmpCp = join(dir, `.${base}.checkpoints.export-${token}.tmp`);
    try {
      const out = await inSnapshot(h, 'exporting the audit log', async (c) => {
        let entries = 0;
        let head = GENESIS_HASH;
        let bytes = 0;
        await writeFileFrom(tmpLog, async (write) => {
          let chunk: string[] = [];
          for await (const row of storedRows(c)) {
            chunk.push(row.line);
            entries = row.seq;
            head = row.hash;
            bytes = row.end_offset;
            if (chunk.length >= PAGE) {
              await write(chunk.join(''));
              chunk = [];
            }
          }
          if (chunk.length > 0) await write(chunk.join(''));
        });
        const cps = await c.query<{ line: string }>('SELECT line FROM forge_audit_checkpoints WHERE entries <= $1 ORDER BY id', [entries]);
        await writeFileFrom(tmpCp, async (write) => {
          if (cps.rows.length > 0) await write(cps.rows.map((r) => r.line).join(''));
        });
        return { entries, head, bytes, checkpoints: cps.rows.length };
      });
      await rename(tmpLog, path);
      await rename(tmpCp, cpPath);
      await syncDir(dir);
      return { path, checkpointsPath: cpPath, ...out };
    } finally {
      await rm(tmpLog, { force: true });
      await rm(tmpCp, { force: true });
    }
  } catch (err) {
    if (err instanceof PostgresStoreError) throw err;
    throw new PostgresStoreError('io_error', `cannot export the audit log to ${path}: ${describeError(err, h.secrets)}`, { cause: err });
  } finally {
    if (h.owned) await h.pool.end().catch(() => {});
  }
}

async function refuseExisting(path: string, cpPath: string, dir: string, base: string, overwrite: boolean): Promise<void> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    throw new PostgresStoreError(
      'io_error',
      `cannot export to ${path}: directory ${dir} is not accessible (${describeError(err)}); create it first`,
      {
        cause: err,
      },
    );
  }
  const segment = names.find((n) => n.startsWith(`${base}.`) && /^\d{6,}$/.test(n.slice(base.length + 1)));
  if (segment) {
    throw new PostgresStoreError(
      'io_error',
      `cannot export to ${path}: ${join(dir, segment)} is a sealed segment of a log there; export to a new path`,
    );
  }
  if (overwrite) return;
  for (const p of [path, cpPath]) {
    if (
      await stat(p).then(
        () => true,
        () => false,
      )
    ) {
      throw new PostgresStoreError('io_error', `cannot export to ${path}: ${p} exists; choose a new path (or pass overwrite)`);
    }
  }
}

/** Creates `file` (0600, exclusive), lets `fill` write to it, then syncs and closes it. */
async function writeFileFrom(file: string, fill: (write: (s: string) => Promise<void>) => Promise<void>): Promise<void> {
  const fh: FileHandle = await open(file, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o600);
  try {
    await fill(async (s) => {
      const buf = Buffer.from(s);
      let off = 0;
      while (off < buf.length) off += (await fh.write(buf, off, buf.length - off)).bytesWritten;
    });
    await fh.datasync();
  } finally {
    await fh.close();
  }
}

/** Where the database's audit log first fails verification. */
export interface PostgresFirstBad {
  /** The entry (sequence number) that is bad or missing; for a checkpoint, its `entries`. */
  seq: number;
  reason: VerifyReason;
  /** What was found, for people. */
  message: string;
}

/** Verdict of {@link verifyPostgresAuditLog}: the same shape of facts as `verifyLog`'s. */
export interface PostgresVerifyResult {
  ok: boolean;
  /** Entries that verified. */
  entries: number;
  /** Hash of the last entry that verified (genesis for none). */
  head: string;
  first_bad?: PostgresFirstBad;
  /** The latest checkpoint used. */
  checkpoint?: { entries: number; head: string; time: string; signed: boolean; key_id?: string };
  /** Entries after the latest checkpoint. */
  uncheckpointed: number;
  /** Checkpoints set aside because they are not signed by the given public key. */
  checkpoints_ignored: number;
}

/**
 * Verifies the audit log inside the database, from one snapshot and in bounded memory: each
 * stored line as the file verifier checks it (SPEC.md section 4: shape, hash over the stored
 * bytes, sequence, link), the row's copied columns against its line, the head row against the last
 * entry, and every checkpoint (section 5.4: `truncated`, `rollback`; with `publicKey`, only
 * checkpoints signed by it count, each must verify, and one must exist). Never throws for a
 * damaged log (`ok: false` with the first bad entry); throws `PostgresStoreError` when the
 * database cannot be read.
 */
export async function verifyPostgresAuditLog(
  target: pg.Pool | string,
  options: { publicKey?: KeyInput } = {},
): Promise<PostgresVerifyResult> {
  const h = poolFor(target, 1);
  try {
    return await inSnapshot(h, 'verifying the audit log', (c) => verifyIn(c, options.publicKey));
  } finally {
    if (h.owned) await h.pool.end().catch(() => {});
  }
}

interface UsedCheckpoint {
  entries: number;
  head: string;
  offset: number;
  time: string;
  key_id?: string;
  signed: boolean;
}

async function verifyIn(c: pg.PoolClient, publicKey: KeyInput | undefined): Promise<PostgresVerifyResult> {
  const result: PostgresVerifyResult = { ok: true, entries: 0, head: GENESIS_HASH, uncheckpointed: 0, checkpoints_ignored: 0 };
  const fail = (seq: number, reason: VerifyReason, message: string): PostgresVerifyResult => {
    result.ok = false;
    result.first_bad = { seq, reason, message };
    return result;
  };

  // Checkpoints first (SPEC.md 5.4): a malformed or forged one is the verdict before any walk.
  const used: UsedCheckpoint[] = [];
  const cps = await c.query<{ id: string; line: string }>('SELECT id, line FROM forge_audit_checkpoints ORDER BY id');
  for (const row of cps.rows) {
    const d = decodeCheckpoint(row.line, publicKey === undefined ? {} : { publicKey });
    if (!d.ok) return fail(0, 'bad_checkpoint', `checkpoint ${row.id} is malformed: ${d.message}`);
    if (d.signature === 'other_key') {
      result.checkpoints_ignored++;
      continue;
    }
    const cp = d.checkpoint;
    if (d.signature === 'invalid') {
      return fail(
        cp.entries,
        'signature_invalid',
        `checkpoint ${row.id} (entries ${cp.entries}) has a signature that does not verify: it was altered`,
      );
    }
    used.push({
      entries: cp.entries,
      head: cp.head,
      offset: cp.offset,
      time: cp.time,
      signed: cp.sig !== undefined,
      ...(cp.key_id ? { key_id: cp.key_id } : {}),
    });
  }
  if (publicKey !== undefined && used.length === 0) {
    return fail(0, 'signature_invalid', 'no checkpoint is signed by this key: nothing vouches for this log (record a signed checkpoint)');
  }
  const marks = new Map<number, UsedCheckpoint[]>();
  for (const cp of used) if (cp.entries > 0) marks.set(cp.entries, [...(marks.get(cp.entries) ?? []), cp]);

  let expected = 1;
  let prev = GENESIS_HASH;
  let offset = 0;
  for await (const row of storedRows(c)) {
    if (row.seq !== expected) return fail(expected, 'seq_gap', `entry ${expected} is missing (the next row is ${row.seq})`);
    const d = decodeEntry(row.line);
    if (!d.ok) return fail(expected, d.reason, `entry ${expected}: ${d.message}`);
    const e = d.entry;
    if (e.seq !== expected) return fail(expected, 'seq_gap', `row ${row.seq} holds entry ${e.seq}`);
    if (e.prev !== prev) return fail(expected, 'broken_link', `entry ${expected} does not link to entry ${expected - 1}`);
    offset += Buffer.byteLength(row.line);
    if (row.hash !== e.hash || row.end_offset !== offset) {
      return fail(expected, 'hash_mismatch', `row ${expected}'s hash or end_offset column disagrees with its line`);
    }
    for (const cp of marks.get(expected) ?? []) {
      if (cp.head !== e.hash || cp.offset !== offset) {
        return fail(
          expected,
          'rollback',
          `entry ${expected} is not the one checkpointed at ${cp.time}: the log was rewritten or restored from another copy`,
        );
      }
    }
    prev = e.hash;
    result.entries = expected;
    result.head = prev;
    expected++;
  }
  const maxCovered = Math.max(0, ...used.map((c) => c.entries));
  if (maxCovered > result.entries) {
    return fail(
      result.entries + 1,
      'truncated',
      `the log has ${result.entries} entries, but a checkpoint records ${maxCovered}: it was cut`,
    );
  }
  const head = (await c.query<{ seq: string; hash: string; bytes: string }>('SELECT seq, hash, bytes FROM forge_audit_head WHERE id = 1'))
    .rows[0];
  if (!head || Number(head.seq) !== result.entries || head.hash !== result.head || Number(head.bytes) !== offset) {
    const why = head ? `says entry ${head.seq}` : 'is missing';
    return fail(
      result.entries + 1,
      Number(head?.seq ?? 0) > result.entries ? 'truncated' : 'rollback',
      `the head row ${why}, but the entries end at ${result.entries}`,
    );
  }
  const latest = used.reduce<UsedCheckpoint | undefined>((a, x) => (!a || x.entries >= a.entries ? x : a), undefined);
  if (latest) {
    result.checkpoint = { entries: latest.entries, head: latest.head, time: latest.time, signed: latest.signed };
    if (latest.key_id) result.checkpoint.key_id = latest.key_id;
  }
  result.uncheckpointed = result.entries - (latest?.entries ?? 0);
  return result;
}
