import { createHash } from 'node:crypto';
import {
  checkGapQuery,
  type GapKind,
  type GapQuery,
  type GapRecord,
  type GapStore,
  GapStoreError,
  type GapSummary,
  openGapWriter,
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

/**
 * The PostgreSQL implementation of `GapStore` (@forge/toolsmith): the gap observations of one
 * project in the table `forge_toolsmith_gaps` (migration 40, `TOOLSMITH_MIGRATIONS`).
 * - `record` goes through the file store's group commit (`openGapWriter`: sanitised by
 *   `sanitizeGapRecord`); the concurrent calls of one store share one transaction: the
 *   project's advisory lock, one INSERT of the batch, and a DELETE of every row older than the
 *   newest `maxRecords`. So `seq` order is commit order, a batch is seen whole or not at all,
 *   and a writer killed mid-batch leaves nothing.
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

  const unusable = (what: string, err: unknown): GapStoreError => {
    const code = (err as { code?: unknown } | undefined)?.code;
    const detail = redactText(err instanceof Error ? err.message || String(code ?? err.name) : String(err));
    const todo =
      code === UNDEFINED_TABLE
        ? 'the database is not migrated: run the migrations of @forge/postgres (forge does on start)'
        : 'check that the server runs and this user may write there';
    return new GapStoreError('unusable', `gap store ${where}: ${what} failed: ${detail}; ${todo}`, { cause: err });
  };

  const commit = async (batch: GapRecord[]): Promise<void> => {
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
        [project, batch.map((r) => r.kind), batch.map((r) => r.signature), batch.map((r) => JSON.stringify(r))],
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

  const writing = openGapWriter({ where, now: clock, onError, commit });

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
    record: writing.record,
    note: writing.note,
    async summary(q: GapQuery): Promise<GapSummary[]> {
      checkGapQuery(q);
      return summarizeGaps(await read(q.only), q, q.now ?? clock());
    },
    history: (kind, signature) => read({ kind, signature }),
    flush: writing.flush,
    close: writing.close,
  };
}
