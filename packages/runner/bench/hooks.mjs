#!/usr/bin/env node
// The cost of the operator's hooks per call (docs/architecture.md "Hooks"): fib without the cache
// through `forge.callTool`, with an empty pre and an empty post hook (each `#!/bin/sh` exiting 0,
// each in a sandbox of its own), against the same call with no hooks, paired in the same run
// (the hooks directory moved aside and back between the two), each call paced like an agent's.
// Also the hook's own run, the same calls back to back, and a Python pre hook (served by a warm
// interpreter when one waits). Target: an empty pre + post ≤ 5 ms added. Prints figures; never
// asserts.
//
//   pnpm --filter @forge/runner exec node bench/hooks.mjs     (BENCH_RUNS=60 for more samples)

import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { prebuiltStats, probe } from '@forge/sandbox';
import { paired, stats } from '../../../bench/baseline.mjs';
import { loadExample } from '../../../examples/index.mjs';
import { createForge } from '../dist/index.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 40);
const host = await probe();
if (!host.ok) {
  console.error(`cannot benchmark: ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')}`);
  process.exit(2);
}
const root = mkdtempSync(join(tmpdir(), 'forge-hooks-bench-'));
process.on('exit', () => rmSync(root, { recursive: true, force: true }));
const home = join(root, 'home');
const project = join(root, 'project');
mkdirSync(home, { recursive: true, mode: 0o700 });
mkdirSync(join(project, '.forge'), { recursive: true });
writeFileSync(join(home, 'policy.json'), JSON.stringify({ breakers: { per_tool_rpm: 1e9, per_session_forge_count: 1e9 } }));
const forge = await createForge({ home, project });
const fib = loadExample('fib');
if (!(await forge.forgeTool({ ...fib, name: 'fib_cold', meta: { ...fib.meta, deterministic: false } })).ok) throw new Error('forge');

const hooks = join(home, 'hooks');
const off = join(home, 'hooks.off');
const install = (rel, body) => {
  const file = join(off, rel);
  mkdirSync(join(file, '..'), { recursive: true });
  for (const d of [off, join(file, '..')]) chmodSync(d, 0o755);
  writeFileSync(file, body);
  chmodSync(file, 0o755);
};
install('pre.d/10-empty', '#!/bin/sh\nexit 0\n');
install('post.d/10-empty', '#!/bin/sh\nexit 0\n');

const call = async (n) => {
  const e = await forge.callTool('fib_cold', { n });
  if (!e.ok) throw new Error(`${e.error.kind}: ${e.error.message}`);
};
const withHooks = async (i) => {
  renameSync(off, hooks);
  try {
    await call(20 + (i % 50));
  } finally {
    renameSync(hooks, off);
  }
};
// Each call starts after a pause like an agent's between calls (BENCH_PACE_MS, default 0), once
// the sandboxes built after the call before are ready: what a call leaves to be built (a fork of
// this process per sandbox) is then paid between calls, as for an agent's calls seconds apart.
const PACE_MS = Number(process.env.BENCH_PACE_MS ?? 0);
const settle = async () => {
  await new Promise((r) => setTimeout(r, PACE_MS)); // Lets time pass: the pause between an agent's calls.
  for (let i = 0; i < 500 && prebuiltStats().building > 0; i++) await new Promise((r) => setTimeout(r, 1)); // Lets time pass: waiting for builds.
};
for (let i = 0; i < 6; i++) {
  await withHooks(i);
  await call(20);
}
const ms = (x) => `${x.toFixed(2)} ms`;
console.log(
  `@forge/runner hooks benchmark — node ${process.version}, ${availableParallelism()} cores, ${RUNS} pairs, ${PACE_MS} ms apart\n`,
);
const hookMs = () =>
  readFileSync(forge.paths.auditLog, 'utf8')
    .split('\n')
    .filter((l) => l.includes('"hook.decided"'))
    .map((l) => JSON.parse(l).data.ms);
const seenBefore = hookMs().length;
const sh = await paired(withHooks, (i) => call(20 + (i % 50)), RUNS, { beforeEach: settle });
const mark = sh.diff.p50 <= 5 ? ' ' : '!';
console.log(`  callTool fib, no hooks                     p50 ${ms(sh.base.p50)}  p99 ${ms(sh.base.p99)}`);
console.log(`  with an empty pre + post hook (/bin/sh)    p50 ${ms(sh.ours.p50)}  p99 ${ms(sh.ours.p99)}`);
console.log(`${mark} added per call (median of pair differences) ${ms(sh.diff.p50)}  (target ≤ 5 ms)`);
console.log(`  one hook's own sandboxed run (hook.decided ms) p50 ${ms(stats(hookMs().slice(seenBefore)).p50)}`);
// The floor on this host: the same empty hook as a plain process (no sandbox), 50 runs by one shell.
const floor = spawnSync(
  '/bin/sh',
  [
    '-c',
    'i=0; s=$(date +%s%N); while [ $i -lt 50 ]; do /bin/sh "$0" </dev/null; i=$((i+1)); done; e=$(date +%s%N); echo $(( (e - s) / 50000 ))',
    join(off, 'pre.d', '10-empty'),
  ],
  { encoding: 'utf8' },
);
console.log(`  the floor here: the same hook as a plain process, no sandbox  ${ms(Number(floor.stdout.trim()) / 1000)} each`);
// The same calls back to back, no pause: each pays for the sandboxes the one before left to build.
const b2b = async (f) => {
  const t = [];
  for (let i = 0; i < RUNS; i++) {
    const s = performance.now();
    await f(i);
    t.push(performance.now() - s);
  }
  return stats(t).p50;
};
await settle();
const b2bBase = await b2b((i) => call(20 + (i % 50)));
await settle();
const b2bHooks = await b2b(withHooks);
console.log(`  back to back, no pause: no hooks p50 ${ms(b2bBase)}, with both hooks p50 ${ms(b2bHooks)}`);

rmSync(join(off, 'post.d'), { recursive: true });
rmSync(join(off, 'pre.d', '10-empty'));
install('pre.d/10-python', '#!/usr/bin/env python3\nimport json, sys\njson.load(sys.stdin)\n');
for (let i = 0; i < 4; i++) await withHooks(i);
const before = prebuiltStats().warm;
await settle();
const p = await paired(withHooks, (i) => call(20 + (i % 50)), RUNS, { beforeEach: settle });
console.log(
  `\n  with a Python pre hook that reads the event p50 ${ms(p.ours.p50)}, added ${ms(p.diff.p50)} (median of pair differences; ${prebuiltStats().warm - before} warm runs, hooks and tools)`,
);
await forge.close();
