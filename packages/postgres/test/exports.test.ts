import { expect, it } from 'vitest';

/**
 * Every name @forge/postgres exports at runtime, written out: adding or removing an export is an API
 * decision (src/index.ts lists them), so a change to this list must be a deliberate one.
 */
const EXPORTS = [
  'AUDIT_CHANNEL',
  'CACHE_RUNS_MIGRATIONS',
  'CACHE_TABLE',
  'GAPS_TABLE',
  'MIGRATIONS',
  'POSTGRES_ERROR_CODES',
  'POSTGRES_QUEUE_STEPS',
  'PRESENCE_MIGRATIONS',
  'PostgresStoreError',
  'QUEUE_CHANNEL',
  'QUEUE_MIGRATIONS',
  'REGISTRY_MIGRATIONS',
  'RUNS_TABLE',
  'RUN_ARTIFACTS_TABLE',
  'TOOLSMITH_MIGRATIONS',
  'TOOLS_CHANNEL',
  'TOOLS_TABLE',
  'exportAuditLog',
  'migrate',
  'migrationStatus',
  'openPostgresAuditLog',
  'openPostgresQueue',
  'openPostgresStores',
  'postgresCacheStore',
  'postgresGapStore',
  'postgresPresence',
  'postgresProposalStore',
  'postgresRunStore',
  'postgresTiles',
  'postgresToolStore',
  'redactText',
  'redactUrl',
  'stopWatching',
  'verifyPostgresAuditLog',
];

// Imported while the file is collected, not inside the test: on a busy machine loading the
// package and its dependencies can take longer than a fast test's limit, and that is not what is tested.
// By URL, not a literal specifier: the test typechecks before this package's own build.
const entry: Record<string, unknown> = await import(new URL('../dist/index.js', import.meta.url).href).catch((err: Error) => {
  throw new Error(`${err.message}: build first (pnpm turbo run build --filter=@forge/postgres)`);
});

it('the built entry exports exactly the listed names', () => {
  expect(
    Object.keys(entry).sort(),
    'the export list of @forge/postgres changed: if that is deliberate, update EXPORTS in test/exports.test.ts',
  ).toEqual(EXPORTS);
});
