#!/usr/bin/env node
// Benchmark of the Postgres tool store (postgresToolStore) beside the file store (fileToolStore)
// in the same run: puts per second (one writer, and 8 writers at once in one process), and
// resolve-after-write latency between two processes (a child writes, this process's registry
// watching the store resolves the new tool: LISTEN/NOTIFY for Postgres, inotify for files).
// Prints figures and the ratio Postgres / file. Not a test: figures depend on the host.
//
//   node bench/registry.mjs          (after `pnpm --filter @forge/postgres... build`;
//                                     BENCH_PUTS=2000 BENCH_LATENCY=200 for more samples)
//
// Uses the built package (dist), starts a throwaway PostgreSQL cluster (startPostgres of
// @forge/conformance, loaded by scripts/with-postgres.mjs: fsync and synchronous_commit on) and a
// file store in a forge-pgreg- temp dir, and removes both at the end.
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRegistry, digestSpec, fileToolStore } from '@forge/registry';
import pg from 'pg';
import { loadStartPostgres } from '../../../scripts/with-postgres.mjs';
import { MIGRATIONS, migrate, postgresToolStore } from '../dist/index.js';

const PUTS = Number(process.env.BENCH_PUTS ?? 500);
const LATENCY = Number(process.env.BENCH_LATENCY ?? 100);
const DEBOUNCE = { debounceMs: 1, maxWaitMs: 5 };
const now = () => performance.timeOrigin + performance.now();

/** What the benchmark uses, in one object (the child builds the same). */
const lib = { createRegistry, digestSpec, fileToolStore, pg, migrate, MIGRATIONS, postgresToolStore };

function spec(name, description = `the tool ${name}`) {
  return {
    name,
    description,
    input_schema: { type: 'object', properties: { n: { type: 'integer' } }, additionalProperties: false },
    impl: 'import json,sys\nprint(json.dumps({"ok": True, "data": json.load(sys.stdin)}))\n',
    runtime: 'python3',
  };
}

function stored(lib, name, version, description) {
  const s = spec(name, description);
  return {
    ...s,
    version,
    digest: lib.digestSpec(s),
    created_at: new Date().toISOString(),
    created_by: { persona: 'bench', session: 'b' },
    scope: 'project',
    state: 'active',
  };
}

const put = (lib, store, name, description) =>
  store.put(name, (_c, next) => ({ write: stored(lib, name, next, description), value: next }));

/** How the child and this process open the same store: {kind, url | root}. */
async function openStore(lib, where, pools) {
  if (where.kind === 'file') return lib.fileToolStore('project', where.root);
  const pool = new lib.pg.Pool({ connectionString: where.url, max: 10 });
  pool.on('error', () => {});
  pools.push(pool);
  return lib.postgresToolStore(pool, { scope: 'project' });
}

// Child mode: writes the names the parent sends, replying with the time just before each put.
if (process.argv[2] === '--writer') {
  const store = await openStore(lib, JSON.parse(process.argv[3]), []);
  process.on('message', async (name) => {
    if (name === 'exit') process.exit(0);
    const t0 = now();
    await put(lib, store, name, `written at ${t0}`);
    process.send({ name, t0, t1: now() });
  });
  process.send('ready');
} else {
  await main();
}

async function putsPerSecond(lib, store, prefix, writers) {
  const each = Math.ceil(PUTS / writers);
  const t = performance.now();
  await Promise.all(
    Array.from({ length: writers }, async (_, w) => {
      for (let i = 0; i < each; i++) await put(lib, store, `${prefix}.w${w}.n${i}`);
    }),
  );
  return (each * writers) / ((performance.now() - t) / 1000);
}

/** Median and p95 of the times from a child's put start to this process's registry resolving it. */
async function resolveLatency(lib, where, store) {
  const reg = lib.createRegistry({ stores: { project: store } });
  await reg.load();
  const seen = new Map();
  await reg.watch((changes) => {
    const t = now();
    for (const c of changes) for (const n of c.names) if (!seen.has(n) && reg.resolve(n)) seen.set(n, t);
  }, DEBOUNCE);
  const child = fork(fileURLToPath(import.meta.url), ['--writer', JSON.stringify(where)], { stdio: 'inherit' });
  await new Promise((r) => child.once('message', r));
  const total = [];
  const writeOnly = [];
  for (let i = 0; i < LATENCY; i++) {
    const name = `lat.n${i}`;
    const done = new Promise((r) => child.once('message', r));
    child.send(name);
    const { t0, t1 } = await done;
    while (!seen.has(name)) await new Promise((r) => setTimeout(r, 0));
    total.push(seen.get(name) - t0);
    writeOnly.push(t1 - t0);
    await new Promise((r) => setTimeout(r, 5));
  }
  child.send('exit');
  await reg.close();
  const q = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
  return { median: q(total, 0.5), p95: q(total, 0.95), putMedian: q(writeOnly, 0.5) };
}

async function main() {
  const startPostgres = await loadStartPostgres();
  const dir = mkdtempSync(join(tmpdir(), 'forge-pgreg-'));
  const server = await startPostgres({ settings: { max_connections: 100 } });
  const pools = [];
  try {
    const url = await server.database('bench');
    const admin = new lib.pg.Pool({ connectionString: url });
    pools.push(admin);
    await lib.migrate(admin, lib.MIGRATIONS);
    const pgWhere = { kind: 'postgres', url };
    const fileWhere = { kind: 'file', root: join(dir, 'tools') };
    const pgStore = await openStore(lib, pgWhere, pools);
    const fileStore = await openStore(lib, fileWhere, pools);

    const rows = [];
    const ratio = (a, b) => `${(a / b).toFixed(2)}×`;
    for (const writers of [1, 8]) {
      const p = await putsPerSecond(lib, pgStore, `bench${writers}`, writers);
      const f = await putsPerSecond(lib, fileStore, `bench${writers}`, writers);
      rows.push([`puts/s, ${writers} writer${writers > 1 ? 's' : ''} in one process`, p.toFixed(0), f.toFixed(0), ratio(p, f)]);
    }
    const pl = await resolveLatency(lib, pgWhere, pgStore);
    const fl = await resolveLatency(lib, fileWhere, fileStore);
    rows.push(['put in the child (median ms)', pl.putMedian.toFixed(2), fl.putMedian.toFixed(2), ratio(pl.putMedian, fl.putMedian)]);
    rows.push(['put → resolved in another process, median ms', pl.median.toFixed(2), fl.median.toFixed(2), ratio(pl.median, fl.median)]);
    rows.push(['put → resolved in another process, p95 ms', pl.p95.toFixed(2), fl.p95.toFixed(2), ratio(pl.p95, fl.p95)]);
    console.log(
      `tool store benchmark (${PUTS} puts per run, ${LATENCY} latency samples; fsync on for both; watch debounce ${DEBOUNCE.debounceMs} ms)`,
    );
    console.log(`${'figure'.padEnd(48)} ${'postgres'.padStart(10)} ${'file'.padStart(10)}  postgres/file`);
    for (const [name, p, f, r] of rows) console.log(`${name.padEnd(48)} ${p.padStart(10)} ${f.padStart(10)}  ${r}`);
  } finally {
    await Promise.all(pools.map((p) => p.end().catch(() => {})));
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
