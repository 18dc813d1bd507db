import { type PostgresServer, startPostgres } from '@forge/conformance/postgres';
import { scaled } from '@forge/test-utils';
import pg from 'pg';
import { afterAll, beforeAll, onTestFinished } from 'vitest';
import { migrate } from '../src/migrate.js';
import { MIGRATIONS } from '../src/migrations.js';

/** The built package, for child processes (tests run after `build`). */
export const DIST = new URL('../dist/index.js', import.meta.url).pathname;

/**
 * One throwaway server for the test file (started in beforeAll, stopped in afterAll); `database()`
 * gives a fresh migrated database on it ({@link migratedDatabase}) whose pool is ended when the
 * current test finishes.
 */
export function usePostgres(): { server(): PostgresServer; database(max?: number): Promise<{ url: string; pool: pg.Pool }> } {
  let server: PostgresServer | undefined;
  beforeAll(async () => {
    server = await startPostgres();
  }, scaled(120_000));
  afterAll(async () => {
    await server?.stop();
  }, scaled(120_000));
  const started = (): PostgresServer => {
    if (!server) throw new Error('the PostgreSQL server did not start (see beforeAll)');
    return server;
  };
  return {
    server: started,
    async database(max = 6) {
      const db = await migratedDatabase(started(), max);
      onTestFinished(() => db.cleanup());
      return db;
    },
  };
}

/** A pool on `url`, ended when the current test finishes. */
export function poolOn(url: string, max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max });
  pool.on('error', () => {});
  onTestFinished(() => pool.end());
  return pool;
}

/**
 * A fresh database on `server` migrated with the package's MIGRATIONS (every store's), and a pool
 * of `max` connections on it; `cleanup` ends the pool (so does a failed migration).
 */
export async function migratedDatabase(
  server: PostgresServer,
  max: number,
): Promise<{ url: string; pool: pg.Pool; cleanup(): Promise<void> }> {
  const url = await server.database();
  const pool = new pg.Pool({ connectionString: url, max });
  pool.on('error', () => {});
  try {
    await migrate(pool, MIGRATIONS);
  } catch (err) {
    await pool.end().catch(() => {});
    throw err;
  }
  return { url, pool, cleanup: () => pool.end() };
}

export { tempDir } from '@forge/test-utils';

/** The `code` of what `p` rejects with ('resolved' when it does not). */
export async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    return String((err as { code?: unknown }).code);
  }
  return 'resolved';
}
