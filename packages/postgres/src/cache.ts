import {
  assertCacheKey,
  CACHE_KEY_PATTERN,
  type CacheEntry,
  type CacheLimits,
  type CacheStore,
  DEFAULT_CACHE_LIMITS,
  isCacheEntry,
} from '@forge/runner';
import type pg from 'pg';
import { CACHE_TABLE } from './cache-runs-schema.js';
import { describeError, PostgresStoreError } from './errors.js';
import { poolLocator } from './registry-record.js';
import { redactUrl } from './url.js';

export { CACHE_RUNS_MIGRATIONS, CACHE_TABLE } from './cache-runs-schema.js';

/** The runner's `CacheStore`, over PostgreSQL. */
export type PostgresCacheStore = CacheStore & { readonly kind: 'postgres' };

/** Options of {@link postgresCacheStore}. */
export interface PostgresCacheStoreOptions {
  /** Entries, bytes and age kept (defaults: 2000 entries, 64 MiB, 7 days: the runner's). */
  limits?: Partial<CacheLimits>;
  /** Clock (ms since the epoch) for `created_at` and the age limit. */
  now?: () => number;
  /** What `where` shows instead of the pool's connection (a URL: its password is masked anyway). */
  where?: string;
}

const UNDEFINED_TABLE = '42P01';

/**
 * The result cache of many front-ends in one table, `forge_cache` (migration 30,
 * `CACHE_RUNS_MIGRATIONS`): the runner's `CacheStore` contract, with every front-end seeing every
 * other's entries at once. A hit is one statement (the read and the LRU stamp together); a write is
 * one statement, and entries past the limits are evicted by the writer after it (oldest `used`
 * first, whoever wrote them). Single flight stays in each process, above the store.
 *
 * `pool` is the caller's and stays open. The database must be migrated; until it is, every call
 * rejects with `not_migrated`. A damaged row (not an entry) is a miss and is deleted.
 */
export function postgresCacheStore(pool: pg.Pool, options: PostgresCacheStoreOptions = {}): PostgresCacheStore {
  const limits = { ...DEFAULT_CACHE_LIMITS, ...options.limits };
  for (const [k, v] of Object.entries(limits))
    if (!Number.isSafeInteger(v) || v < 0) throw new TypeError(`postgresCacheStore: limits.${k} must be a non-negative integer (got ${v})`);
  const now = options.now ?? Date.now;
  const where = options.where !== undefined ? redactUrl(options.where) : poolLocator(pool.options);
  const q = async <R extends pg.QueryResultRow>(what: string, text: string, values: unknown[]): Promise<pg.QueryResult<R>> => {
    try {
      return await pool.query<R>(text, values);
    } catch (err) {
      if ((err as { code?: unknown }).code === UNDEFINED_TABLE)
        throw new PostgresStoreError(
          'not_migrated',
          `the result cache at ${where} has no table ${CACHE_TABLE}: the database is not migrated; run migrate() with MIGRATIONS (forge does on start)`,
          { cause: err },
        );
      throw new PostgresStoreError('query_failed', `${what} in the result cache at ${where} failed: ${describeError(err)}`, { cause: err });
    }
  };
  const evict = async () => {
    const cut = now() - limits.maxAgeMs;
    await q(
      'evicting entries',
      `DELETE FROM forge_cache WHERE key IN (
         SELECT key FROM (
           SELECT key, created_at,
                  row_number() OVER (ORDER BY used DESC) AS n,
                  sum(bytes) OVER (ORDER BY used DESC) AS running
           FROM forge_cache) s
         WHERE s.n > $1 OR s.running > $2 OR s.created_at < $3)`,
      [limits.maxEntries, limits.maxBytes, cut],
    );
  };
  return {
    kind: 'postgres',
    where,
    async get(key) {
      if (typeof key !== 'string' || !CACHE_KEY_PATTERN.test(key)) return undefined;
      const r = await q<{ entry: string; created_at: string }>(
        'reading an entry',
        "UPDATE forge_cache SET used = nextval('forge_cache_use') WHERE key = $1 RETURNING entry, created_at",
        [key],
      );
      const row = r.rows[0];
      if (!row) return undefined;
      if (now() - Number(row.created_at) > limits.maxAgeMs) {
        await q('removing an expired entry', 'DELETE FROM forge_cache WHERE key = $1', [key]);
        return undefined;
      }
      const entry = parseEntry(row.entry);
      if (!entry) {
        await q('removing a damaged entry', 'DELETE FROM forge_cache WHERE key = $1', [key]);
        return undefined;
      }
      return entry;
    },
    async set(key, envelope, seedRun) {
      assertCacheKey(key);
      if (!envelope.ok) return;
      const entry = { envelope, seed_run: seedRun, created_at: now() };
      const text = JSON.stringify(entry);
      const bytes = Buffer.byteLength(text);
      if (bytes > limits.maxBytes) return;
      await q(
        'storing an entry',
        `INSERT INTO forge_cache (key, entry, bytes, created_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (key) DO UPDATE SET entry = EXCLUDED.entry, bytes = EXCLUDED.bytes,
           created_at = EXCLUDED.created_at, used = nextval('forge_cache_use')`,
        [key, text, bytes, entry.created_at],
      );
      await evict();
    },
    async delete(key) {
      assertCacheKey(key);
      await q('deleting an entry', 'DELETE FROM forge_cache WHERE key = $1', [key]);
    },
    async stats() {
      const r = await q<{ entries: string; bytes: string | null }>(
        'counting entries',
        'SELECT count(*) AS entries, sum(bytes) AS bytes FROM forge_cache',
        [],
      );
      const row = r.rows[0];
      return { entries: Number(row?.entries ?? 0), bytes: Number(row?.bytes ?? 0) };
    },
  };
}

function parseEntry(text: string): CacheEntry | undefined {
  try {
    const v: unknown = JSON.parse(text);
    return isCacheEntry(v) ? v : undefined;
  } catch {
    return undefined;
  }
}
