// The JobQueue conformance suite against the PostgreSQL queue (pg-boss engine + forge_queue_jobs),
// one throwaway server for the file, a fresh database per test.
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type PostgresServer, startPostgres } from '@forge/conformance/postgres';
import { describeJobQueue } from '@forge/conformance/queue';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { openPostgresQueue, POSTGRES_QUEUE_STEPS } from '../src/queue.js';

let server: PostgresServer;
let child: { module: string; remove(): void };

/** Bundles the child's opener (plain node cannot import TypeScript): `openQueueChild(spec, options)` with the crash hook armed. */
async function buildChild(): Promise<{ module: string; remove(): void }> {
  const root = fileURLToPath(new URL('../../../', import.meta.url));
  const require = createRequire(realpathSync(join(root, 'node_modules/tsup/package.json')));
  const esbuild = require('esbuild') as { build(options: Record<string, unknown>): Promise<unknown> };
  const dir = mkdtempSync(join(tmpdir(), 'forge-pgqueue-'));
  const module = join(dir, 'child.mjs');
  await esbuild.build({
    stdin: {
      contents: `
        import { openPostgresQueue } from './src/queue.ts';
        export function openQueueChild(spec, options) {
          const at = process.env.FORGE_QUEUE_CRASH_AT;
          let skip = Number(process.env.FORGE_QUEUE_CRASH_SKIP ?? 0);
          const onStep = (step) => {
            if (step !== at) return;
            if (skip-- > 0) return;
            process.kill(process.pid, 'SIGKILL');
          };
          return openPostgresQueue(spec.url, { ...options, ...(at ? { onStep } : {}) });
        }`,
      resolveDir: fileURLToPath(new URL('..', import.meta.url)),
      loader: 'ts',
    },
    outfile: module,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external: ['pg-native'],
    logLevel: 'error',
    banner: { js: "import { createRequire as __forgeRequire } from 'node:module'; const require = __forgeRequire(import.meta.url);" },
  });
  return { module, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

beforeAll(async () => {
  [server, child] = await Promise.all([startPostgres(), buildChild()]);
}, 120_000);
afterAll(async () => {
  child?.remove();
  await server?.stop();
}, 120_000);

/** The engine states that go with each forge state. */
const ENGINE_STATES: Record<string, string[]> = {
  pending: ['created', 'retry'],
  claimed: ['active'],
  done: ['completed'],
  failed: ['completed'],
  cancelled: ['cancelled'],
};

describeJobQueue('postgres queue (openPostgresQueue, pg-boss)', async () => {
  const url = await server.database();
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => {});
  return {
    open: (options) => openPostgresQueue(url, options),
    child: { module: child.module, export: 'openQueueChild', spec: { url } },
    crashSteps: POSTGRES_QUEUE_STEPS,
    // forge's state of the job, and a second entry when the engine's job disagrees with it.
    statesOf: async (id) => {
      const r = await pool.query<{ state: string; engine: string | null }>(
        `SELECT f.state, j.state::text AS engine FROM forge_queue_jobs f LEFT JOIN pgboss.job j ON j.id = f.engine_id AND j.name = f.queue
         WHERE f.queue = 'forge_calls' AND f.id = $1`,
        [id],
      );
      const states: string[] = [];
      for (const row of r.rows) {
        states.push(row.state);
        if (!ENGINE_STATES[row.state]?.includes(row.engine ?? 'missing')) states.push(`engine:${row.engine ?? 'missing'}`);
      }
      return states;
    },
    cleanup: () => pool.end(),
  };
});
