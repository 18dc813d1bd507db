import { existsSync } from 'node:fs';
import type { PostgresServer } from '@forge/conformance/postgres';
import pg from 'pg';
import { migrate } from '../src/migrate.js';
import { MIGRATIONS } from '../src/migrations.js';

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
export async function toolsmithDatabase(server: PostgresServer): Promise<{ url: string; pool: pg.Pool; cleanup(): Promise<void> }> {
  const url = await server.database();
  const pool = new pg.Pool({ connectionString: url, max: 8 });
  pool.on('error', () => {});
  await migrate(pool, MIGRATIONS);
  return { url, pool, cleanup: () => pool.end() };
}
