import { createPrivateKey } from 'node:crypto';
import {
  type AppendResult,
  type AuditEntry,
  AuditError,
  type AuditLog,
  type Checkpoint,
  type EntriesOptions,
  encodeCheckpoint,
  encodePrepared,
  type JsonValue,
  type KeyInput,
  type LogHead,
  leafHash,
  type NoteSigner,
  type PreparedAppend,
  prepareAppend,
  type RotateResult,
} from '@forge/audit-chain';
import type pg from 'pg';
import { AUDIT_CHANNEL, asStoreError, readEntries } from './audit-read.js';
import { advanceTree, recordTreeCheckpoint, type TreeColumns } from './audit-tree.js';
import { describeError, PostgresStoreError } from './errors.js';
import { assertMigrated, migrate } from './migrate.js';
import { checkConnection, type PoolHandle, poolFor } from './pool.js';
import { retryLostConnection } from './retry.js';

export { AUDIT_CHANNEL };

/** Options of {@link PostgresAuditLog.entries}: those of `AuditLog.entries`, and following. */
export interface PostgresEntriesOptions extends EntriesOptions {
  /**
   * Keep waiting for entries committed later by any process (woken by `LISTEN forge_audit`, with a
   * poll every `pollMs` as a fallback) until `signal` aborts; the iterator then ends normally.
   * Holds one connection of the pool while it follows.
   */
  follow?: boolean;
  signal?: AbortSignal;
  /** Poll interval while following, in case a notification is lost (ms, default 1000). */
  pollMs?: number;
}

/** The audit log in PostgreSQL: an `AuditLog` whose `entries()` can also follow. */
export interface PostgresAuditLog extends AuditLog {
  entries(options?: PostgresEntriesOptions): AsyncIterable<AuditEntry>;
}

/** Options of {@link openPostgresAuditLog}. */
export interface PostgresAuditLogOptions {
  /** Ed25519 private key (PEM or KeyObject) used to sign checkpoints. */
  signingKey?: KeyInput;
  /** Largest entry line accepted, in bytes (default 1 MiB). Larger appends fail `entry_too_large`. */
  maxEntryBytes?: number;
  /** Most entries in one batch transaction (default 2000). */
  maxBatchEntries?: number;
  /** Most bytes of entry lines in one batch transaction (default 4 MiB). */
  maxBatchBytes?: number;
  /** Clock for entry and checkpoint times (default `() => new Date()`). */
  clock?: () => Date;
  /** Apply pending migrations when opening (default true); when false, an unmigrated database is refused. */
  migrate?: boolean;
  /** Send `NOTIFY forge_audit, '<seq>'` after each batch commits (default true). */
  notify?: boolean;
  /** Called after each committed batch, with its size (for metrics and tests). */
  onBatch?: (batch: { entries: number; firstSeq: number; lastSeq: number }) => void;
  /**
   * The tree checkpoints signed with `signingKey` at each checkpoint (audit-tree.ts): the origin
   * line naming the log (default `postgres <host/database>`) and the key name (default "forge-audit").
   */
  tree?: { origin?: string; keyName?: string };
}

interface Pending {
  p: PreparedAppend;
  resolve(r: AppendResult): void;
  reject(e: unknown): void;
}

const SELECT_HEAD = 'SELECT seq, hash, bytes FROM forge_audit_head WHERE id = 1';
/** The head, and the batch transaction's id (to learn its outcome should the connection drop at COMMIT). */
const SELECT_HEAD_XID =
  'SELECT seq, hash, bytes, tree_size, tree_rows, pg_current_xact_id()::text AS xid FROM forge_audit_head WHERE id = 1';
/** The head with the tree's right edge (audit-tree.ts). */
const SELECT_HEAD_TREE = 'SELECT seq, hash, bytes, tree_size, tree_rows FROM forge_audit_head WHERE id = 1';
/**
 * The batch's rows and the new head in one statement. Lines, types and hashes travel as three texts
 * split on line feeds (an entry line holds none but its last byte), which costs the client and the
 * server far less than text arrays: $1 ts, $2 first seq, $3 the lines concatenated (each with its
 * line feed, exactly the bytes of the file form), $4 the types and $5 the hashes joined by line
 * feeds, $6 the byte length before the batch, $7 entry count, then the new head $8–$10.
 */
