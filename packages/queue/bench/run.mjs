// Benchmark of the file queue (pnpm --filter @forge/queue bench, after building it):
//  1. added latency per job: publish → a waiting worker process's next() returns → finish →
//     the publisher's wait() returns, one job at a time; baseline: the same round trip as a JSON
//     line over a pipe to a worker process and a line back.
//  2. jobs/s drained by 1, 2 and 4 worker processes (claim → finish); baseline: pipe round trips/s
//     to as many processes.
//  3. one durable small-file write (temporary, fsync, rename, directory fsync) on the same disk,
//     interleaved with the round trips: the least a durable queue pays per job; the queue's latency
//     is fsync-bound, so the ratio to it says what the protocol's steps cost beyond that minimum.
// Prints the figures and the ratios. The queue lives under the system temp dir (its disk decides
// the fsync cost) and, when /dev/shm exists, the latency is measured on tmpfs too (no fsync cost:
// the protocol's own overhead). Everything is removed afterwards.
import { spawn } from 'node:child_process';
import { closeSync, constants, existsSync, fsyncSync, mkdtempSync, openSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { openFileQueue } from '../dist/index.js';

const CHILD = new URL('./child.mjs', import.meta.url).pathname;
const JOBS = Number(process.env.BENCH_JOBS ?? 500);
const DRAIN = Number(process.env.BENCH_DRAIN ?? 1000);
const root = mkdtempSync(join(tmpdir(), 'forge-queue-bench-'));
const shm = existsSync('/dev/shm') ? mkdtempSync('/dev/shm/forge-queue-bench-') : undefined;
const children = new Set();
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL');
  rmSync(root, { recursive: true, force: true });
  if (shm) rmSync(shm, { recursive: true, force: true });
});

