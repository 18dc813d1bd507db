#!/usr/bin/env node
// Benchmarks of @forge/mcp against baselines measured in the same run: what MCP adds to a cached
// call (in-process SDK Client over InMemoryTransport, and over a real stdio child process), a
// cold sandboxed fib through MCP against raw bwrap + python, tools/list with 1,000 forged tools,
// server start to ready (a child process that creates the forge and serves stdio, until
// initialize answers), and the idle RSS of that server holding 1,000 tools. Prints figures and
// ratios; never asserts. Run `pnpm build` first (uses dist/ and @forge/sandbox's dist/).
//
//   pnpm bench     (BENCH_RUNS=200 for more samples)

import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createForge } from '@forge/runner';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { ListToolsResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { paired, rawPython, stats } from '../../../bench/baseline.mjs';
import { loadExample } from '../../../examples/index.mjs';
import { probe, resolveRuntimes } from '../../sandbox/dist/index.js';
import { createForgeMcpServer } from '../dist/index.js';

const here = dirname(fileURLToPath(import.meta.url));
const FIXTURE = join(here, '../test/fixtures/stdio-server.mjs');
const RUNS = Number(process.env.BENCH_RUNS ?? 100);
const TOOLS = 1000;

const host = await probe();
if (!host.ok) {
  console.error(`cannot benchmark: ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')}`);
  process.exit(2);
}
const python = (await resolveRuntimes()).get('python3');

const root = mkdtempSync(join(tmpdir(), 'forge-mcp-bench-'));
process.on('exit', () => rmSync(root, { recursive: true, force: true }));
/** A fresh FORGE home and project, breakers out of the way. */
function dirs(name) {
  const home = join(root, name, 'home');
  const project = join(root, name, 'project');
  mkdirSync(home, { recursive: true });
  mkdirSync(join(project, '.forge'), { recursive: true });
  writeFileSync(join(home, 'policy.json'), JSON.stringify({ breakers: { per_tool_rpm: 1e9, per_session_forge_count: 1e9 } }));
  return { home, project };
}

const ms = (x) => `${x.toFixed(3)} ms`;
const mark = (ok) => (ok ? ' ' : '!');

async function inMemoryClient(forge) {
  const server = createForgeMcpServer(forge);
  const [c, s] = InMemoryTransport.createLinkedPair();
  const client = new Client({ name: 'bench', version: '1' });
  await server.connect(s);
  await client.connect(c);
  return {
    client,
    close: async () => {
      await client.close();
      await server.close();
    },
  };
}

function stdioClient(d, env = {}) {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [FIXTURE],
    env: { PATH: process.env.PATH, FORGE_HOME: d.home, FORGE_PROJECT: d.project, FORGE_TIMING: '1', ...env },
    stderr: 'pipe',
  });
  const timing = new Promise((resolve) => {
    let err = '';
    transport.stderr?.on('data', (b) => {
      err += b;
      const m = /timing (\{.*\})\n/.exec(err);
      if (m) resolve(JSON.parse(m[1]));
    });
  });
  return { transport, timing, client: new Client({ name: 'bench', version: '1' }) };
}

const unwrap = (r) => {
  if (r.isError) throw new Error(`tool failed: ${r.content[0]?.text}`);
  return r;
};

console.log(
  `@forge/mcp benchmark — node ${process.version}, ${availableParallelism()} cores, bwrap ${host.bwrap.version}, ${RUNS} runs each`,
);
console.log('  (! marks a figure that misses its target on this machine)\n');

