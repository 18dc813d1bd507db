/**
 * @forge/postgres — forge's stores in one PostgreSQL database, for many front-ends and workers.
 *
 * Public API. Everything exported here is a deliberate, documented decision.
 */

export {
  AUDIT_CHANNEL,
  openPostgresAuditLog,
  type PostgresAuditLog,
  type PostgresAuditLogOptions,
  type PostgresEntriesOptions,
} from './audit.js';
/** The audit log's Merkle tree kept in the database: C2SP tiles and tree checkpoints, byte for byte the file log's. */
export { type PostgresTiles, postgresTiles } from './audit-tree.js';
export {
  CACHE_RUNS_MIGRATIONS,
  CACHE_TABLE,
  type PostgresCacheStore,
  type PostgresCacheStoreOptions,
  postgresCacheStore,
} from './cache.js';
export { POSTGRES_ERROR_CODES, type PostgresErrorCode, PostgresStoreError } from './errors.js';
export {
  type ExportResult,
  exportAuditLog,
  type PostgresFirstBad,
  type PostgresVerifyResult,
  verifyPostgresAuditLog,
} from './export.js';
export { GAPS_TABLE, type PostgresGapStoreOptions, postgresGapStore, TOOLSMITH_MIGRATIONS } from './gaps.js';
export { type MigrateResult, type MigrationStatus, migrate, migrationStatus } from './migrate.js';
export { MIGRATIONS, type Migration } from './migrations.js';
export { PRESENCE_MIGRATIONS, postgresPresence } from './presence.js';
export { type PostgresProposalStoreOptions, postgresProposalStore } from './proposals.js';
export { openPostgresQueue, POSTGRES_QUEUE_STEPS, type PostgresQueueOptions, type PostgresQueueStep, QUEUE_CHANNEL } from './queue.js';
export { QUEUE_MIGRATIONS } from './queue-schema.js';
export { type PostgresToolStoreOptions, postgresToolStore, REGISTRY_MIGRATIONS, TOOLS_CHANNEL, TOOLS_TABLE } from './registry.js';
export { stopWatching } from './registry-watch.js';
export {
  type PostgresArtifactBytes,
  type PostgresRunArtifact,
  type PostgresRunStore,
  type PostgresRunStoreOptions,
  postgresRunStore,
  RUN_ARTIFACTS_TABLE,
  RUNS_TABLE,
} from './runs.js';
export { type OpenStoresOptions, openPostgresStores, type PostgresStores, type StoreCheck } from './stores.js';
export { redactText, redactUrl } from './url.js';
