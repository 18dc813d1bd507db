#!/usr/bin/env node
// Front-ends and workers, measured end to end with real sandboxes: calls/s through a front-end
// whose forged tools run on 1, 2 and 4 `forge worker` processes, over the file queue of one host
// and over PostgreSQL (a throwaway server started here), cached and uncached; the baseline is the
// same calls run in the front-end's own process (no queue), in the same run. Also the latency a
// call gains by going through a queue and a worker (p50/p95 of one call at a time, against the
// in-process call). Prints figures and ratios; never asserts. Run `pnpm build` first.
//
//   pnpm --filter forge bench:scale      (BENCH_CALLS=200 calls per figure, BENCH_CONCURRENCY=8)

import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openPostgresStores } from '@forge/postgres';
import { openFileQueue } from '@forge/queue';
import { createForge, META_TOOLS } from '@forge/runner';
import { probe } from '@forge/sandbox';
import { loadStartPostgres } from '../../../scripts/with-postgres.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const CLI = join(here, '../dist/cli.js');
const CALLS = Number(process.env.BENCH_CALLS ?? 200);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const LATENCY_RUNS = Number(process.env.BENCH_LATENCY_RUNS ?? 40);

const host = await probe();
if (!host.ok) {
  console.error(`cannot benchmark: ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')}`);
  process.exit(2);
}

const root = mkdtempSync(join(tmpdir(), 'forge-scale-bench-'));
const children = new Set();
const cleanup = () => {
  for (const c of children) c.kill('SIGKILL');
  rmSync(root, { recursive: true, force: true });
};
process.on('exit', cleanup);
for (const s of ['SIGINT', 'SIGTERM']) process.on(s, () => process.exit(130));

const echo = {
  name: 'bench.echo',
  description: 'answers with its input',
  runtime: 'python3',
  input_schema: { type: 'object' },
  impl: 'import json, sys\nprint(json.dumps({"ok": True, "data": json.load(sys.stdin)}))\n',
};
const det = { ...echo, name: 'bench.det', meta: { deterministic: true } };
const policy = JSON.stringify({ breakers: { per_tool_rpm: 1e9, per_session_forge_count: 1e9 } });

