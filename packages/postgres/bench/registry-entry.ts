// What bench/registry.mjs bundles (plain node cannot import TypeScript): the Postgres tool store,
// its migrations, the file store and the throwaway server of @forge/conformance.
export { startPostgres } from '@forge/conformance/postgres';
export { createRegistry, digestSpec, fileToolStore } from '@forge/registry';
export { default as pg } from 'pg';
export { migrate } from '../src/migrate.js';
export { MIGRATIONS } from '../src/migrations.js';
export { postgresToolStore, REGISTRY_MIGRATIONS } from '../src/registry.js';
