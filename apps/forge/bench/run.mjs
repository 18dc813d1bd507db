#!/usr/bin/env node
// Benchmarks of the `forge` CLI as users run it (node dist/cli.js), with baselines measured in the
// same run: `forge serve` start to ready (spawn until initialize answers), tools/list over stdio
// with 1,000 forged tools, the server's idle RSS holding them, a cached call's stdio round trip
// against the same call in-process, and one-shot commands against a bare `node -e 0`.
// @forge/mcp's bench (packages/mcp/bench) measures the server library itself (InMemory transport,
// the cold sandboxed fib against raw bwrap + python); this one adds what the CLI costs on top.
// Prints figures and ratios; never asserts. Run `pnpm build` first.
//
//   pnpm --filter forge bench     (BENCH_RUNS=30 for more samples)

import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createForge } from '@forge/runner';
import { probe } from '@forge/sandbox';
import { loadExample } from '../../../examples/index.mjs';
import { serveChild } from './serve.mjs';

const run = promisify(execFile);
const here = dirname(fileURLToPath(import.meta.url));
const CLI = join(here, '../dist/cli.js');
const RUNS = Number(process.env.BENCH_RUNS ?? 15);
const TOOLS = 1000;

const host = await probe();
if (!host.ok) {
  console.error(`cannot benchmark: ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')}`);
  process.exit(2);
}

const root = mkdtempSync(join(tmpdir(), 'forge-cli-bench-'));
process.on('exit', () => rmSync(root, { recursive: true, force: true }));
const home = join(root, 'home');
mkdirSync(home, { recursive: true, mode: 0o700 });
writeFileSync(join(home, 'policy.json'), JSON.stringify({ breakers: { per_tool_rpm: 1e9, per_session_forge_count: 1e9 } }));
const project = (name) => {
  const p = join(root, name);
  mkdirSync(join(p, '.forge'), { recursive: true });
  return p;
};
const empty = project('empty');
const full = project('full');
const env = {
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('FORGE_'))),
  FORGE_HOME: home,
  NO_COLOR: '1',
};

const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: s[Math.floor(s.length / 2)], p95: s[Math.min(s.length - 1, Math.floor(s.length * 0.95))] };
};
const ms = (x) => `${x.toFixed(x < 10 ? 2 : 0)} ms`;
const mark = (ok) => (ok ? ' ' : '!');

const serve = (cwd) => serveChild(CLI, cwd, env);

console.log(
  `forge CLI benchmark — node ${process.version}, ${availableParallelism()} cores, bwrap ${host.bwrap.version}, ${RUNS} runs each`,
);
console.log('  (! marks a figure that misses its target on this machine)\n');

// Baselines: a bare node, and the CLI doing nothing but parse (--version).
const wall = async (args, cwd = empty) => {
  const t = performance.now();
  await run(process.execPath, args, { cwd, env });
  return performance.now() - t;
};
const bare = [];
const version = [];
for (let i = 0; i < RUNS; i++) {
  bare.push(await wall(['-e', '0']));
  version.push(await wall([CLI, '--version']));
}

// Start to ready, empty project.
// Ready is initialize answered: the server answers it while the engine opens. The first
// tools/list waits for the engine, so its time is printed too.
const startEmpty = [];
const firstList = [];
for (let i = 0; i < RUNS; i++) {
  const s = serve(empty);
  startEmpty.push(await s.ready);
  await s.request('tools/list', {});
  firstList.push(performance.now() - s.t0);
  await s.stop();
}
const se = stats(startEmpty);
const fl = stats(firstList);
console.log(`${mark(se.p50 <= 300)} forge serve start to ready (empty project)    p50 ${ms(se.p50)}  p95 ${ms(se.p95)} (target ≤ 300 ms)`);
console.log(`    start to first tools/list answered            p50 ${ms(fl.p50)}  p95 ${ms(fl.p95)}`);
console.log(`    baselines: node -e 0 p50 ${ms(stats(bare).p50)}; forge --version p50 ${ms(stats(version).p50)}`);

