#!/usr/bin/env node
// Benchmark of the PostgreSQL job queue (openPostgresQueue: pg-boss + forge_queue_jobs) beside the
// file queue (openFileQueue of @forge/queue) in the same run. Not a test.
//
//   node packages/postgres/bench/queue.mjs            (after `pnpm --filter @forge/postgres... build`)
//   BENCH_JOBS=300 BENCH_DRAIN=600 node packages/postgres/bench/queue.mjs
//
//  1. enqueue-to-start latency: a worker process waits in next(); the publisher publishes one job
//     and waits for its result; latency = the worker's next() returning minus the publish call
//     (same host, same clock), p50/p95, one job at a time.
//  2. jobs/s drained by 1, 2 and 4 worker processes (claim → finish until empty), from their
//     release to the last one's exit.
// Starts a throwaway PostgreSQL cluster (startPostgres of @forge/conformance, loaded by
// scripts/with-postgres.mjs: fsync on) and a file queue under the system temp dir; removes both at
// the end.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { loadStartPostgres } from '../../../scripts/with-postgres.mjs';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const ROOT = join(HERE, '../../..');
const JOBS = Number(process.env.BENCH_JOBS ?? 200);
const DRAIN = Number(process.env.BENCH_DRAIN ?? 400);
const now = () => performance.timeOrigin + performance.now();

/** Opens the queue of `kind` at `target` (a directory, or a connection string). */
async function openKind(kind, target, options) {
  if (kind === 'file') {
    const { openFileQueue } = await import(pathToFileURL(join(ROOT, 'packages/queue/dist/index.js')).href);
    return openFileQueue(target, options);
  }
  const { openPostgresQueue } = await import(pathToFileURL(join(HERE, '../dist/index.js')).href);
  return openPostgresQueue(target, options);
}

// ---- child: node queue.mjs <serve|drain> <kind> <target> <name> [go]
if (process.argv[2] === 'serve' || process.argv[2] === 'drain') {
  const [mode, kind, target, name, go] = process.argv.slice(2);
  const q = await openKind(kind, target, { leaseMs: 60_000 });
  const say = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
  if (mode === 'serve') {
    const stop = new AbortController();
    process.on('SIGTERM', () => stop.abort());
    say({ ready: name });
    for (;;) {
      const job = await q.next(name, { signal: stop.signal });
      if (!job) break;
      const started = now();
      await q.finish(job, { status: 'done', payload: { started } });
    }
  } else {
    say({ ready: name });
    while (!existsSync(go)) await new Promise((r) => setTimeout(r, 2));
    let n = 0;
    for (let job = await q.claim(name); job; job = await q.claim(name)) {
      await q.finish(job, { status: 'done', payload: null });
      n++;
    }
    say({ drained: n });
  }
  await q.close();
  process.exit(0);
}

// ---- parent
const scratch = mkdtempSync(join(tmpdir(), 'forge-qbench-'));
const children = new Set();
let server;
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL');
  rmSync(scratch, { recursive: true, force: true });
});

function start(args) {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.add(child);
  const lines = [];
  const waiters = [];
  createInterface({ input: child.stdout }).on('line', (l) => {
    const o = JSON.parse(l);
    lines.push(o);
    for (const w of waiters.splice(0)) w();
  });
  const exited = new Promise((resolve) =>
    child.on('exit', (code) => {
      children.delete(child);
      resolve(code);
    }),
  );
  const until = async (pred) => {
    while (!lines.some(pred)) await new Promise((r) => waiters.push(r));
    return lines.find(pred);
  };
  return { child, lines, exited, until };
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

async function latency(kind, target) {
  const q = await openKind(kind, target, { leaseMs: 60_000 });
  const w = start(['serve', kind, target, 'lat']);
  await w.until((l) => 'ready' in l);
  await new Promise((r) => setTimeout(r, 300));
  const lat = [];
  const round = [];
  for (let i = 0; i < JOBS; i++) {
    const id = `lat-${i}`;
    const t0 = now();
    await q.publish({ id, payload: i });
    const r = await q.wait(id, { timeoutMs: 30_000 });
    const t1 = now();
    if (!r) throw new Error(`${kind}: job ${id} got no result`);
    lat.push(r.payload.started - t0);
    round.push(t1 - t0);
  }
  w.child.kill('SIGTERM');
  await w.exited;
  await q.close();
  return { p50: pct(lat, 50), p95: pct(lat, 95), rt50: pct(round, 50) };
}

async function drain(kind, target, n) {
  const q = await openKind(kind, target, { leaseMs: 60_000 });
  const tag = `d${n}-${Math.random().toString(36).slice(2, 8)}`;
  for (let i = 0; i < DRAIN; i++) await q.publish({ id: `${tag}-${i}`, payload: i });
  const go = join(scratch, `go-${kind}-${tag}`);
  const ws = Array.from({ length: n }, (_, i) => start(['drain', kind, target, `w${i}`, go]));
  for (const w of ws) await w.until((l) => 'ready' in l);
  await new Promise((r) => setTimeout(r, 300));
  const t0 = now();
  writeFileSync(go, '');
  await Promise.all(ws.map((w) => w.exited));
  const secs = (now() - t0) / 1000;
  const total = ws.reduce((s, w) => s + (w.lines.find((l) => 'drained' in l)?.drained ?? 0), 0);
  if (total !== DRAIN) throw new Error(`${kind}: drained ${total} of ${DRAIN}`);
  await q.close();
  return DRAIN / secs;
}

const startPostgres = await loadStartPostgres();
server = await startPostgres();
try {
  const f1 = (x) => x.toFixed(1);
  const pgLatUrl = await server.database('bench_latency');
  const pgLat = await latency('postgres', pgLatUrl);
  const fileLat = await latency('file', join(scratch, 'file-latency'));
  console.log(
    `job queue benchmark: ${JOBS} jobs one at a time, ${DRAIN} drained per run (Node ${process.versions.node}, PostgreSQL by startPostgres)`,
  );
  console.log('                                      postgres        file   postgres/file');
  console.log(
    `  enqueue-to-start p50 (ms)       ${f1(pgLat.p50).padStart(10)}  ${f1(fileLat.p50).padStart(10)}   ${(pgLat.p50 / fileLat.p50).toFixed(2)}×`,
  );
  console.log(
    `  enqueue-to-start p95 (ms)       ${f1(pgLat.p95).padStart(10)}  ${f1(fileLat.p95).padStart(10)}   ${(pgLat.p95 / fileLat.p95).toFixed(2)}×`,
  );
  console.log(
    `  publish→result round trip p50   ${f1(pgLat.rt50).padStart(10)}  ${f1(fileLat.rt50).padStart(10)}   ${(pgLat.rt50 / fileLat.rt50).toFixed(2)}×`,
  );
  for (const n of [1, 2, 4]) {
    const pgRate = await drain('postgres', await server.database(`bench_drain_${n}`), n);
    const fileRate = await drain('file', join(scratch, `file-drain-${n}`), n);
    console.log(
      `  jobs/s, ${n} worker process${n > 1 ? 'es' : '  '}     ${Math.round(pgRate).toString().padStart(10)}  ${Math.round(fileRate).toString().padStart(10)}   ${(pgRate / fileRate).toFixed(2)}×`,
    );
  }
} finally {
  for (const c of children) c.kill('SIGKILL');
  await server.stop();
}
