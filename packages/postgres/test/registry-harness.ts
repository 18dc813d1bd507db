import { fileURLToPath } from 'node:url';
import { type PostgresServer, startPostgres } from '@forge/conformance/postgres';
import type { ToolStoreHarness } from '@forge/conformance/registry';
import type { Scope, ToolStore } from '@forge/registry';
import type pg from 'pg';
import { migrate } from '../src/migrate.js';
import { MIGRATIONS } from '../src/migrations.js';
import { postgresToolStore, REGISTRY_MIGRATIONS } from '../src/registry.js';
import { bundleForNode, type NodeBundle } from './bundle.js';
import { migratedDatabase } from './helpers.js';

/** The scope ids the tests use for the session and task scopes. */
export const SCOPE_IDS: Partial<Record<Scope, string>> = { session: 's-1', task: 't-1' };

/** Bundles test/registry-child-entry.ts (the store, pg and @forge/registry in one ESM file) for child processes. */
export function buildChildEntry(): Promise<NodeBundle> {
  return bundleForNode('forge-pgreg-', { entry: fileURLToPath(new URL('./registry-child-entry.ts', import.meta.url)) });
}

/** Migrates a fresh database with the package's migrations (MIGRATIONS holds the registry's, version 10). */
export async function migrateRegistry(pool: pg.Pool): Promise<void> {
  await migrate(pool, MIGRATIONS);
  await assertRegistryMigrated(pool);
}

/** Throws unless the registry's migration is recorded in `pool`'s database. */
async function assertRegistryMigrated(pool: pg.Pool): Promise<void> {
  const r = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM forge_migrations WHERE version = $1', [
    REGISTRY_MIGRATIONS[0]?.version,
  ]);
  if (r.rows[0]?.n !== 1) throw new Error('MIGRATIONS did not apply the registry migration');
}

/** A fresh migrated database on `server`, with a pool the test ends in `cleanup`. */
export async function freshDatabase(server: PostgresServer): Promise<{ url: string; pool: pg.Pool; cleanup(): Promise<void> }> {
  const db = await migratedDatabase(server, 12);
  await assertRegistryMigrated(db.pool);
  return db;
}

/** The conformance harness over a fresh database per test; `child` opens the bundle at `childModule`. */
export function harnessFactory(server: () => PostgresServer, childModule: () => string): () => Promise<ToolStoreHarness> {
  return async () => {
    const db = await freshDatabase(server());
    return {
      async open(scope, options = {}): Promise<ToolStore> {
        return postgresToolStore(db.pool, { scope, scopeId: SCOPE_IDS[scope], builtins: options.builtins ?? [] });
      },
      child: { module: childModule(), export: 'openStore', args: [db.url, SCOPE_IDS] },
      async corrupt(scope, name) {
        // Half a JSON document, as a torn write would leave it.
        const r = await db.pool.query(
          'UPDATE forge_tools SET tool = left(tool, length(tool) / 2) WHERE scope = $1 AND scope_id = $2 AND name = $3 AND live',
          [scope, SCOPE_IDS[scope] ?? '', name],
        );
        if (r.rowCount !== 1) throw new Error(`no live record of ${name} in ${scope} to corrupt`);
        await db.pool.query('SELECT pg_notify($1, $2)', [
          'forge_tools',
          JSON.stringify({ scope, id: SCOPE_IDS[scope] ?? '', names: [name] }),
        ]);
      },
      cleanup: () => db.cleanup(),
    };
  };
}

export { startPostgres };