// 1,000 tools in the project, forged in-process.
const forge = await createForge({ home, project: full, env });
const fib = loadExample('fib');
let t = performance.now();
for (const r of await Promise.all([
  forge.forgeTool(fib),
  ...Array.from({ length: TOOLS - 1 }, (_, i) =>
    forge.forgeTool({
      name: `t${String(i).padStart(4, '0')}`,
      description: `bench tool ${i}`,
      runtime: 'python3',
      input_schema: { type: 'object', properties: { x: { type: 'integer' } } },
      impl: 'import json,sys\nprint(json.dumps({"ok":True,"data":json.load(sys.stdin)}))\n',
    }),
  ),
])) {
  if (!r.ok) throw new Error(`${r.kind}: ${r.message}`);
}
console.log(`\n  (forged ${TOOLS} tools in ${((performance.now() - t) / 1000).toFixed(1)} s)`);

const startFull = [];
const firstListFull = [];
for (let i = 0; i < Math.max(3, Math.floor(RUNS / 2)); i++) {
  const s = serve(full);
  startFull.push(await s.ready);
  await s.request('tools/list', {});
  firstListFull.push(performance.now() - s.t0);
  await s.stop();
}
const sf = stats(startFull);
console.log(`${mark(sf.p50 <= 300)} forge serve start to ready (${TOOLS} tools)      p50 ${ms(sf.p50)}  p95 ${ms(sf.p95)}`);
console.log(`    start to first tools/list answered            p50 ${ms(stats(firstListFull).p50)}  p95 ${ms(stats(firstListFull).p95)}`);

const srv = serve(full);
await srv.ready;
// Steady state: the engine open (first list) and the start-up work behind it (interpreter
// probes) done.
await srv.request('tools/list', {});
await new Promise((r) => setTimeout(r, 1000));
const lists = [];
for (let i = 0; i < RUNS * 2; i++) {
  t = performance.now();
  const r = await srv.request('tools/list', {});
  lists.push(performance.now() - t);
  if (r.result.tools.length !== TOOLS + 5) throw new Error(`tools/list gave ${r.result.tools.length} tools`);
}
const ls = stats(lists);
console.log(
  `${mark(ls.p50 <= 20)} tools/list over stdio, ${TOOLS} tools            p50 ${ms(ls.p50)}  p95 ${ms(ls.p95)} (target ≤ 20 ms; includes the pipe and JSON parse)`,
);
await new Promise((r) => setTimeout(r, 1000));
const rss = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${srv.child.pid}/status`, 'utf8'))?.[1]) / 1024;
console.log(`  forge serve RSS, idle with ${TOOLS} tools       ${rss.toFixed(0)} MiB`);

// A cached call: stdio round trip against the same call in-process.
const seed = await forge.callTool('fib', { n: 77 });
if (!seed.ok) throw new Error(seed.error.message);
const viaStdio = [];
const inProc = [];
for (let i = 0; i < RUNS * 10; i += 10) {
  for (let k = 0; k < 10; k++) {
    t = performance.now();
    const e = await forge.callTool('fib', { n: 77 });
    inProc.push(performance.now() - t);
    if (e.meta.cache !== 'hit') throw new Error('expected a cache hit in-process');
  }
  for (let k = 0; k < 10; k++) {
    t = performance.now();
    const r = await srv.request('tools/call', { name: 'fib', arguments: { n: 77 } });
    viaStdio.push(performance.now() - t);
    if (r.result.isError) throw new Error(JSON.stringify(r.result));
  }
}
const vs = stats(viaStdio);
const ip = stats(inProc);
console.log(
  `${mark(vs.p50 - ip.p50 <= 1)} cached fib: stdio round trip p50 ${ms(vs.p50)}  in-process p50 ${ms(ip.p50)}  added ${ms(vs.p50 - ip.p50)} (target ≤ 1 ms)`,
);
await srv.stop();
await forge.close();

// One-shot commands: each opens the engine, does one thing and exits.
const oneShot = [];
for (let i = 0; i < Math.max(3, Math.floor(RUNS / 2)); i++) oneShot.push(await wall([CLI, 'tools', 'list', '--json'], full));
console.log(
  `\n  forge tools list --json (${TOOLS} tools)          p50 ${ms(stats(oneShot).p50)}  (${(stats(oneShot).p50 / stats(bare).p50).toFixed(1)}× node -e 0)`,
);