function start(args) {
  const child = spawn(process.execPath, [CHILD, ...args], { stdio: ['pipe', 'pipe', 'inherit'] });
  children.add(child);
  const lines = createInterface({ input: child.stdout });
  const queue = [];
  const waiters = [];
  lines.on('line', (l) => (waiters.length ? waiters.shift()(l) : queue.push(l)));
  const exited = new Promise((resolve) =>
    child.on('exit', (code) => {
      children.delete(child);
      resolve(code);
    }),
  );
  return { child, exited, line: () => (queue.length ? Promise.resolve(queue.shift()) : new Promise((r) => waiters.push(r))) };
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const f2 = (x) => x.toFixed(2);

/**
 * One durable small-file write in `dir` (ms): temporary, fsync, rename, directory fsync — the least
 * any durable queue pays to accept one job, and the unit of the file queue's cost on a disk.
 */
function durableWrite(dir, fd, i) {
  const t0 = performance.now();
  const tmp = join(dir, `t${i}`);
  const f = openSync(tmp, 'wx', 0o600);
  writeSync(f, JSON.stringify({ id: `probe-${i}`, payload: { i } }));
  fsyncSync(f);
  closeSync(f);
  renameSync(tmp, join(dir, 'job'));
  fsyncSync(fd);
  return performance.now() - t0;
}

// Each round trip is followed by one durable small-file write on the same disk, so both see the same load.
async function queueLatency(base) {
  const dir = join(base, 'latency');
  const q = await openFileQueue(dir);
  const w = start(['serve', dir]);
  await w.line();
  const probeDir = mkdtempSync(join(base, 'fsync-'));
  const fd = openSync(probeDir, constants.O_RDONLY | constants.O_DIRECTORY);
  const ms = [];
  const probe = [];
  for (let i = 0; i < JOBS + 20; i++) {
    const id = `lat-${i}`;
    const t0 = performance.now();
    await q.publish({ id, payload: { i } });
    const r = await q.wait(id);
    const t = performance.now() - t0;
    if (r?.status !== 'done') throw new Error(`job ${id} did not finish: ${JSON.stringify(r)}`);
    if (i >= 20) ms.push(t); // the first 20 warm up
    probe.push(durableWrite(probeDir, fd, i));
  }
  closeSync(fd);
  w.child.kill('SIGTERM');
  await w.exited;
  await q.close();
  return { ms, fsync: pct(probe, 50) };
}

async function pipeLatency() {
  const w = start(['pipe']);
  await w.line();
  const ms = [];
  for (let i = 0; i < JOBS + 20; i++) {
    const t0 = performance.now();
    w.child.stdin.write(`${JSON.stringify({ id: `lat-${i}`, payload: { i } })}\n`);
    await w.line();
    if (i >= 20) ms.push(performance.now() - t0);
  }
  w.child.stdin.end();
  await w.exited;
  return ms;
}

async function queueThroughput(workers) {
  const dir = join(root, `drain-${workers}`);
  const q = await openFileQueue(dir);
  for (let i = 0; i < DRAIN; i++) await q.publish({ id: `d-${i}`, payload: { i } });
  const go = join(dir, 'go');
  const ws = Array.from({ length: workers }, () => start(['drain', dir, go]));
  await new Promise((r) => setTimeout(r, 300)); // every worker has opened the queue
  const t0 = performance.now();
  writeFileSync(go, '');
  const counts = await Promise.all(ws.map(async (w) => JSON.parse(await w.line()).n));
  const s = (performance.now() - t0) / 1000;
  const total = counts.reduce((a, b) => a + b, 0);
  if (total !== DRAIN) throw new Error(`drained ${total} of ${DRAIN} jobs`);
  await q.close();
  return DRAIN / s;
}

async function pipeThroughput(workers) {
  const ws = Array.from({ length: workers }, () => start(['pipe']));
  for (const w of ws) await w.line();
  const t0 = performance.now();
  await Promise.all(
    ws.map(async (w, k) => {
      for (let i = k; i < DRAIN; i += workers) {
        w.child.stdin.write(`${JSON.stringify({ id: `d-${i}`, payload: { i } })}\n`);
        await w.line();
      }
      w.child.stdin.end();
    }),
  );
  const s = (performance.now() - t0) / 1000;
  for (const w of ws) await w.exited;
  return DRAIN / s;
}

const { ms: ql, fsync: fc } = await queueLatency(root);
const pl = await pipeLatency();
const qm = pct(ql, 50);
const pm = pct(pl, 50);
console.log(`round trip, ${JOBS} jobs one at a time, one worker process:`);
console.log(`  file queue (${tmpdir()})   p50 ${f2(qm)} ms   p95 ${f2(pct(ql, 95))} ms`);
if (shm) {
  const { ms: sl } = await queueLatency(shm);
  console.log(
    `  file queue (/dev/shm, tmpfs)   p50 ${f2(pct(sl, 50))} ms   p95 ${f2(pct(sl, 95))} ms   added p50 ${f2(pct(sl, 50) - pm)} ms`,
  );
}
console.log(`  plain pipe   p50 ${f2(pm)} ms   p95 ${f2(pct(pl, 95))} ms   (baseline)`);
console.log(
  `  added by the queue (${tmpdir()}): p50 ${f2(qm - pm)} ms, p95 ${f2(pct(ql, 95) - pct(pl, 95))} ms; ratio ${f2(qm / pm)}x (target: added <= 2 ms at p50)`,
);
console.log(
  `  one durable small-file write on ${tmpdir()} (temp, fsync, rename, dir fsync; between the round trips): p50 ${f2(fc)} ms; the added latency is ${f2((qm - pm) / fc)} of them`,
);
console.log(`throughput, ${DRAIN} jobs drained (claim + finish):`);
for (const n of [1, 2, 4]) {
  const qt = await queueThroughput(n);
  const pt = await pipeThroughput(n);
  console.log(
    `  ${n} worker${n > 1 ? 's' : ' '}   file queue ${qt.toFixed(0)} jobs/s   pipe ${pt.toFixed(0)} round trips/s   ratio ${(qt / pt).toFixed(3)}`,
  );
}
process.exit(0);