const INSERT_BATCH = `WITH ins AS (
  INSERT INTO forge_audit_entries (seq, ts, type, hash, end_offset, line)
  SELECT $2::bigint + a.ord - 1, $1::timestamptz, b.t, c.h, $6::bigint + sum(octet_length(a.l) + 1) OVER (ORDER BY a.ord), a.l || E'\\n'
  FROM string_to_table($3, E'\\n') WITH ORDINALITY a(l, ord)
  JOIN string_to_table($4, E'\\n') WITH ORDINALITY b(t, ord) USING (ord)
  JOIN string_to_table($5, E'\\n') WITH ORDINALITY c(h, ord) USING (ord)
  WHERE a.ord <= $7
)
UPDATE forge_audit_head SET seq = $8, hash = $9, bytes = $10, tree_size = $8, tree_rows = $11 WHERE id = 1`;

interface HeadRow {
  seq: string;
  hash: string;
  bytes: string;
}

/**
 * Opens the audit log kept in PostgreSQL (tables `forge_audit_head`, `forge_audit_entries`,
 * `forge_audit_checkpoints`): the same `AuditLog` contract and the exact entry lines of the
 * audit-chain format (SPEC.md), for any number of processes on any number of hosts. `target` is
 * a `pg.Pool` (left open on close) or a connection string (a pool of its own, ended on close).
 *
 * Runs pending migrations first (unless `migrate: false`), then refuses a database that is not
 * UTF8 (`wrong_encoding`), whose head disagrees with its last entry (`log_corrupt`, an
 * AuditError) or that is behind its latest checkpoint (`log_behind_checkpoint`). Connection and
 * schema failures are `PostgresStoreError`s; messages never show a password.
 */
export async function openPostgresAuditLog(target: pg.Pool | string, options: PostgresAuditLogOptions = {}): Promise<PostgresAuditLog> {
  const h = poolFor(target);
  try {
    await checkConnection(h);
    await checkEncoding(h);
    if (options.migrate ?? true) await migrate(h.pool);
    else await assertMigrated(h.pool);
    await checkHead(h);
  } catch (err) {
    if (h.owned) await h.pool.end().catch(() => {});
    throw asStoreError(err, h, 'opening the audit log');
  }
  return new PgAuditLog(h, options);
}

async function checkEncoding(h: PoolHandle): Promise<void> {
  const r = await h.pool.query<{ server_encoding: string }>('SHOW server_encoding');
  const enc = r.rows[0]?.server_encoding;
  if (enc !== 'UTF8') {
    throw new PostgresStoreError(
      'wrong_encoding',
      `${h.label} has encoding ${enc}: the audit log stores its entry lines byte for byte and needs a UTF8 database (CREATE DATABASE … ENCODING 'UTF8')`,
    );
  }
}

/**
 * Refuses a head row that disagrees with the last entry, or a log behind its latest checkpoint.
 * Reads the head row FOR SHARE, so it waits for a batch in flight to end: a writer killed after
 * sending its COMMIT still holds the row until the server finishes that commit, and a handle
 * opened after the kill then sees everything that writer will ever have stored.
 */
async function checkHead(h: PoolHandle): Promise<void> {
  const c = await h.pool.connect();
  try {
    await c.query('BEGIN');
    await checkHeadIn(c, h.label);
    await c.query('COMMIT');
  } catch (err) {
    await c.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    c.release();
  }
}

