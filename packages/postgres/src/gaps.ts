import { createHash } from 'node:crypto';
import {
  type GapInput,
  type GapKind,
  type GapQuery,
  type GapRecord,
  type GapStore,
  GapStoreError,
  type GapSummary,
  sanitizeGapRecord,
  summarizeGaps,
} from '@forge/toolsmith';
import type pg from 'pg';
import { poolLocator } from './registry-record.js';
import { GAPS_TABLE } from './toolsmith-schema.js';
import { redactText, redactUrl } from './url.js';

export { GAPS_TABLE, TOOLSMITH_MIGRATIONS } from './toolsmith-schema.js';

/** Options of {@link postgresGapStore}. */
export interface PostgresGapStoreOptions {
  /** Tells apart the projects sharing one database (default `''`): each is a store of its own. */
  project?: string;
  /** Records kept per project (the ring; default 10,000): older ones are deleted by each commit. */
  maxRecords?: number;
  /** The clock (ms since the epoch) for records given without `at` and for `summary` without `now`. */
  now?: () => number;
  /** Where best-effort writes (`note`) report failures. Default: a process warning. */
  onError?: (err: Error) => void;
  /** What messages call the database instead of the pool's connection (a URL: its password is masked anyway). */
  where?: string;
}

/** The server's word for a table that is not there: the database is not migrated. */
const UNDEFINED_TABLE = '42P01';

/** The advisory lock key of a project's gap writers: 64 bits of sha256, as a bigint string. */
function lockKey(project: string): string {
  return createHash('sha256').update(`forge_toolsmith_gaps\0${project}`).digest().readBigInt64BE(0).toString();
}

interface Pending {
  record: GapRecord;
  resolve: () => void;
  reject: (err: Error) => void;
}

/**
 * The PostgreSQL implementation of `GapStore` (@forge/toolsmith): the gap observations of one
 * project in the table `forge_toolsmith_gaps` (migration 40, `TOOLSMITH_MIGRATIONS`).
 * - `record` sanitises as the file store does (`sanitizeGapRecord`); concurrent calls of one
 *   store share one transaction (group commit): the project's advisory lock, one INSERT of the
 *   batch, and a DELETE of every row older than the newest `maxRecords`. So `seq` order is commit
 *   order, a batch is seen whole or not at all, and a writer killed mid-batch leaves nothing.
 * - reads (`summary`, `history`) see the newest `maxRecords` committed rows of the project, in
 *   `seq` order (a row that does not hold a record is skipped), and never wait for writers; the
 *   summary is `summarizeGaps`, the file store's.
 *
 * `pool` is the caller's and stays open. Errors are `GapStoreError`s (`invalid_record`,
 * `unusable` — the message names the database, password masked, and what to do —, `closed`).
 */
