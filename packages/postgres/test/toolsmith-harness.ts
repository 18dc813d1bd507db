import { existsSync } from 'node:fs';
import type { PostgresServer } from '@forge/conformance/postgres';
import type pg from 'pg';
import { migratedDatabase } from './helpers.js';

if (!existsSync(new URL('../dist/index.js', import.meta.url))) {
  throw new Error(
    'the toolsmith store suites run child processes against the built package: run `pnpm --filter @forge/postgres build` first',
  );
}

/** The module children open the stores from (see toolsmith-child-stores.mjs). */
export const TOOLSMITH_OPENER = new URL('./toolsmith-child-stores.mjs', import.meta.url).pathname;

/** The project the suites' stores keep (a second one shares the database to prove they stay apart). */
export const PROJECT = 'conformance';

/** A fresh database on `server` migrated with the package's migrations (the toolsmith's among them), and a pool on it. */
export function toolsmithDatabase(server: PostgresServer): Promise<{ url: string; pool: pg.Pool; cleanup(): Promise<void> }> {
  return migratedDatabase(server, 8);
}

/**
 * How a child process opens `db`: the address with its sessions named `app`, and `settled`, whether
 * none of them is left (a killed child's last statement has then committed or rolled back).
 */
export function childOf(db: { url: string; pool: pg.Pool }, app: string): { url: string; settled(): Promise<boolean> } {
  return {
    url: `${db.url}${db.url.includes('?') ? '&' : '?'}application_name=${app}`,
    settled: async () => {
      const r = await db.pool.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1',
        [app],
      );
      return r.rows[0]?.n === 0;
    },
  };
}