async function checkHeadIn(q: pg.PoolClient, label: string): Promise<void> {
  const head = (await q.query<HeadRow>(`${SELECT_HEAD} FOR SHARE`)).rows[0];
  const last = (
    await q.query<{ seq: string; hash: string; end_offset: string }>(
      'SELECT seq, hash, end_offset FROM forge_audit_entries ORDER BY seq DESC LIMIT 1',
    )
  ).rows[0];
  const headSeq = Number(head?.seq ?? -1);
  const lastSeq = Number(last?.seq ?? 0);
  if (!head || headSeq !== lastSeq || (last && (last.hash !== head.hash || last.end_offset !== head.bytes))) {
    throw new AuditError(
      'log_corrupt',
      `the audit head in ${label} (entry ${head?.seq ?? 'missing'}) does not match its last entry (${lastSeq}); refusing to append to a damaged log: run verifyPostgresAuditLog (forge doctor)`,
    );
  }
  const cp = (
    await q.query<{ entries: string; head: string; offset: string; time: Date }>(
      'SELECT entries, head, "offset", time FROM forge_audit_checkpoints ORDER BY entries DESC, id DESC LIMIT 1',
    )
  ).rows[0];
  if (!cp || cp.entries === '0') return;
  const at = (
    await q.query<{ hash: string; end_offset: string }>('SELECT hash, end_offset FROM forge_audit_entries WHERE seq = $1', [cp.entries])
  ).rows[0];
  if (!at || at.hash !== cp.head || at.end_offset !== cp.offset) {
    throw new AuditError(
      'log_behind_checkpoint',
      `the audit log in ${label} ${at ? 'does not hold the checkpointed entry' : `has ${lastSeq} entries, fewer than its checkpoint`} (checkpoint of ${cp.time.toISOString()}: ${cp.entries} entries, head ${cp.head.slice(0, 12)}…); it was truncated or restored from an older copy: restore it before appending`,
    );
  }
}

class PgAuditLog implements PostgresAuditLog {
  readonly path: string;
  private readonly h: PoolHandle;
  private readonly o: PostgresAuditLogOptions;
  private readonly clock: () => Date;
  private readonly maxEntryBytes: number;
  private readonly maxBatchEntries: number;
  private readonly maxBatchBytes: number;
  private readonly treeOrigin: string;
  private readonly treeSigner: NoteSigner | undefined;
  private queue: Pending[] = [];
  private running: Promise<void> | undefined;
  private closed = false;
  private notifying: Promise<void> | undefined;
  private notifySeq = 0;
  private notifiedSeq = 0;

  constructor(h: PoolHandle, o: PostgresAuditLogOptions) {
    this.h = h;
    this.o = o;
    this.path = `${h.label} (forge_audit_entries)`;
    this.clock = o.clock ?? (() => new Date());
    this.maxEntryBytes = o.maxEntryBytes ?? 1 << 20;
    this.maxBatchEntries = o.maxBatchEntries ?? 2000;
    this.maxBatchBytes = Math.max(o.maxBatchBytes ?? 4 << 20, this.maxEntryBytes);
    if (o.signingKey !== undefined)
      encodeCheckpoint({ entries: 0, head: '0'.repeat(64), segment: 1, offset: 0, time: new Date(0).toISOString() }, o); // invalid_key now, not at the first checkpoint
    this.treeOrigin = o.tree?.origin ?? `postgres ${h.label}`;
    const key = o.signingKey;
    this.treeSigner =
      key === undefined
        ? undefined
        : { name: o.tree?.keyName ?? 'forge-audit', privateKey: typeof key === 'string' ? createPrivateKey(key) : key };
  }

  append(type: string, data: JsonValue = null): Promise<AppendResult> {
    try {
      if (this.closed) throw new AuditError('closed', `audit log ${this.path} is closed; open it again to append`);
      const p = prepareAppend(type, data, { maxEntryBytes: this.maxEntryBytes });
      return new Promise<AppendResult>((resolve, reject) => {
        this.queue.push({ p, resolve, reject });
        this.kick();
      });
    } catch (err) {
      return Promise.reject(err);
    }
  }

  async flush(): Promise<void> {
    while (this.running) await this.running;
  }

  async head(): Promise<LogHead> {
    this.assertOpen();
    await this.flush();
    const r = await this.query<HeadRow>(SELECT_HEAD);
    const row = r.rows[0] as HeadRow;
    return { seq: Number(row.seq), hash: row.hash };
  }