/** A host's home and project (each worker gets its own, as on another machine). */
function place(name) {
  const home = join(root, name, 'home');
  const project = join(root, name, 'project');
  mkdirSync(home, { recursive: true, mode: 0o700 });
  mkdirSync(join(project, '.forge'), { recursive: true, mode: 0o700 });
  writeFileSync(join(home, 'policy.json'), policy);
  return { home, project };
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

/** Calls/s of `n` calls, `CONCURRENCY` at a time; `input(i)` gives each call's input. */
async function throughput(forge, name, n, input) {
  let next = 0;
  const t0 = performance.now();
  const lane = async () => {
    while (next < n) {
      const i = next++;
      const env = await forge.callTool(name, input(i));
      if (!env.ok) throw new Error(`call ${i} of ${name} failed: ${JSON.stringify(env.error)}`);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, lane));
  return n / ((performance.now() - t0) / 1000);
}

/** One call at a time: p50/p95 of the latency (ms). */
async function latency(forge, name) {
  const ms = [];
  for (let i = 0; i < LATENCY_RUNS; i++) {
    const t = performance.now();
    const env = await forge.callTool(name, { i, at: Date.now() });
    if (!env.ok) throw new Error(JSON.stringify(env.error));
    ms.push(performance.now() - t);
  }
  return { p50: pct(ms, 50), p95: pct(ms, 95) };
}

/** `forge worker` processes on hosts of their own; resolves once each says it is working. */
async function startWorkers(n, env, tag) {
  const mine = [];
  const ready = [];
  for (let i = 0; i < n; i++) {
    const where = env.FORGE_STORE ? place(`${tag}-w${i}`) : undefined;
    const child = spawn(process.execPath, [CLI, 'worker', '--name', `${tag}-w${i}`], {
      cwd: where ? where.project : env.PROJECT,
      env: { ...env, FORGE_HOME: where ? where.home : env.FORGE_HOME },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    children.add(child);
    mine.push(child);
    let err = '';
    ready.push(
      new Promise((resolve, reject) => {
        child.stderr.on('data', (d) => {
          err += d;
          if (err.includes(': worker on ')) resolve();
        });
        child.once('exit', (code) => reject(new Error(`worker ${i} exited (${code}): ${err}`)));
      }),
    );
  }
  await Promise.all(ready);
  return async () => {
    for (const c of mine) {
      c.removeAllListeners('exit');
      const gone = new Promise((r) => c.once('exit', r));
      c.kill('SIGTERM');
      await gone;
      children.delete(c);
    }
  };
}

/** Every figure for one kind of store: the front-end (`open`) and its workers (`env`). */
async function measure(label, open, env, baseline) {
  const rows = [];
  for (const n of [1, 2, 4]) {
    const { forge, close } = await open();
    const stop = await startWorkers(n, env, `${label}-${n}`);
    try {
      // Warm: the runtimes resolved and the tools seen by every worker.
      await throughput(forge, 'bench.echo', 2 * n, (i) => ({ warm: i }));
      const uncached = await throughput(forge, 'bench.echo', CALLS, (i) => ({ i, n }));
      // Cached: the four inputs seeded first, so every measured call is a hit (none reaches a worker).
      await throughput(forge, 'bench.det', 4, (i) => ({ k: i % 4 }));
      const cached = await throughput(forge, 'bench.det', CALLS, (i) => ({ k: i % 4 }));
      const lat = n === 1 ? await latency(forge, 'bench.echo') : undefined;
      rows.push({ workers: n, uncached, cached, lat });
    } finally {
      await stop();
      await close();
    }
  }
  console.log(`\n${label}: calls/s, ${CONCURRENCY} callers at once, ${CALLS} calls per figure`);
  for (const r of rows)
    console.log(
      `  ${r.workers} worker(s): uncached ${r.uncached.toFixed(1)}/s (${(r.uncached / baseline.uncached).toFixed(2)}x in-process), cached ${r.cached.toFixed(0)}/s (${(r.cached / baseline.cached).toFixed(2)}x)`,
    );
  const l = rows[0].lat;
  console.log(
    `  one call at a time through the queue and a worker: p50 ${l.p50.toFixed(1)} ms, p95 ${l.p95.toFixed(1)} ms; added over in-process p50 ${(l.p50 - baseline.lat.p50).toFixed(1)} ms (${(l.p50 / baseline.lat.p50).toFixed(2)}x)`,
  );
}

// Baseline: the same calls in one process, no queue.
const local = place('local');
const baseline = await (async () => {
  const forge = await createForge({ env: {}, ...local });
  try {
    for (const t of [echo, det]) {
      const r = await forge.forgeTool(t);
      if (!r.ok) throw new Error(r.message);
    }
    await throughput(forge, 'bench.echo', 8, (i) => ({ warm: i }));
    return {
      uncached: await throughput(forge, 'bench.echo', CALLS, (i) => ({ i })),
      cached: await throughput(forge, 'bench.det', 4, (i) => ({ k: i % 4 })).then(() =>
        throughput(forge, 'bench.det', CALLS, (i) => ({ k: i % 4 })),
      ),
      lat: await latency(forge, 'bench.echo'),
    };
  } finally {
    await forge.close();
  }
})();
console.log(
  `baseline (in-process, no queue): uncached ${baseline.uncached.toFixed(1)} calls/s, cached ${baseline.cached.toFixed(0)} calls/s`,
);
console.log(`  one call at a time: p50 ${baseline.lat.p50.toFixed(1)} ms, p95 ${baseline.lat.p95.toFixed(1)} ms`);

// Files: one host, the project's queue; workers share the home and project.
{
  const one = place('files');
  const env = { ...process.env, FORGE_HOME: one.home, PROJECT: one.project };
  delete env.FORGE_STORE;
  await measure(
    'files (one host, <project>/.forge/queue)',
    async () => {
      const queue = await openFileQueue(join(one.project, '.forge', 'queue'));
      const forge = await createForge({ env: {}, ...one, dispatch: { queue } });
      for (const t of [echo, det]) await forge.forgeTool({ ...t }, { overwrite: true });
      return {
        forge,
        close: async () => {
          await forge.close();
          await queue.close();
        },
      };
    },
    env,
    baseline,
  );
}

// PostgreSQL: every worker on a host of its own.
{
  const server = await (await loadStartPostgres())();
  try {
    const url = await server.database();
    const fe = place('pg-front');
    await measure(
      'postgres (workers on hosts of their own)',
      async () => {
        const stores = await openPostgresStores(url, { builtins: META_TOOLS });
        const forge = await createForge({
          env: {},
          ...fe,
          audit: stores.audit,
          toolStores: (scope, ids) => stores.toolStore(scope, ids),
          dispatch: { queue: stores.queue },
        });
        for (const t of [echo, det]) await forge.forgeTool({ ...t }, { overwrite: true });
        return {
          forge,
          close: async () => {
            await forge.close();
            await stores.close();
          },
        };
      },
      { ...process.env, FORGE_STORE: url },
      baseline,
    );
  } finally {
    await server.stop();
  }
}