export function postgresGapStore(pool: pg.Pool, options: PostgresGapStoreOptions = {}): GapStore {
  const project = options.project ?? '';
  const max = options.maxRecords ?? 10_000;
  if (!Number.isInteger(max) || max < 1) throw new RangeError(`postgresGapStore: maxRecords must be a positive integer (got ${max})`);
  const clock = options.now ?? Date.now;
  const onError = options.onError ?? ((err: Error) => process.emitWarning(err.message, { code: 'FORGE_TOOLSMITH_GAPS' }));
  const base = options.where !== undefined ? redactUrl(options.where) : poolLocator(pool.options);
  const where = `${base}#${GAPS_TABLE}${project ? `/${encodeURIComponent(project)}` : ''}`;
  const key = lockKey(project);
  let queue: Pending[] = [];
  let running: Promise<void> | undefined;
  let closed = false;

  const unusable = (what: string, err: unknown): GapStoreError => {
    const code = (err as { code?: unknown } | undefined)?.code;
    const detail = redactText(err instanceof Error ? err.message || String(code ?? err.name) : String(err));
    const todo =
      code === UNDEFINED_TABLE
        ? 'the database is not migrated: run the migrations of @forge/postgres (forge does on start)'
        : 'check that the server runs and this user may write there';
    return new GapStoreError('unusable', `gap store ${where}: ${what} failed: ${detail}; ${todo}`, { cause: err });
  };

  const commit = async (batch: Pending[]): Promise<void> => {
    let client: pg.PoolClient;
    try {
      client = await pool.connect();
    } catch (err) {
      throw unusable('connecting', err);
    }
    let broken = false;
    try {
      await client.query('BEGIN');
      await client.query('SELECT pg_advisory_xact_lock($1)', [key]);
      await client.query(
        `INSERT INTO forge_toolsmith_gaps (project, kind, signature, record)
         SELECT $1, k, s, r FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS b(k, s, r, n) ORDER BY n`,
        [project, batch.map((p) => p.record.kind), batch.map((p) => p.record.signature), batch.map((p) => JSON.stringify(p.record))],
      );
      await client.query(
        `DELETE FROM forge_toolsmith_gaps WHERE project = $1 AND seq <= (
           SELECT seq FROM forge_toolsmith_gaps WHERE project = $1 ORDER BY seq DESC OFFSET $2 LIMIT 1)`,
        [project, max],
      );
      await client.query('COMMIT');
    } catch (err) {
      broken = true;
      await client.query('ROLLBACK').catch(() => {});
      throw unusable('recording', err);
    } finally {
      client.release(broken);
    }
  };

  const drain = async (): Promise<void> => {
    while (queue.length > 0) {
      const batch = queue;
      queue = [];
      try {
        await commit(batch);
        for (const p of batch) p.resolve();
      } catch (err) {
        for (const p of batch) p.reject(err as Error);
      }
    }
    running = undefined;
  };

  const record = (r: GapInput): Promise<void> => {
    if (closed) return Promise.reject(new GapStoreError('closed', `gap store ${where} is closed; open it again to record`));
    const s = sanitizeGapRecord({ ...r, at: r.at ?? clock() });
    if (!s.ok) return Promise.reject(new GapStoreError('invalid_record', `${s.message}; not recorded`, { field: s.field }));
    return new Promise<void>((resolve, reject) => {
      queue.push({ record: s.record, resolve, reject });
      // Callers of the same tick share one batch: the drain starts after they have queued.
      running ??= Promise.resolve().then(drain);
    });
  };

  /** The newest `max` records of the project (of one gap, when given), oldest first. */
  const read = async (only?: { kind: GapKind; signature: string }): Promise<GapRecord[]> => {
    let rows: { record: string }[];
    try {
      const cutoff = `COALESCE((SELECT seq FROM forge_toolsmith_gaps WHERE project = $1 ORDER BY seq DESC OFFSET $2 LIMIT 1), -1)`;
      const r = only
        ? await pool.query<{ record: string }>(
            `SELECT record FROM forge_toolsmith_gaps WHERE project = $1 AND kind = $3 AND signature = $4 AND seq > ${cutoff} ORDER BY seq`,
            [project, max, only.kind, only.signature],
          )
        : await pool.query<{ record: string }>(
            `SELECT record FROM forge_toolsmith_gaps WHERE project = $1 AND seq > ${cutoff} ORDER BY seq`,
            [project, max],
          );
      rows = r.rows;
    } catch (err) {
      throw unusable('reading', err);
    }
    const out: GapRecord[] = [];
    for (const row of rows) {
      let value: unknown;
      try {
        value = JSON.parse(row.record);
      } catch {
        continue; // not JSON (damaged): skipped, as the file store skips a torn line
      }
      const s = sanitizeGapRecord(value);
      if (s.ok && (!only || (s.record.kind === only.kind && s.record.signature === only.signature))) out.push(Object.freeze(s.record));
    }
    return out;
  };

  return {
    record,
    note(r) {
      try {
        record(r).catch((err: Error) => onError(err));
      } catch (err) {
        onError(err as Error);
      }
    },
    async summary(q: GapQuery): Promise<GapSummary[]> {
      if (!(q.threshold >= 1)) throw new RangeError(`summary: threshold must be at least 1 (got ${q.threshold})`);
      if (!(q.windowMs >= 0)) throw new RangeError(`summary: windowMs must be at least 0 (got ${q.windowMs})`);
      return summarizeGaps(await read(q.only), q, q.now ?? clock());
    },
    history: (kind, signature) => read({ kind, signature }),
    async flush() {
      while (running !== undefined) await running;
    },
    async close() {
      closed = true;
      while (running !== undefined) await running;
    },
  };
}