// ---------------------------------------------------------------- cached call: MCP vs in-process
const main = dirs('main');
const forge = await createForge({ ...main, env: {} });
const fib = loadExample('fib');
const coldFib = { ...fib, name: 'fib_cold', meta: { ...fib.meta, deterministic: false } };
for (const spec of [fib, coldFib]) {
  const r = await forge.forgeTool(spec);
  if (!r.ok) throw new Error(`${spec.name}: ${r.message}`);
}
const mem = await inMemoryClient(forge);
await forge.callTool('fib', { n: 30 }); // seed the cache
for (let i = 0; i < 50; i++) {
  await forge.callTool('fib', { n: 30 });
  unwrap(await mem.client.callTool({ name: 'fib', arguments: { n: 30 } }));
}
const hit = await paired(
  async () => unwrap(await mem.client.callTool({ name: 'fib', arguments: { n: 30 } })),
  async () => forge.callTool('fib', { n: 30 }),
  RUNS * 5,
);
const addedMem = hit.ours.p50 - hit.base.p50;
console.log(
  `${mark(addedMem <= 1)} cached call, MCP over InMemoryTransport  p50 ${ms(hit.ours.p50)}  p95 ${ms(hit.ours.p95)}   in-process callTool p50 ${ms(hit.base.p50)}  p95 ${ms(hit.base.p95)}`,
);
console.log(`${mark(addedMem <= 1)}   added p50 ${ms(addedMem)} (target ≤ 1 ms)`);

// The same over a real stdio child process serving the same dirs (same cache).
const child = stdioClient(main);
await child.client.connect(child.transport);
for (let i = 0; i < 50; i++) unwrap(await child.client.callTool({ name: 'fib', arguments: { n: 30 } }));
const hitStdio = await paired(
  async () => unwrap(await child.client.callTool({ name: 'fib', arguments: { n: 30 } })),
  async () => forge.callTool('fib', { n: 30 }),
  RUNS * 5,
);
const addedStdio = hitStdio.ours.p50 - hitStdio.base.p50;
console.log(
  `${mark(addedStdio <= 1)} cached call, MCP over stdio (child)     p50 ${ms(hitStdio.ours.p50)}  p95 ${ms(hitStdio.ours.p95)}   in-process callTool p50 ${ms(hitStdio.base.p50)}`,
);
console.log(`${mark(addedStdio <= 1)}   added p50 ${ms(addedStdio)} (target ≤ 1 ms)`);
await child.client.close();

// ---------------------------------------------------------------- cold fib: MCP vs raw bwrap
const script = join(root, 'fib.py');
writeFileSync(script, fib.impl);
const raw = (n) => rawPython(host, python, script, { n });
const cold = async (n) => unwrap(await mem.client.callTool({ name: 'fib_cold', arguments: { n } }));
for (let i = 0; i < 5; i++) {
  await raw(20);
  await cold(20);
}
// Three paths interleaved in blocks of 10 (MCP, in-process, raw), so all see the same machine state.
const coldRuns = Math.max(30, Math.round(RUNS / 2));
const series = { mcp: [], inproc: [], raw: [] };
const inprocCold = async (n) => {
  const e = await forge.callTool('fib_cold', { n });
  if (!e.ok) throw new Error(e.error.message);
};
const paths = [
  ['raw', raw],
  ['inproc', inprocCold],
  ['mcp', cold],
];
for (let i = 0; i < coldRuns; i += 10) {
  // Rotated each block, so no path always runs first.
  for (const [key, fn] of paths.map((_, j) => paths[(j + i / 10) % paths.length])) {
    for (let k = 0; k < 10; k++) {
      const t0 = performance.now();
      await fn(20 + ((i + k) % 50));
      series[key].push(performance.now() - t0);
    }
  }
}
const c = { ours: stats(series.mcp), base: stats(series.raw), inproc: stats(series.inproc) };
const ratio = c.ours.p50 / c.base.p50;
console.log(
  `${mark(ratio <= 1.15)} cold fib through MCP (InMemory)  p50 ${ms(c.ours.p50)}  p95 ${ms(c.ours.p95)}   raw bwrap + python p50 ${ms(c.base.p50)}  p95 ${ms(c.base.p95)}`,
);
console.log(`${mark(ratio <= 1.15)}   ratio ${ratio.toFixed(3)}× (target ≤ 1.15×)`);
console.log(
  `    in-process callTool p50 ${ms(c.inproc.p50)}: ${(c.inproc.p50 / c.base.p50).toFixed(3)}× raw (the runner's share); MCP adds ${ms(c.ours.p50 - c.inproc.p50)}`,
);
await mem.close();
await forge.close();

