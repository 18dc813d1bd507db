// How a child process of the cache and run store suites opens the Postgres stores of
// cache-pg.test.ts and runs-pg.test.ts (from the built package): a pool of its own on `url`,
// ended by the store's close().
import pg from 'pg';
import { postgresCacheStore, postgresRunStore } from '../dist/index.js';

function poolOn(url) {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => {});
  return pool;
}

/** The Postgres cache store on `url` (default limits). */
export function openPgCacheStore(url) {
  const pool = poolOn(url);
  return { ...postgresCacheStore(pool), close: () => pool.end() };
}

/** The Postgres run store on `url`. */
export function openPgRunStore(url) {
  const pool = poolOn(url);
  return { ...postgresRunStore(pool), close: () => pool.end() };
}
