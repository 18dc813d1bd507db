import type { PostgresServer } from '@forge/conformance/postgres';
import { describeToolStore } from '@forge/conformance/registry';
import { afterAll, beforeAll } from 'vitest';
import { buildChildEntry, harnessFactory, startPostgres } from './registry-harness.js';

let server: PostgresServer;
let child: { module: string; remove(): void };
beforeAll(async () => {
  [server, child] = await Promise.all([startPostgres({ settings: { max_connections: 200 } }), buildChildEntry()]);
});
afterAll(async () => {
  child?.remove();
  await server?.stop();
});

describeToolStore(
  'postgres',
  harnessFactory(
    () => server,
    () => child.module,
  ),
);
