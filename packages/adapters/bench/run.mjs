// Benchmark of the adapters (pnpm --filter @forge/adapters bench, after building):
//  1. the added latency of a call through each framework's own tool invocation (AI SDK
//     `execute` + `toModelOutput`, OpenAI Agents `invoke`, LangChain `invoke` with a tool call,
//     Mastra `execute`), against `forge.callTool` of the same tool and input in the same process.
//     The tool is deterministic and its answer cached, so the sandbox does not drown the figure:
//     what is left is forge's call pipeline (gates, validation, cache, audit entry) plus the adapter.
//  2. `forge.agentTools()` with N forged tools (the listing every adapter does), against
//     `forge.listTools()` of the same tools.
// Prints p50/p99 and each ratio against its baseline. Everything is removed afterwards.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createForge } from '@forge/runner';
import { RunContext } from '@openai/agents';
import { aiTools } from '../dist/ai.js';
import { langchainTools } from '../dist/langchain.js';
import { mastraTools } from '../dist/mastra.js';
import { openaiAgentsTools } from '../dist/openai-agents.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 300);
const TOOLS = Number(process.env.BENCH_TOOLS ?? 50);
const root = mkdtempSync(join(tmpdir(), 'forge-adapters-bench-'));
process.on('exit', () => rmSync(root, { recursive: true, force: true }));
const project = join(root, 'project');
mkdirSync(join(project, '.forge'), { recursive: true });
const home = join(root, 'home');
mkdirSync(home, { mode: 0o700 });
// The per-tool rate breaker would stop a benchmark that calls one tool thousands of times a minute.
writeFileSync(join(home, 'policy.json'), JSON.stringify({ breakers: { per_tool_rpm: 1_000_000 } }));
const forge = await createForge({ home, project, env: {} });
const { loadExample } = await import(pathToFileURL(resolve(import.meta.dirname, '../../../examples/index.mjs')).href);
const fib = { ...loadExample('fib'), name: 'math.fib' };
const forged = await forge.forgeTool(fib);
if (!forged.ok) throw new Error(`forging fib failed: ${forged.kind}: ${forged.message}`);
const input = { n: 30 };
const first = await forge.callTool('math.fib', input);
if (!first.ok) throw new Error(`fib failed: ${first.error.message} (is bubblewrap installed? forge doctor says)`);

const stats = (ms) => {
  const s = [...ms].sort((a, b) => a - b);
  return { p50: s[Math.floor(s.length / 2)], p99: s[Math.min(s.length - 1, Math.floor(s.length * 0.99))] };
};
async function time(fn) {
  for (let i = 0; i < 20; i++) await fn(); // warm up
  const ms = [];
  for (let i = 0; i < RUNS; i++) {
    const t = performance.now();
    await fn();
    ms.push(performance.now() - t);
  }
  return stats(ms);
}
const f = (x) => x.toFixed(3);

const ai = (await aiTools(forge)).math__fib;
const oa = (await openaiAgentsTools(forge)).find((t) => t.name === 'math__fib');
const lc = (await langchainTools(forge)).find((t) => t.name === 'math__fib');
const ms = (await mastraTools(forge)).math__fib;
const runContext = new RunContext();
const cases = {
  'forge.callTool (baseline)': () => forge.callTool('math.fib', input),
  'AI SDK execute + toModelOutput': async () =>
    ai.toModelOutput({ toolCallId: 'c', input, output: await ai.execute(input, { toolCallId: 'c', messages: [] }) }),
  'OpenAI Agents invoke': () =>
    oa.invoke(runContext, JSON.stringify(input), {
      toolCall: { type: 'function_call', callId: 'c', name: 'math__fib', arguments: JSON.stringify(input) },
    }),
  'LangChain invoke (tool call)': () => lc.invoke({ type: 'tool_call', id: 'c', name: 'math__fib', args: input }),
  'Mastra execute': () => ms.execute(input, {}),
};
console.log(`adapters: a cached call of math.fib ${JSON.stringify(input)}, ${RUNS} runs each (ms)`);
let base;
for (const [name, fn] of Object.entries(cases)) {
  const r = await time(fn);
  base ??= r;
  console.log(
    `  ${name.padEnd(34)} p50 ${f(r.p50)}  p99 ${f(r.p99)}  added p50 ${f(r.p50 - base.p50)}  ratio ${(r.p50 / base.p50).toFixed(2)}×`,
  );
}

for (let i = 0; i < TOOLS - 1; i++) {
  const r = await forge.forgeTool({ ...fib, name: `bench.t${i}` });
  if (!r.ok) throw new Error(`forging bench.t${i} failed: ${r.kind}: ${r.message}`);
}
const listed = await time(() => forge.listTools());
const agent = await time(() => forge.agentTools());
console.log(
  `listing ${TOOLS} tools (ms): listTools p50 ${f(listed.p50)}; agentTools p50 ${f(agent.p50)} p99 ${f(agent.p99)}, ratio ${(agent.p50 / listed.p50).toFixed(2)}×`,
);
await forge.close();
