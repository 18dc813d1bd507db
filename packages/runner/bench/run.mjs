#!/usr/bin/env node
// Benchmarks of @forge/runner against raw bwrap running the same script, measured in the same
// run: a cold sandboxed call, cache hits, forging, and 8 concurrent callers. Prints figures and
// ratios. Not a test: figures depend on the host.
//
//   pnpm bench     (BENCH_RUNS=100 for more samples)

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { prebuiltStats, probe, resolveRuntimes } from '@forge/sandbox';
import { paired, rawPython, stats } from '../../../bench/baseline.mjs';
import { loadExample } from '../../../examples/index.mjs';
import { createForge } from '../dist/index.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 60);
const host = await probe();
if (!host.ok) {
  console.error(`cannot benchmark: ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')}`);
  process.exit(2);
}
const python = (await resolveRuntimes()).get('python3');

const root = mkdtempSync(join(tmpdir(), 'forge-runner-bench-'));
process.on('exit', () => rmSync(root, { recursive: true, force: true }));
const home = join(root, 'home');
const project = join(root, 'project');
mkdirSync(home, { recursive: true });
mkdirSync(join(project, '.forge'), { recursive: true });
// Breakers high enough not to stop a benchmark; everything else is the bundle defaults.
writeFileSync(join(home, 'policy.json'), JSON.stringify({ breakers: { per_tool_rpm: 1e9, per_session_forge_count: 1e9 } }));
const forge = await createForge({ home, project });

const fib = loadExample('fib');
const coldFib = { ...fib, name: 'fib_cold', meta: { ...fib.meta, deterministic: false } };
for (const spec of [fib, coldFib]) {
  const r = await forge.forgeTool(spec, { overwrite: true });
  if (!r.ok) throw new Error(`${spec.name}: ${r.message}`);
}
const script = join(root, 'fib.py');
writeFileSync(script, fib.impl);

const raw = (n) => rawPython(host, python, script, { n });

async function cold(n) {
  const e = await forge.callTool('fib_cold', { n });
  if (!e.ok) throw new Error(`fib_cold: ${e.error.kind}: ${e.error.message}`);
}

const ms = (x) => `${x.toFixed(2)} ms`;
const mark = (ok) => (ok ? ' ' : '!');
console.log(
  `@forge/runner benchmark — node ${process.version}, ${availableParallelism()} cores, bwrap ${host.bwrap.version}, ${RUNS} runs each`,
);
console.log('  (! marks a figure that misses its target on this machine)\n');

for (let i = 0; i < 5; i++) {
  await raw(20);
  await cold(20);
}
// A cold call takes a sandbox built ahead when one is waiting, and has the next one built
// meanwhile. Between calls spaced like an agent's (seconds apart) it is always waiting; here each
// pair starts once the build has finished, so it competes with neither side's timing.
const settle = async () => {
  for (let i = 0; i < 500 && prebuiltStats().building > 0; i++) await new Promise((r) => setTimeout(r, 1));
};
const served = prebuiltStats().served;
const c = await paired(
  (i) => cold(20 + (i % 50)),
  (i) => raw(20 + (i % 50)),
  RUNS,
  { before: settle },
);
const ratio = c.ours.p50 / c.base.p50;
const added = c.ours.p50 - c.base.p50;
console.log(
  `${mark(ratio <= 1.1 && added <= 3)} callTool fib, cold   p50 ${ms(c.ours.p50)}  p95 ${ms(c.ours.p95)}   raw bwrap + python p50 ${ms(c.base.p50)}  p95 ${ms(c.base.p95)}`,
);
console.log(`${mark(ratio <= 1.1 && added <= 3)}   ratio ${ratio.toFixed(3)}× (target ≤ 1.10×), added ${ms(added)} (target ≤ 3 ms)`);
console.log(`    median of the paired differences ${ms(c.diff.p50)} (each call against the raw run next to it)`);
console.log(`    ${prebuiltStats().served - served} of ${RUNS} calls ran in a sandbox built ahead`);

// The same call when no sandbox was built ahead (each one is built at call time).
mkdirSync(join(root, 'project-fresh', '.forge'), { recursive: true });
const fresh = await createForge({ home, project: join(root, 'project-fresh'), prebuild: false });
if (!(await fresh.forgeTool(coldFib, { overwrite: true })).ok) throw new Error('fib_cold (fresh)');
const f0 = await paired(
  async (i) => {
    const e = await fresh.callTool('fib_cold', { n: 20 + (i % 50) });
    if (!e.ok) throw new Error(e.error.message);
  },
  (i) => raw(20 + (i % 50)),
  RUNS,
);
console.log(
  `    without sandboxes built ahead: p50 ${ms(f0.ours.p50)}, raw p50 ${ms(f0.base.p50)}, added ${ms(f0.ours.p50 - f0.base.p50)} (paired median ${ms(f0.diff.p50)})`,
);
await fresh.close();

// Cache hits: many callers in flight, so the audit log's group commit batches their entries.
const seed = await forge.callTool('fib', { n: 30 });
if (!seed.ok) throw new Error(seed.error.message);
const HITS = Number(process.env.BENCH_HITS ?? 40_000);
let next = 0;
let t = performance.now();
await Promise.all(
  Array.from({ length: 256 }, async () => {
    while (next++ < HITS) {
      const e = await forge.callTool('fib', { n: 30 });
      if (e.meta.cache !== 'hit') throw new Error(`expected a cache hit, got ${JSON.stringify(e)}`);
    }
  }),
);
const hitRate = HITS / ((performance.now() - t) / 1000);
console.log(
  `${mark(hitRate >= 20_000)} cache hits, 256 in flight   ${Math.round(hitRate)} calls/s (target ≥ 20,000), each with a durable audit entry`,
);

// Forging: a new name each time (validation, static check, policy, atomic write, audit).
const forgeTimes = [];
for (let i = 0; i < Math.max(RUNS, 50); i++) {
  t = performance.now();
  const r = await forge.forgeTool({ ...fib, name: `fib_${i}` });
  forgeTimes.push(performance.now() - t);
  if (!r.ok) throw new Error(r.message);
}
const f = stats(forgeTimes);
console.log(`${mark(f.p50 <= 5)} forgeTool                  p50 ${ms(f.p50)}  p95 ${ms(f.p95)} (target p50 ≤ 5 ms)`);

// 8 concurrent callers of the cold tool.
const lat = [];
const PER = Math.max(5, Math.round(RUNS / 4));
t = performance.now();
await Promise.all(
  Array.from({ length: 8 }, async (_, k) => {
    for (let i = 0; i < PER; i++) {
      const s = performance.now();
      await cold(20 + ((k * PER + i) % 50));
      lat.push(performance.now() - s);
    }
  }),
);
const secs = (performance.now() - t) / 1000;
const l = stats(lat);
console.log(`  8 concurrent callers, cold  ${(lat.length / secs).toFixed(1)} calls/s, p50 ${ms(l.p50)}  p95 ${ms(l.p95)}`);

await forge.close();