  async checkpoint(): Promise<Checkpoint> {
    this.assertOpen();
    await this.flush();
    return this.transaction(async (c) => {
      const row = (await c.query<HeadRow & TreeColumns>(`${SELECT_HEAD_TREE} FOR UPDATE`)).rows[0] as HeadRow & TreeColumns;
      if (row.tree_size !== row.seq) {
        // Entries an older forge appended before the tree: counted now.
        const cols = await advanceTree(c, row, []);
        await c.query('UPDATE forge_audit_head SET tree_size = seq, tree_rows = $1 WHERE id = 1', [cols]);
        Object.assign(row, { tree_size: row.seq, tree_rows: cols });
      }
      const time = this.clock().toISOString();
      const fields = { entries: Number(row.seq), head: row.hash, segment: 1, offset: Number(row.bytes), time };
      const { checkpoint, line } = encodeCheckpoint(fields, this.o.signingKey === undefined ? {} : { signingKey: this.o.signingKey });
      await c.query('INSERT INTO forge_audit_checkpoints (entries, head, "offset", time, key_id, line) VALUES ($1, $2, $3, $4, $5, $6)', [
        fields.entries,
        fields.head,
        fields.offset,
        time,
        checkpoint.key_id ?? null,
        line,
      ]);
      await recordTreeCheckpoint(c, row, this.treeOrigin, this.treeSigner);
      return checkpoint;
    }, 'recording a checkpoint');
  }

  /**
   * A database log has one segment: rotation seals nothing. Commits what was appended and
   * returns `sealed: 0` with the entry count; retention is the database's (or an export's).
   */
  async rotate(): Promise<RotateResult> {
    const { seq } = await this.head();
    return { sealed: 0, path: this.path, entries: seq };
  }

