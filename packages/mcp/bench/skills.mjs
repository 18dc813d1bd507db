#!/usr/bin/env node
// MCP Skills (SEP-2640): how long a client waits for forge's skills, against tools/list of the
// same tools on the same server and client, measured in the same run (paired, alternating):
//   - skills/list with 1,000 forged tools in 20 namespaces (21 skills, each with its digests);
//   - skills/get of one namespace (50 tools) and resources/read of its SKILL.md;
//   - the first skills/list after a tool changed (its namespace's skill built again).
// In-memory transport and the SDK v1 client, so the figures are the server's work. Prints
// figures and ratios; never asserts. Needs `pnpm build` first.
//
//   node packages/mcp/bench/skills.mjs     (BENCH_RUNS=200 for more samples; default 100)

import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { createForge } from '@forge/runner';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { ResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { paired } from '../../../bench/baseline.mjs';
import { loadExample } from '../../../examples/index.mjs';
import { createForgeMcpServer } from '../dist/index.js';
import { createScope } from './scope.mjs';

const RUNS = Number(process.env.BENCH_RUNS ?? 100);
const TOOLS = 1000;
const NAMESPACES = 20;
const scope = createScope('forge-skills-bench-');
const ms = (x) => `${x.toFixed(2)} ms`;
/** Any result, kept whole (the SDK's base result schema lets other fields through). */
const any = ResultSchema;

try {
  const home = join(scope.root, 'home');
  const project = join(scope.root, 'project');
  mkdirSync(home, { recursive: true });
  mkdirSync(join(project, '.forge'), { recursive: true });
  writeFileSync(join(home, 'policy.json'), JSON.stringify({ breakers: { per_tool_rpm: 1e9, per_session_forge_count: 1e9 } }));
  const forge = await createForge({ home, project, env: {} });
  scope.defer(() => forge.close({ graceMs: 1000 }));
  const fib = loadExample('fib');
  const name = (i) => `ns${String(i % NAMESPACES).padStart(2, '0')}.tool_${String(i).padStart(4, '0')}`;
  for (let i = 0; i < TOOLS; i += 100) {
    await Promise.all(
      Array.from({ length: 100 }, (_, k) =>
        forge.forgeTool({ ...fib, name: name(i + k), description: `bench tool ${i + k}` }).then((r) => {
          if (!r.ok) throw new Error(r.message);
        }),
      ),
    );
  }

  const server = createForgeMcpServer(forge);
  const [c, s] = InMemoryTransport.createLinkedPair();
  const client = new Client({ name: 'bench', version: '1' });
  await server.connect(s);
  await client.connect(c);
  scope.defer(() => client.close());
  scope.defer(() => server.close());

  const tools = () => client.request({ method: 'tools/list', params: {} }, any);
  const list = async () => {
    const r = await client.request({ method: 'skills/list', params: {} }, any);
    if (r.skills.length !== NAMESPACES + 1) throw new Error(`expected ${NAMESPACES + 1} skills, got ${r.skills.length}`);
    return r;
  };
  const uri = 'skill://forge/tools/ns07/SKILL.md';
  const get = () => client.request({ method: 'skills/get', params: { uri } }, any);
  const read = () => client.request({ method: 'resources/read', params: { uri } }, any);
  const bytes = Buffer.byteLength(JSON.stringify(await list()));
  await tools();

  const listed = await paired(list, tools, RUNS);
  const got = await paired(get, tools, RUNS);
  const readIt = await paired(read, tools, RUNS);
  // A tool of ns07 forged anew before each pair: the listing and ns07's skill are built again.
  let n = 0;
  const change = () =>
    forge.forgeTool({ ...fib, name: 'ns07.tool_0007', description: `bench tool 7, edition ${++n}` }, { overwrite: true }).then((r) => {
      if (!r.ok) throw new Error(r.message);
    });
  const changed = await paired(list, tools, Math.min(RUNS, 50), { beforeEach: change });

  console.log(
    `@forge/mcp skills benchmark — node ${process.version}, ${availableParallelism()} cores (load ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}), BENCH_RUNS=${RUNS}; ${TOOLS} tools in ${NAMESPACES} namespaces, skills/list answer ${(bytes / 1024).toFixed(0)} KiB\n`,
  );
  const row = (label, r) =>
    console.log(
      `  ${label.padEnd(44)} p50 ${ms(r.ours.p50)}  p95 ${ms(r.ours.p95)}   tools/list p50 ${ms(r.base.p50)}   ratio ${(r.ours.p50 / r.base.p50).toFixed(2)}×`,
    );
  row(`skills/list (${NAMESPACES + 1} skills)`, listed);
  row('skills/get (one namespace, 50 tools)', got);
  row('resources/read of its SKILL.md', readIt);
  row('skills/list after a tool changed', changed);
  console.log('\n  target: skills/list p50 no more than tools/list of the same tools (ratio ≤ 1×)');
} finally {
  await scope.cleanup();
}
