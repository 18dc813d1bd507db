#!/usr/bin/env node
// Benchmark of the Postgres audit log. Prints each figure, its target, and the ratio against the
// file log of @forge/audit-chain measured in the same run on the same disk. Not a test.
//
//   pnpm --filter @forge/postgres bench
//   BENCH_ENTRIES=200000 BENCH_WINDOW=2000 node bench/run.mjs
//
// Starts a throwaway PostgreSQL cluster (startPostgres of @forge/conformance, loaded by
// scripts/with-postgres.mjs: fsync and synchronous_commit on) in a forge-pg- temp dir and removes
// it at the end.
import { execFile } from 'node:child_process';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { verifyLog } from '@forge/audit-chain';
import { loadStartPostgres } from '../../../scripts/with-postgres.mjs';
import { exportAuditLog, verifyPostgresAuditLog } from '../dist/index.js';

const run = promisify(execFile);
const CHILD = new URL('./child.mjs', import.meta.url).pathname;
const N = Number(process.env.BENCH_ENTRIES ?? 100_000);
const WRITERS = 8;
const fmt = (x) => Math.round(x).toLocaleString('en-US');

function row(name, value, unit, target, baselineName, baseline) {
  const ratio = baseline ? `${(value / baseline).toFixed(2)}× ${baselineName} (${fmt(baseline)} ${unit})` : '';
  const ok = target === undefined || value >= target;
  const goal = target === undefined ? '' : `target ≥ ${fmt(target)}`;
  console.log(`${ok ? ' ' : '!'} ${name.padEnd(46)} ${fmt(value).padStart(10)} ${unit.padEnd(10)} ${goal.padEnd(18)} ${ratio}`);
}

/** `n` writer processes of `mode`, released together; total entries/s over the wall time. */
async function writers(dir, mode, target, n, total) {
  const start = join(dir, `start-${mode}-${n}-${Math.random().toString(36).slice(2)}`);
  const each = Math.floor(total / n);
  const children = Array.from({ length: n }, () =>
    run(process.execPath, [CHILD, mode, target, String(each), start], { maxBuffer: 1 << 20 }).then((r) =>
      JSON.parse(r.stdout.trim().split('\n').at(-1)),
    ),
  );
  await new Promise((r) => setTimeout(r, 1500)); // every child opens its log
  const t0 = performance.now();
  await writeFile(start, '');
  const results = await Promise.all(children);
  const wall = performance.now() - t0;
  const batches = results.reduce((s, r) => s + r.batches, 0);
  return { rate: (n * each) / (wall / 1000), entries: n * each, batches };
}

const startPostgres = await loadStartPostgres();
const dir = await mkdtemp(join(tmpdir(), 'forge-pgbench-'));
const server = await startPostgres();
try {
  console.log(
    `@forge/postgres audit benchmark — node ${process.version}, ${availableParallelism()} cores, ${fmt(N)} entries per run, ` +
      `${process.env.BENCH_WINDOW ?? 2000} appends in flight per writer`,
  );
  console.log(`  server: ${server.url.replace(/host=.*/, 'host=<temp dir>')} (fsync on, synchronous_commit on); file log in ${tmpdir()}`);
  console.log('  (! marks a figure that misses its target on this machine)\n');

  const results = {};
  for (const n of [1, WRITERS]) {
    const pgUrl = await server.database(`bench_${n}`);
    const pg = await writers(dir, 'pg', pgUrl, n, N);
    const file = await writers(dir, 'file', join(dir, `file-${n}.log`), n, N);
    results[n] = { pg, file, pgUrl };
    row(`postgres append, ${n} writer${n > 1 ? ' processes' : ''}`, pg.rate, 'entries/s', 10_000, 'file log', file.rate);
    console.log(
      `    ${fmt(pg.entries)} entries in ${fmt(pg.batches)} batch transactions (${(pg.entries / pg.batches).toFixed(1)} per batch)`,
    );
  }

  // Verify rate of an exported log (the 8-writer database), against the file log's own file.
  const { pgUrl } = results[WRITERS];
  const out = join(dir, 'exported.log');
  let t0 = performance.now();
  const ex = await exportAuditLog(pgUrl, out);
  const exportMs = performance.now() - t0;
  const size = (await stat(out)).size;
  const times = [];
  for (let k = 0; k < 3; k++) {
    t0 = performance.now();
    const v = await verifyLog(out);
    times.push(performance.now() - t0);
    if (!v.ok || v.entries !== ex.entries) throw new Error(`exported log does not verify: ${JSON.stringify(v.first_bad)}`);
  }
  const vms = times.sort((a, b) => a - b)[1];
  const fileTimes = [];
  for (let k = 0; k < 3; k++) {
    t0 = performance.now();
    await verifyLog(join(dir, `file-${WRITERS}.log`));
    fileTimes.push(performance.now() - t0);
  }
  const fileEntries = results[WRITERS].file.entries;
  const fms = fileTimes.sort((a, b) => a - b)[1];
  console.log(
    `\n  exported ${fmt(ex.entries)} entries, ${(size / 2 ** 20).toFixed(1)} MiB (${(size / ex.entries).toFixed(0)} bytes/entry):`,
  );
  row('export (database → file log)', ex.entries / (exportMs / 1000), 'entries/s', undefined, '', 0);
  row(
    'verifyLog of the exported log',
    ex.entries / (vms / 1000),
    'entries/s',
    undefined,
    'file log written by the file writer',
    fileEntries / (fms / 1000),
  );
  row('  the same in MB/s', size / 1e6 / (vms / 1000), 'MB/s', undefined, '', 0);
  t0 = performance.now();
  const pv = await verifyPostgresAuditLog(pgUrl);
  const pvMs = performance.now() - t0;
  if (!pv.ok) throw new Error(`database does not verify: ${JSON.stringify(pv.first_bad)}`);
  row(
    'verifyPostgresAuditLog (in the database)',
    pv.entries / (pvMs / 1000),
    'entries/s',
    undefined,
    'verifyLog of the export',
    ex.entries / (vms / 1000),
  );
} finally {
  await server.stop();
  await rm(dir, { recursive: true, force: true });
}