  entries(options: PostgresEntriesOptions = {}): AsyncIterable<AuditEntry> {
    return readEntries(this.h, options, () => this.assertOpen());
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
    await this.notifying;
    if (this.h.owned) {
      const pool = this.h.pool as pg.Pool & { ended?: boolean };
      if (!pool.ended) await pool.end();
    }
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // ---- internals -------------------------------------------------------------------------

  private assertOpen(): void {
    if (this.closed) throw new AuditError('closed', `audit log ${this.path} is closed; open it again`);
  }

  /** Starts the batch loop unless it runs; appends made in the same tick join the first batch. */
  private kick(): void {
    if (this.running) return;
    this.running = new Promise<void>((resolve) => queueMicrotask(resolve))
      .then(async () => {
        while (this.queue.length > 0) {
          const batch = this.takeBatch();
          // commitBatch answers every append itself; this only guards against a bug leaving one hanging.
          await this.commitBatch(batch).catch((err: unknown) => {
            for (const p of batch) p.reject(err);
          });
        }
      })
      .finally(() => {
        this.running = undefined;
        if (this.queue.length > 0) this.kick();
      });
  }

  private takeBatch(): Pending[] {
    let n = 0;
    let bytes = 0;
    while (n < this.queue.length && n < this.maxBatchEntries) {
      const b = (this.queue[n] as Pending).p.maxBytes;
      if (n > 0 && bytes + b > this.maxBatchBytes) break;
      bytes += b;
      n++;
    }
    return this.queue.splice(0, n);
  }

  /**
   * One transaction: lock the head row, chain the batch's lines onto it, insert them in one
   * statement with the new head, commit. Resolves every append after COMMIT, or rejects them all.
   */
  private async commitBatch(batch: Pending[]): Promise<void> {
    let client: pg.PoolClient | undefined;
    let sentCommit = false;
    let last: { seq: number; hash: string } | undefined;
    let results: AppendResult[] = [];
    let xid: string | undefined;
    try {
      client = await this.h.pool.connect();
      const r = (await client.query(`BEGIN; ${SELECT_HEAD_XID} FOR UPDATE`)) as unknown as pg.QueryResult<
        HeadRow & TreeColumns & { xid: string }
      >[];
      const row = r[1]?.rows[0];
      xid = row?.xid;
      if (!row) throw new Error('the forge_audit_head row is missing');
      const ts = this.clock().toISOString();
      let seq = Number(row.seq);
      let prev = row.hash;
      let offset = Number(row.bytes);
      const first = seq + 1;
      const before = offset;
      const types: string[] = [];
      const hashes: string[] = [];
      const lines: string[] = [];
      const leaves: Buffer[] = [];
      results = [];
      for (const item of batch) {
        seq++;
        const e = encodePrepared(item.p, { seq, ts, prev });
        offset += e.bytes;
        types.push(item.p.type);
        hashes.push(e.hash);
        lines.push(e.line);
        // The entry's leaf in the log's Merkle tree: the same line, the same hash as the file log's.
        const leaf = leafHash(Buffer.from(e.line.slice(0, -1), 'utf8'));
        leaves.push(leaf);
        results.push({ seq, hash: e.hash, ts, leaf: leaf.toString('hex') });
        prev = e.hash;
      }
      const treeRows = await advanceTree(client, row, leaves);
      const params = [ts, first, lines.join(''), types.join('\n'), hashes.join('\n'), before, batch.length, seq, prev, offset, treeRows];
      await client.query(INSERT_BATCH, params);
      last = { seq, hash: prev };
      sentCommit = true;
      await client.query('COMMIT');
    } catch (err) {
      if (client && !sentCommit) await client.query('ROLLBACK').catch(() => {});
      client?.release(err instanceof Error ? err : true);
      client = undefined;
      // A connection lost during COMMIT leaves the outcome unknown: look before answering.
      if (sentCommit && last && xid && (await this.committed(xid))) {
        this.acknowledge(batch, results, last.seq);
        return;
      }
      const e = new AuditError(
        'write_failed',
        `append of ${batch.length} entr${batch.length === 1 ? 'y' : 'ies'} to ${this.path} failed and was rolled back: ${describeError(err, this.h.secrets)}`,
        { cause: err },
      );
      for (const p of batch) p.reject(e);
      return;
    } finally {
      client?.release();
    }
    this.acknowledge(batch, results, last.seq);
  }

  private acknowledge(batch: Pending[], results: AppendResult[], lastSeq: number): void {
    for (const [i, p] of batch.entries()) p.resolve(results[i] as AppendResult);
    try {
      this.o.onBatch?.({ entries: batch.length, firstSeq: lastSeq - batch.length + 1, lastSeq });
    } catch {
      // A metrics callback that throws must not undo an acknowledgement.
    }
    if (this.o.notify ?? true) this.notify(lastSeq);
  }

  /**
   * Whether transaction `xid` committed, asked on another connection; waits while the server
   * still reports it in progress (its COMMIT may be under way). Unknown counts as not committed.
   */
  private async committed(xid: string): Promise<boolean> {
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      try {
        const r = await this.h.pool.query<{ s: string | null }>('SELECT pg_xact_status($1::xid8) AS s', [xid]);
        const status = r.rows[0]?.s;
        if (status !== 'in progress') return status === 'committed';
      } catch {
        // The server may be restarting: ask again.
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return false;
  }

  /**
   * NOTIFY after COMMIT, never inside the append transaction (a pending NOTIFY takes a global lock
   * at commit). One notification in flight at a time: batches that commit meanwhile are coalesced
   * into the next one, which carries the newest seq.
   */
  private notify(seq: number): void {
    this.notifySeq = Math.max(this.notifySeq, seq);
    if (this.notifying) return;
    this.notifying = (async () => {
      while (this.notifySeq > this.notifiedSeq) {
        const s = this.notifySeq;
        try {
          await this.h.pool.query('SELECT pg_notify($1, $2)', [AUDIT_CHANNEL, String(s)]);
        } catch {
          // A lost notification delays listeners until the next one; the entries are committed.
        }
        this.notifiedSeq = s;
      }
    })().finally(() => {
      this.notifying = undefined;
    });
  }

  /** A read, tried again over a lost connection for a while (a restart of the database). */
  private async query<R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>> {
    try {
      return await retryLostConnection(() => this.h.pool.query<R>(text, values));
    } catch (err) {
      throw new PostgresStoreError('query_failed', `query on ${this.path} failed: ${describeError(err, this.h.secrets)}`, {
        cause: err,
        secrets: this.h.secrets,
      });
    }
  }

  private async transaction<T>(fn: (c: pg.PoolClient) => Promise<T>, what: string): Promise<T> {
    let c: pg.PoolClient;
    try {
      c = await this.h.pool.connect();
    } catch (err) {
      throw new PostgresStoreError('connect_failed', `${what} on ${this.path}: ${describeError(err, this.h.secrets)}`, { cause: err });
    }
    try {
      await c.query('BEGIN');
      const out = await fn(c);
      await c.query('COMMIT');
      c.release();
      return out;
    } catch (err) {
      await c.query('ROLLBACK').catch(() => {});
      c.release(true);
      if (err instanceof AuditError) throw err;
      throw new AuditError('write_failed', `${what} on ${this.path} failed and was rolled back: ${describeError(err, this.h.secrets)}`, {
        cause: err,
      });
    }
  }
}
