import type pg from 'pg';
import { describeError, PostgresStoreError } from './errors.js';
import { MIGRATIONS, type Migration } from './migrations.js';

/** Key of the transaction-level advisory lock that migrations take (ASCII "forge"). */
const MIGRATION_LOCK = '439788849765';

const CREATE_TABLE = `CREATE TABLE IF NOT EXISTS forge_migrations (
  version integer PRIMARY KEY,
  name text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
)`;

/** Where a database stands against the migrations this code knows. */
export interface MigrationStatus {
  /** Highest version applied (0 for a database never migrated). */
  current: number;
  /** Highest version this code knows. */
  latest: number;
  /** Known migrations not yet applied, oldest first. */
  pending: { version: number; name: string }[];
  /** Applied versions this code does not know (a newer forge migrated the database): it refuses them. */
  unknown: { version: number; name: string }[];
}

/** What {@link migrate} did. */
export interface MigrateResult {
  /** Migrations applied by this call, oldest first (empty when the database was up to date). */
  applied: { version: number; name: string }[];
  current: number;
  latest: number;
}

/** A pool, or one client, to run queries on. */
type Queryable = pg.Pool | pg.PoolClient | pg.Client;

async function appliedVersions(q: Queryable): Promise<{ version: number; name: string }[]> {
  const exists = await q.query<{ t: string | null }>("SELECT to_regclass('forge_migrations')::text AS t");
  if (!exists.rows[0]?.t) return [];
  const r = await q.query<{ version: number; name: string }>('SELECT version, name FROM forge_migrations ORDER BY version');
  return r.rows;
}

function tooNew(unknown: { version: number; name: string }[], latest: number): PostgresStoreError {
  const newest = unknown.at(-1) as { version: number; name: string };
  return new PostgresStoreError(
    'schema_too_new',
    `the database was migrated to version ${newest.version} ("${newest.name}") by a newer forge; this forge knows versions up to ${latest} and refuses to use it: upgrade forge on this machine (or point it at another database)`,
  );
}

/**
 * Applies the pending migrations of `migrations` (default: this package's), each in its own
 * transaction under a transaction-level advisory lock, so that processes starting at once apply
 * each exactly once. Refuses, with `schema_too_new` and before changing anything, a database that
 * holds a version this code does not know. A failing migration is rolled back whole
 * (`migration_failed`, naming it); those before it stay applied.
 */
export async function migrate(pool: pg.Pool, migrations: readonly Migration[] = MIGRATIONS): Promise<MigrateResult> {
  const latest = migrations.at(-1)?.version ?? 0;
  const applied: { version: number; name: string }[] = [];
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (err) {
    throw new PostgresStoreError('connect_failed', `cannot connect to migrate the database: ${describeError(err)}`, { cause: err });
  }
  let current = 0;
  try {
    for (;;) {
      await client.query('BEGIN');
      let step: Migration | undefined;
      try {
        await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
        await client.query(CREATE_TABLE);
        const done = await appliedVersions(client);
        const known = new Set(migrations.map((m) => m.version));
        const unknown = done.filter((d) => !known.has(d.version));
        if (unknown.length > 0) throw tooNew(unknown, latest);
        const have = new Set(done.map((d) => d.version));
        current = done.at(-1)?.version ?? 0;
        step = migrations.find((m) => !have.has(m.version));
        if (!step) {
          await client.query('COMMIT');
          return { applied, current, latest };
        }
        await client.query(step.sql);
        await client.query('INSERT INTO forge_migrations (version, name) VALUES ($1, $2)', [step.version, step.name]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        if (err instanceof PostgresStoreError) throw err;
        const what = step ? `migration ${step.version} ("${step.name}")` : 'reading the applied migrations';
        throw new PostgresStoreError('migration_failed', `${what} failed and was rolled back: ${describeError(err)}`, { cause: err });
      }
      applied.push({ version: step.version, name: step.name });
      current = step.version;
    }
  } finally {
    client.release();
  }
}

/** Where the database stands: for `forge doctor`. Changes nothing. */
export async function migrationStatus(pool: pg.Pool, migrations: readonly Migration[] = MIGRATIONS): Promise<MigrationStatus> {
  let done: { version: number; name: string }[];
  try {
    done = await appliedVersions(pool);
  } catch (err) {
    throw new PostgresStoreError('query_failed', `cannot read the migration status: ${describeError(err)}`, { cause: err });
  }
  const have = new Set(done.map((d) => d.version));
  const known = new Set(migrations.map((m) => m.version));
  return {
    current: done.at(-1)?.version ?? 0,
    latest: migrations.at(-1)?.version ?? 0,
    pending: migrations.filter((m) => !have.has(m.version)).map((m) => ({ version: m.version, name: m.name })),
    unknown: done.filter((d) => !known.has(d.version)),
  };
}

/** Throws `schema_too_new` or `not_migrated` unless the database is at exactly the latest version. */
export async function assertMigrated(pool: pg.Pool, migrations: readonly Migration[] = MIGRATIONS): Promise<void> {
  const s = await migrationStatus(pool, migrations);
  if (s.unknown.length > 0) throw tooNew(s.unknown, s.latest);
  if (s.pending.length > 0) {
    throw new PostgresStoreError(
      'not_migrated',
      `the database is at version ${s.current} of ${s.latest} (pending: ${s.pending.map((p) => `${p.version} "${p.name}"`).join(', ')}); run the migrations (open the store with migrate enabled, or call migrate())`,
    );
  }
}
