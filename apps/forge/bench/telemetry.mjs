#!/usr/bin/env node
// What OpenTelemetry costs a call: a cached call of fib through `forge.callTool` in-process
//   - off: nothing registered with the OpenTelemetry API (forge's default: the API is not loaded);
//   - on: a tracer provider recording every span (the SDK's in-memory exporter, so the figure is
//     the spans' own cost, not a network's), as `forge` registers when OTEL_* asks for it;
//   - unsampled: the provider registered, sampling nothing (a trace a collector does not want).
// The three are measured in blocks, in that order, then off is measured again with the API
// loaded and the provider gone: drift shows as the two off figures differing. Prints figures and
// ratios; never asserts. Needs `pnpm build` first.
//
//   node apps/forge/bench/telemetry.mjs     (BENCH_RUNS=2000 for more samples; default 1000)

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createForge } from '@forge/runner';
import { stats } from '../../../bench/baseline.mjs';
import { loadExample } from '../../../examples/index.mjs';

const RUNS = Number(process.env.BENCH_RUNS ?? 1000);
const root = mkdtempSync(join(tmpdir(), 'forge-otel-bench-'));
const us = (x) => `${(x * 1000).toFixed(1)} µs`;
const require = createRequire(import.meta.url);

try {
  const home = join(root, 'home');
  const project = join(root, 'project');
  mkdirSync(home, { recursive: true });
  mkdirSync(join(project, '.forge'), { recursive: true });
  writeFileSync(join(home, 'policy.json'), JSON.stringify({ breakers: { per_tool_rpm: 1e9 } }));
  const forge = await createForge({ home, project, env: {} });
  try {
    const r = await forge.forgeTool(loadExample('fib'));
    if (!r.ok) throw new Error(r.message);
    const call = async () => {
      const e = await forge.callTool('fib', { n: 30 });
      if (!e.ok || e.meta.cache !== 'hit') throw new Error(`fib: ${JSON.stringify(e)}`);
    };
    // The first call runs (and seeds the cache); the rest hit it.
    await forge.callTool('fib', { n: 30 });
    const block = async () => {
      for (let i = 0; i < 50; i++) await call();
      const xs = [];
      for (let i = 0; i < RUNS; i++) {
        const t = performance.now();
        await call();
        xs.push(performance.now() - t);
      }
      return stats(xs);
    };

    const apiLoaded = () => Object.keys(require.cache).some((k) => k.includes('@opentelemetry/api'));
    const off = await block();
    const loadedWhenOff = apiLoaded();

    const { NodeTracerProvider, SimpleSpanProcessor, InMemorySpanExporter, AlwaysOffSampler } = await import(
      '@opentelemetry/sdk-trace-node'
    );
    const api = await import('@opentelemetry/api');
    const exporter = new InMemorySpanExporter();
    const recording = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    recording.register();
    const on = await block();
    const spans = exporter.getFinishedSpans().length;
    api.trace.disable();
    api.context.disable();
    api.propagation.disable();

    new NodeTracerProvider({ sampler: new AlwaysOffSampler() }).register();
    const unsampled = await block();
    api.trace.disable();
    api.context.disable();
    api.propagation.disable();
    const offAgain = await block();

    console.log(
      `forge OpenTelemetry benchmark — node ${process.version}, ${availableParallelism()} cores (load ${loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}), BENCH_RUNS=${RUNS}; a cached call of fib through forge.callTool, in-process\n`,
    );
    const row = (label, s) =>
      console.log(`  ${label.padEnd(52)} p50 ${us(s.p50)}  p95 ${us(s.p95)}   ${(s.p50 / off.p50).toFixed(3)}× off`);
    row(`off (API ${loadedWhenOff ? 'LOADED' : 'not loaded'})`, off);
    row(`on: every span recorded (${spans} spans kept)`, on);
    row('on, sampling nothing', unsampled);
    row('off again (API loaded, nothing registered)', offAgain);
    console.log('\n  target: off costs nothing measurable (the API is not loaded; the two off figures agree within drift)');
  } finally {
    await forge.close({ graceMs: 1000 });
  }
} finally {
  rmSync(root, { recursive: true, force: true });
}
