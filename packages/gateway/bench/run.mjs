#!/usr/bin/env node
// Gateway benchmarks (figures only, no asserts). Run after `pnpm --filter @forge/gateway build`:
//   pnpm --filter @forge/gateway bench            (BENCH_CALLS=2000 BENCH_LISTS=200 to change the counts)
// 1. The latency a call through the gateway's execute adds over calling the same upstream server
//    program directly with the SDK client, in this process, in paired runs (direct, gateway, …).
// 2. tools/list over 10 upstreams × 100 tools (cached listing, after the first).
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { createGateway } from '../dist/index.js';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const PACKAGE_DIR = realpathSync(join(here, '..'));
const FIXTURE = join(PACKAGE_DIR, 'test', 'fixtures', 'server.mjs');
const sdk = realpathSync(dirname(require.resolve('@modelcontextprotocol/sdk/package.json')));
const PNPM_STORE = sdk.slice(0, sdk.indexOf('/.pnpm/') + '/.pnpm'.length);
const CALLS = Number(process.env.BENCH_CALLS ?? 2000);
const LISTS = Number(process.env.BENCH_LISTS ?? 200);
const ctx = { persona: 'bench', session: 'bench' };

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const ms = (x) => `${x.toFixed(3)} ms`;

function memoryHost(home) {
  const entries = [];
  return {
    home,
    project: home,
    async record(type, data) {
      entries.push({ type, data });
      return undefined;
    },
    bindRoots: () => [],
    async lastAudited(type) {
      for (let i = entries.length - 1; i >= 0; i--) if (entries[i].type === type) return entries[i].data;
      return undefined;
    },
  };
}

const entry = (env = {}, extra = {}) => ({
  command: 'node',
  args: [FIXTURE],
  env,
  binds: [
    { path: PACKAGE_DIR, mode: 'ro' },
    { path: PNPM_STORE, mode: 'ro' },
  ],
  ...extra,
});

async function gatewayOver(dir, servers) {
  const userFile = join(dir, 'gateway.json');
  writeFileSync(userFile, JSON.stringify({ servers }));
  const gateway = createGateway({ userFile, gatewayDir: join(dir, 'state') });
  await gateway.attach(memoryHost(join(dir, 'home')));
  for (const name of Object.keys(servers)) {
    const r = await gateway.approve(name, [], 'bench');
    if (!r.ok) throw new Error(`approve ${name}: ${r.message}`);
  }
  return gateway;
}

async function callBench(dir, label, servers) {
  const gateway = await gatewayOver(dir, servers);
  const tool = (await gateway.list(ctx)).find((t) => t.name === 'fx.hello');
  const direct = new Client({ name: 'bench-direct', version: '1' });
  await direct.connect(new StdioClientTransport({ command: process.execPath, args: [FIXTURE], stderr: 'ignore' }));
  const job = () => ({
    ...ctx,
    tool,
    input: { name: 'x' },
    runId: 'r',
    secrets: new Map(),
    signal: new AbortController().signal,
    timeoutMs: 30_000,
  });
  const d = [];
  const g = [];
  for (let i = 0; i < CALLS + 200; i++) {
    let t = performance.now();
    await direct.callTool({ name: 'hello', arguments: { name: 'x' } });
    const dt = performance.now() - t;
    t = performance.now();
    const r = await gateway.execute(job());
    const gt = performance.now() - t;
    if (!r.ok) throw new Error(r.message);
    if (i >= 200) {
      d.push(dt);
      g.push(gt);
    }
  }
  const added = g.map((x, i) => x - d[i]);
  console.log(`call (${label}, ${CALLS} paired runs after 200 warm-up):`);
  console.log(`  direct SDK client   median ${ms(pct(d, 50))}  p90 ${ms(pct(d, 90))}`);
  console.log(`  through the gateway median ${ms(pct(g, 50))}  p90 ${ms(pct(g, 90))}`);
  console.log(
    `  added (paired)      median ${ms(pct(added, 50))}  p90 ${ms(pct(added, 90))}  ratio ${(pct(g, 50) / pct(d, 50)).toFixed(2)}x`,
  );
  await direct.close();
  await gateway.close();
}

async function listBench(dir) {
  const servers = {};
  for (let i = 0; i < 10; i++) servers[`s${i}`] = entry({ FIXTURE_TOOLS: '100' });
  let t = performance.now();
  const gateway = await gatewayOver(dir, servers);
  const startMs = performance.now() - t;
  t = performance.now();
  const first = await gateway.list(ctx);
  const firstMs = performance.now() - t;
  const times = [];
  for (let i = 0; i < LISTS; i++) {
    t = performance.now();
    await gateway.list(ctx);
    times.push(performance.now() - t);
  }
  console.log(`tools/list over 10 upstreams × 100 tools (+ the fixture's own: ${first.length} listed in all):`);
  console.log(`  start + approve all ${ms(startMs)}; first list ${ms(firstMs)}`);
  console.log(`  cached list (${LISTS} runs) median ${ms(pct(times, 50))}  p90 ${ms(pct(times, 90))}  (target ≤ 30 ms)`);
  await gateway.close();
}

const root = mkdtempSync(join(tmpdir(), 'forge-gw-bench-'));
try {
  const mk = (n) => {
    const d = join(root, n);
    return mkdtempSync(`${d}-`);
  };
  await callBench(mk('sandboxed'), 'stdio, the upstream in the sandbox', { fx: entry() });
  await callBench(mk('host'), 'stdio, the upstream unsandboxed', { fx: entry({}, { unsandboxed: true, binds: [] }) });
  await listBench(mk('list'));
} finally {
  rmSync(root, { recursive: true, force: true });
}
