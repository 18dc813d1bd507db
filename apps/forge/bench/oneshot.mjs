#!/usr/bin/env node
// One-shot CLI commands as a whole process (node start, module load, policy, registry, the
// command, exit), against a bare `node -e 0` measured in the same run, alternating: `forge
// --version`, `forge tools list` in a project with one tool, and `forge tools call` of fib
// without the cache (a sandboxed Python run each time). Targets: tools list ≤ 1.5× node -e 0;
// tools call ≤ 300 ms. Prints figures and ratios; never asserts. Run `pnpm build` first.
//
//   node apps/forge/bench/oneshot.mjs     (BENCH_RUNS=30 for more samples)

import { execFile } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { stats } from '../../../bench/baseline.mjs';
import { fibScratch } from './scratch.mjs';

const run = promisify(execFile);
const CLI = join(dirname(fileURLToPath(import.meta.url)), '../dist/cli.js');
const RUNS = Number(process.env.BENCH_RUNS ?? 15);

const { project, env } = await fibScratch(CLI, 'forge-oneshot-bench-');

const wall = async (args) => {
  const t = performance.now();
  await run(process.execPath, args, { cwd: project, env });
  return performance.now() - t;
};
// The first of each pays for what later ones find cached (the runtime lookup): not counted.
await wall([CLI, 'tools', 'list']);
await wall([CLI, 'tools', 'call', 'fib_run', '{"n":20}']);

const bare = [];
const version = [];
const list = [];
const call = [];
for (let i = 0; i < RUNS; i++) {
  bare.push(await wall(['-e', '0']));
  version.push(await wall([CLI, '--version']));
  list.push(await wall([CLI, 'tools', 'list']));
  call.push(await wall([CLI, 'tools', 'call', 'fib_run', `{"n":${20 + (i % 50)}}`]));
}
const b = stats(bare);
const ms = (x) => `${x.toFixed(1)} ms`;
const mark = (ok) => (ok ? ' ' : '!');
const l = stats(list);
const c = stats(call);
console.log(`forge one-shot CLI benchmark — node ${process.version}, ${availableParallelism()} cores, ${RUNS} runs each`);
console.log('  (! marks a figure that misses its target on this machine)\n');
console.log(`  node -e 0                    p50 ${ms(b.p50)}  p95 ${ms(b.p95)}`);
console.log(`  forge --version              p50 ${ms(stats(version).p50)}  (${(stats(version).p50 / b.p50).toFixed(2)}× node -e 0)`);
console.log(
  `${mark(l.p50 <= 1.5 * b.p50)} forge tools list             p50 ${ms(l.p50)}  (${(l.p50 / b.p50).toFixed(2)}× node -e 0; target ≤ 1.5×)`,
);
console.log(`${mark(c.p50 <= 300)} forge tools call fib (run)   p50 ${ms(c.p50)}  p95 ${ms(c.p95)}  (target ≤ 300 ms)`);
