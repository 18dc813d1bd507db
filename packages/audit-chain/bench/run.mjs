#!/usr/bin/env node
// Benchmarks of @forge/audit-chain. Prints each figure, its target, and the ratio against a
// baseline measured in the same run. Not a test: figures depend on the machine.
//
//   pnpm bench                 (from the repository root or this package)
//   BENCH_ENTRIES=200000 node bench/run.mjs

import { execFile } from 'node:child_process';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const CHILD = new URL('./child.mjs', import.meta.url).pathname;
const N = Number(process.env.BENCH_ENTRIES ?? 200_000);
const VERIFY_N = Number(process.env.BENCH_VERIFY_ENTRIES ?? 1_000_000);
const PROCS = 4;

const dir = await mkdtemp(join(tmpdir(), 'audit-chain-bench-'));
const rows = [];

async function child(args) {
  const { stdout } = await run(process.execPath, [CHILD, ...args], { maxBuffer: 1 << 20 });
  return JSON.parse(stdout.trim().split('\n').at(-1));
}

/** Starts `n` children with the same mode, releases them together, returns total entries/s. */
async function together(mode, path, n, each) {
  const start = join(dir, `start-${mode}-${Math.random()}`);
  const children = Array.from({ length: n }, () => child([mode, path, String(each), start]));
  await new Promise((r) => setTimeout(r, 500)); // let every child open its file
  const t0 = performance.now();
  await writeFile(start, '');
  const results = await Promise.all(children);
  const wall = performance.now() - t0;
  return { rate: (n * each) / (wall / 1000), results };
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

const fmt = (x) => Math.round(x).toLocaleString('en-US');

function row(name, value, unit, target, baselineName, baseline) {
  rows.push({ name, value, unit, target, baselineName, baseline });
  const ratio = baseline ? `${(value / baseline).toFixed(2)}× ${baselineName} (${fmt(baseline)} ${unit})` : '';
  const ok = !target
    ? true
    : target.ratio !== undefined
      ? value / baseline >= target.ratio
      : target.min !== undefined
        ? value >= target.min
        : value <= target.max;
  const goal = !target
    ? ''
    : target.ratio !== undefined
      ? `target ≥ ${target.ratio.toFixed(2)}×`
      : `target ${target.min !== undefined ? '≥' : '≤'} ${fmt(target.min ?? target.max)}`;
  console.log(`${ok ? ' ' : '!'} ${name.padEnd(44)} ${fmt(value).padStart(10)} ${unit.padEnd(10)} ${goal.padEnd(18)} ${ratio}`);
}

try {
  console.log(
    `@forge/audit-chain benchmark — node ${process.version}, ${availableParallelism()} cores, ${N.toLocaleString('en-US')} entries per append run`,
  );
  console.log('  (! marks a figure that misses its target on this machine)\n');

  // 1. One process, durable group-committed appends, vs plain fs.appendFile of the same lines.
  // With and without the Merkle tree (leaf and node hashing, tiles written as they fill), runs
  // alternating so that a machine whose speed drifts weighs on both alike.
  const single = [];
  const noTree = [];
  for (let k = 0; k < 3; k++) {
    const r = await child(['append', join(dir, `single-${k}.log`), String(N)]);
    single.push(r.count / (r.ms / 1000));
    const n = await child(['append-notree', join(dir, `notree-${k}.log`), String(N)]);
    noTree.push(n.count / (n.ms / 1000));
  }
  const lineBytes = (await stat(join(dir, 'single-0.log'))).size / N;
  const plainSingle = await child(['plain', join(dir, 'plain-single.log'), String(Math.min(N, 50_000))]);
  row(
    'append, 1 process (durable, batched)',
    median(single),
    'entries/s',
    { min: 50_000 },
    'fs.appendFile',
    plainSingle.count / (plainSingle.ms / 1000),
  );

  row('append, 1 process, with the Merkle tree and tiles', median(single), 'entries/s', { min: 60_000 }, 'no tree', median(noTree));

  // 2. Four processes on one log, vs four processes doing fs.appendFile on one file.
  const multi = [];
  for (let k = 0; k < 3; k++) multi.push((await together('append', join(dir, `multi-${k}.log`), PROCS, N / PROCS)).rate);
  const plainMulti = await together('plain', join(dir, 'plain-multi.log'), PROCS, Math.min(N, 50_000) / PROCS);
  row(`append, ${PROCS} processes on one log (durable)`, median(multi), 'entries/s', { min: 20_000 }, 'fs.appendFile', plainMulti.rate);

  // 3. Verify a large log in bounded memory, vs reading and splitting the same file.
  const big = join(dir, 'big.log');
  await together('append', big, 2, VERIFY_N / 2);
  const size = (await stat(big)).size;
  const verifies = [];
  let peak = 0;
  for (let k = 0; k < 3; k++) {
    const r = await child(['verify', big]);
    verifies.push(r.count / (r.ms / 1000));
    peak = Math.max(peak, r.peakMiB);
  }
  const reads = [];
  for (let k = 0; k < 3; k++) {
    const r = await child(['read', big]);
    reads.push(r.count / (r.ms / 1000));
  }
  console.log(
    `\n  verify runs on ${VERIFY_N.toLocaleString('en-US')} entries (${(size / 2 ** 20).toFixed(0)} MiB, ${(size / VERIFY_N).toFixed(0)} bytes/entry):`,
  );
  const hashes = [];
  for (let k = 0; k < 3; k++) {
    const r = await child(['hash', big]);
    hashes.push(r.count / (r.ms / 1000));
  }
  row('verify, one thread (hash, shape, chain)', median(verifies), 'entries/s', { min: 300_000 }, 'read+split only', median(reads));
  row('  the same against SHA-256 of each line alone', median(verifies), 'entries/s', undefined, 'sha256 only', median(hashes));
  // The tiles against the entries: a leaf hash per entry and a node hash per entry besides. Runs
  // alternate with the baseline's, so that a machine whose speed drifts weighs on both alike.
  const tiles = [];
  const tiles1 = [];
  const hashes2 = [];
  for (let k = 0; k < 5; k++) {
    const h = await child(['hash', big]);
    hashes2.push(h.count / (h.ms / 1000));
    const r = await child(['verify-tiles', big]);
    tiles.push(r.count / (r.ms / 1000));
    if (k < 3) {
      const r1 = await child(['verify-tiles1', big]);
      tiles1.push(r1.count / (r1.ms / 1000));
    }
  }
  row('verify the tiles beside the log, threads: 2', median(tiles), 'entries/s', { ratio: 0.8 }, 'sha256 only', median(hashes2));
  row('verify the tiles beside the log, one thread', median(tiles1), 'entries/s', undefined, 'sha256 only', median(hashes2));
  const two = [];
  let peak2 = 0;
  for (let k = 0; k < 3; k++) {
    const r = await child(['verify2', big]);
    two.push(r.count / (r.ms / 1000));
    peak2 = Math.max(peak2, r.peakMiB);
  }
  row('verify, threads: 2', median(two), 'entries/s', undefined, 'one thread', median(verifies));
  row('verify, threads: 2, peak memory', peak2, 'MiB', undefined, 'one thread', peak);
  const small = join(dir, 'single-0.log');
  const smallPeak = (await child(['verify', small])).peakMiB;
  row(`verify, one thread, peak memory, ${fmt(VERIFY_N)} entries`, peak, 'MiB', { max: 64 }, `${fmt(N)} entries`, smallPeak);
  console.log(`\n  append line size: ${lineBytes.toFixed(0)} bytes; appendFile baselines are not durable (no fsync).`);
} finally {
  await rm(dir, { recursive: true, force: true });
}
