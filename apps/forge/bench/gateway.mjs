#!/usr/bin/env node
// The gateway through the whole engine (figures only, no asserts), after `pnpm build`:
//   node apps/forge/bench/gateway.mjs   (BENCH_CALLS=1000 BENCH_LISTS=100 change the counts;
//                                        BENCH_SHM_ONLY=1 runs only the tmpfs half)
// 1. A projected call: the same trivial upstream tool called directly with the SDK client, and as
//    forge.callTool('fx.hello') (resolve, gates, validation, breaker, the sandboxed upstream, the
//    manifest and the durable audit entry), and as MCP tools/call through forge's MCP server
//    (in-memory transport, the SDK client), in paired runs in this process: the figure is what
//    forge adds to calling the server yourself. Target: ≤ 1.5 ms added at the median.
// 2. tools/list through forge's MCP server over 10 upstream servers × 100 tools (each approved):
//    the first list (starts them all) and the cached one. Target: ≤ 30 ms.
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createGateway } from '@forge/gateway';
import { createForgeMcpServer } from '@forge/mcp';
import { createForge } from '@forge/runner';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';

const here = dirname(fileURLToPath(import.meta.url));
const GATEWAY_DIR = realpathSync(resolve(here, '../../../packages/gateway'));
const FIXTURE = join(GATEWAY_DIR, 'test', 'fixtures', 'server.mjs');
const STORE = realpathSync(resolve(here, '../../../node_modules/.pnpm'));
const CALLS = Number(process.env.BENCH_CALLS ?? 1000);
const LISTS = Number(process.env.BENCH_LISTS ?? 100);
const WARM = 100;

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const ms = (x) => `${x.toFixed(3)} ms`;
const entry = (env = {}) => ({
  command: 'node',
  args: [FIXTURE],
  env,
  binds: [
    { path: GATEWAY_DIR, mode: 'ro' },
    { path: STORE, mode: 'ro' },
  ],
});

/** A forge over a fresh home with these servers in its gateway.json, every tool approved, and an MCP client on it. */
async function engineWith(root, servers) {
  const home = join(root, 'home');
  const project = join(root, 'project');
  mkdirSync(join(project, '.forge'), { recursive: true });
  mkdirSync(home, { recursive: true, mode: 0o700 });
  writeFileSync(join(home, 'gateway.json'), JSON.stringify({ servers }));
  // The default rate breaker (60 calls a minute per tool) would stop a benchmark.
  writeFileSync(join(home, 'policy.json'), JSON.stringify({ breakers: { per_tool_rpm: 1_000_000 } }));
  const gateway = createGateway({ userFile: join(home, 'gateway.json'), gatewayDir: join(home, 'gateway'), bindRoots: [project] });
  const forge = await createForge({ home, project, env: {}, sources: [gateway] });
  for (const name of Object.keys(servers)) {
    const r = await gateway.approve(name, [], 'bench');
    if (!r.ok) throw new Error(`approve ${name}: ${r.message}`);
  }
  const server = createForgeMcpServer(forge);
  const [c, s] = InMemoryTransport.createLinkedPair();
  const client = new Client({ name: 'bench', version: '1' });
  await server.connect(s);
  await client.connect(c);
  return {
    forge,
    client,
    async close() {
      await client.close();
      await server.close();
      await forge.close();
    },
  };
}

async function callBench(root) {
  const e = await engineWith(root, { fx: entry() });
  const direct = new Client({ name: 'bench-direct', version: '1' });
  await direct.connect(new StdioClientTransport({ command: process.execPath, args: [FIXTURE], stderr: 'ignore' }));
  const d = [];
  const f = [];
  const m = [];
  for (let i = 0; i < CALLS + WARM; i++) {
    let t = performance.now();
    await direct.callTool({ name: 'hello', arguments: { name: 'x' } });
    const dt = performance.now() - t;
    t = performance.now();
    const r = await e.forge.callTool('fx.hello', { name: 'x' });
    const ft = performance.now() - t;
    if (!r.ok) throw new Error(`${r.error.kind}: ${r.error.message}`);
    t = performance.now();
    const viaMcp = await e.client.callTool({ name: 'fx__hello', arguments: { name: 'x' } });
    const mt = performance.now() - t;
    if (viaMcp.isError) throw new Error(JSON.stringify(viaMcp.content));
    if (i >= WARM) {
      d.push(dt);
      f.push(ft);
      m.push(mt);
    }
  }
  const addedF = f.map((x, i) => x - d[i]);
  const addedM = m.map((x, i) => x - d[i]);
  console.log(`a projected call of a trivial stdio tool, the upstream in the sandbox (${CALLS} paired runs after ${WARM} warm-up):`);
  console.log(`  direct SDK client          median ${ms(pct(d, 50))}  p90 ${ms(pct(d, 90))}`);
  console.log(`  forge.callTool             median ${ms(pct(f, 50))}  p90 ${ms(pct(f, 90))}`);
  console.log(`  MCP tools/call via forge   median ${ms(pct(m, 50))}  p90 ${ms(pct(m, 90))}`);
  console.log(
    `  added by forge (paired)    median ${ms(pct(addedF, 50))}  p90 ${ms(pct(addedF, 90))}  ratio ${(pct(f, 50) / pct(d, 50)).toFixed(2)}x  (target ≤ 1.5 ms)`,
  );
  console.log(
    `  added with MCP (paired)    median ${ms(pct(addedM, 50))}  p90 ${ms(pct(addedM, 90))}  ratio ${(pct(m, 50) / pct(d, 50)).toFixed(2)}x`,
  );
  await direct.close();
  await e.close();
}

async function listBench(root) {
  const servers = {};
  for (let i = 0; i < 10; i++) servers[`s${i}`] = entry({ FIXTURE_TOOLS: '100' });
  const e = await engineWith(root, servers);
  let t = performance.now();
  const first = await e.client.listTools();
  const firstMs = performance.now() - t;
  const times = [];
  for (let i = 0; i < LISTS; i++) {
    t = performance.now();
    await e.client.listTools();
    times.push(performance.now() - t);
  }
  console.log(`MCP tools/list through forge over 10 upstreams × 100 tools (${first.tools.length} tools listed, meta-tools included):`);
  console.log(
    `  first list ${ms(firstMs)}; then (${LISTS} runs) median ${ms(pct(times, 50))}  p90 ${ms(pct(times, 90))}  (target ≤ 30 ms)`,
  );
  await e.close();
}

// The audit entry of every call is durable before the call is answered (one fdatasync per batch),
// and the manifest is written beside it: on a disk that is most of what forge adds. The same run
// with forge's home on a tmpfs (where a sync costs nothing) shows what the pipeline itself costs.
const bases = process.env.BENCH_SHM_ONLY
  ? []
  : [{ label: `home on ${tmpdir()} (disk: every answer waits for its audit entry's fdatasync)`, dir: tmpdir() }];
if (existsSync('/dev/shm'))
  bases.push({ label: 'home on /dev/shm (tmpfs: the pipeline without the cost of a disk sync)', dir: '/dev/shm' });
for (const base of bases) {
  const root = mkdtempSync(join(base.dir, 'forge-gateway-bench-'));
  try {
    console.log(`\n== ${base.label}`);
    await callBench(mkdtempSync(join(root, 'call-')));
    if (base === bases[0]) await listBench(mkdtempSync(join(root, 'list-')));
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}