// ---------------------------------------------------------------- tools/list with 1,000 tools
const many = dirs('many');
const big = await createForge({ ...many, env: {} });
let t = performance.now();
for (let i = 0; i < TOOLS; i += 50) {
  await Promise.all(
    Array.from({ length: 50 }, (_, k) =>
      big.forgeTool({ ...fib, name: `tool_${String(i + k).padStart(4, '0')}`, description: `bench tool ${i + k}` }).then((r) => {
        if (!r.ok) throw new Error(r.message);
      }),
    ),
  );
}
console.log(`\n  (forged ${TOOLS} tools in ${((performance.now() - t) / 1000).toFixed(1)} s)`);
const bigMem = await inMemoryClient(big);
t = performance.now();
const firstList = await bigMem.client.listTools();
const firstMs = performance.now() - t;
if (firstList.tools.length !== TOOLS + 5) throw new Error(`expected ${TOOLS + 5} tools, got ${firstList.tools.length}`);
// tools/list as a request whose answer the client parses against the MCP schema...
const lists = [];
for (let i = 0; i < 50; i++) {
  t = performance.now();
  const r = await bigMem.client.request({ method: 'tools/list', params: {} }, ListToolsResultSchema);
  if (r.tools.length !== TOOLS + 5) throw new Error('short list');
  lists.push(performance.now() - t);
}
const ls = stats(lists);
console.log(
  `${mark(ls.p50 <= 20)} tools/list with ${TOOLS} forged tools (InMemory, parsed)  p50 ${ms(ls.p50)}  p95 ${ms(ls.p95)} (target ≤ 20 ms); the very first ${ms(firstMs)}`,
);
// ...and through the SDK Client's listTools(), which also compiles an Ajv validator for every outputSchema.
const sdkLists = [];
for (let i = 0; i < 5; i++) {
  t = performance.now();
  await bigMem.client.listTools();
  sdkLists.push(performance.now() - t);
}
const sl = stats(sdkLists);
console.log(`    SDK Client.listTools() with ${TOOLS} outputSchemas p50 ${ms(sl.p50)} (client-side validator compilation, not the server)`);
const bytes = JSON.stringify(firstList).length;
console.log(`    ${(bytes / 1024).toFixed(0)} KiB of tool definitions`);
await bigMem.close();
await big.close();

// ---------------------------------------------------------------- start to ready, RSS idle
async function startToReady(d) {
  const s = stdioClient(d);
  const t0 = performance.now();
  await s.client.connect(s.transport); // spawn → node start → imports → serveStdio → initialize answered (the Forge opens meanwhile)
  const took = performance.now() - t0;
  return { took, ...s };
}
const startEmpty = [];
const startMany = [];
const parts = [];
for (let i = 0; i < 8; i++) {
  const a = await startToReady(dirs(`start-${i}`));
  startEmpty.push(a.took);
  parts.push(await a.timing);
  await a.client.close();
  const b = await startToReady(many);
  startMany.push(b.took);
  await b.client.close();
}
const se = stats(startEmpty);
const sm = stats(startMany);
console.log(
  `\n${mark(se.p50 <= 300)} server start to ready (stdio child, empty project)       p50 ${ms(se.p50)}  p95 ${ms(se.p95)} (target ≤ 300 ms)`,
);
console.log(`${mark(sm.p50 <= 300)} server start to ready (stdio child, ${TOOLS} tools)          p50 ${ms(sm.p50)}  p95 ${ms(sm.p95)}`);
const part = (k) => ms(stats(parts.map((p) => p[k])).p50);
console.log(
  `    in the child (p50): node boot ${part('boot')}, imports ${part('imports')}, serveStdio ${part('serve')}; the Forge open ${part('open')} later`,
);
console.log('    (this package unbundled in a plain child; `forge serve`, which bundles it, is measured by apps/forge/bench)');

const idle = await startToReady(many);
await idle.client.listTools();
await new Promise((r) => setTimeout(r, 500));
const rss = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
const empty = await startToReady(dirs('rss-empty'));
await empty.client.listTools();
await new Promise((r) => setTimeout(r, 500));
console.log(
  `  RSS idle of the stdio server: ${rss(idle.transport.pid).toFixed(1)} MiB with ${TOOLS} tools (after a tools/list), ${rss(empty.transport.pid).toFixed(1)} MiB with none`,
);
await idle.client.close();
await empty.client.close();
