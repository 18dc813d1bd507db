#!/usr/bin/env node
// A forged Python tool (fib, no cache) called over MCP stdio as an agent calls it: the SDK client
// against `forge serve`, whose sandboxes are built ahead with the interpreter already running
// (warm). Against raw bwrap + the same python3 running the same script, measured in the same run,
// alternating. Calls are paced like an agent's (a pause between them, untimed), so each finds its
// warm sandbox ready, as it would between an agent's turns. Target: p50 ≤ 10 ms. Prints figures
// and ratios; never asserts. Run `pnpm build` first.
//
//   node apps/forge/bench/warm-stdio.mjs     (BENCH_RUNS=100 for more samples; BENCH_PACE_MS, default 300)

import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { probe, resolveRuntimes } from '@forge/sandbox';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { paired, rawPython } from '../../../bench/baseline.mjs';
import { fibScratch } from './scratch.mjs';

const CLI = join(dirname(fileURLToPath(import.meta.url)), '../dist/cli.js');
const RUNS = Number(process.env.BENCH_RUNS ?? 60);
/** The pause before each pair of calls (untimed), long enough for the server to have warmed the next sandbox. */
const PACE_MS = Number(process.env.BENCH_PACE_MS ?? 300);

const host = await probe();
if (!host.ok) {
  console.error(`cannot benchmark: ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')}`);
  process.exit(2);
}
const python = (await resolveRuntimes()).get('python3');

const { root, project, env, impl } = await fibScratch(CLI, 'forge-warm-stdio-bench-');
const script = join(root, 'fib.py');
writeFileSync(script, impl);

const client = new Client({ name: 'bench', version: '1' });
await client.connect(new StdioClientTransport({ command: process.execPath, args: [CLI, 'serve'], cwd: project, env, stderr: 'ignore' }));
const call = async (n) => {
  const r = await client.callTool({ name: 'fib_run', arguments: { n } });
  if (r.isError) throw new Error(JSON.stringify(r.content));
};
// The first calls pay for what the server finds once (runtimes, the host probe, the first warm-up).
for (let i = 0; i < 5; i++) await call(20);

const r = await paired(
  (i) => call(20 + (i % 50)),
  (i) => rawPython(host, python, script, { n: 20 + (i % 50) }),
  RUNS,
  // Lets time pass: an agent's calls come seconds apart; the server refills its warm sandbox meanwhile.
  { before: () => sleep(PACE_MS) },
);
await client.close();

// How each call ran, from the run manifests forge wrote.
const modes = {};
const runs = join(project, '.forge', 'runs');
for (const d of readdirSync(runs)) {
  try {
    const m = JSON.parse(readFileSync(join(runs, d, 'run_manifest.json'), 'utf8'));
    const mode = m.sandbox?.mode ?? 'unknown';
    modes[mode] = (modes[mode] ?? 0) + 1;
  } catch {
    // not a run directory
  }
}

const ms = (x) => `${x.toFixed(2)} ms`;
const mark = (ok) => (ok ? ' ' : '!');
console.log(
  `forge MCP stdio benchmark — node ${process.version}, ${availableParallelism()} cores, bwrap ${host.bwrap.version}, ${RUNS} runs each`,
);
console.log('  (! marks a figure that misses its target on this machine)\n');
console.log(
  `${mark(r.ours.p50 <= 10)} tools/call fib over stdio, no cache   p50 ${ms(r.ours.p50)}  p99 ${ms(r.ours.p99)}  (target p50 ≤ 10 ms)`,
);
console.log(`  raw bwrap + python3, same script      p50 ${ms(r.base.p50)}  p99 ${ms(r.base.p99)}`);
console.log(`  ratio p50 ${(r.ours.p50 / r.base.p50).toFixed(3)}×, p99 ${(r.ours.p99 / r.base.p99).toFixed(3)}×`);
console.log(`  how the ${RUNS + 5} calls ran: ${JSON.stringify(modes)}`);
