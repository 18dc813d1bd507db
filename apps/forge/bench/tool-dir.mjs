#!/usr/bin/env node
// Tool directories (forge tools export), measured with the built CLI in a scratch home:
//   - `DIR/fib_run --n N` as a whole process against `forge tools call fib_run '{"n":N}'` in the
//     same run, alternating (both a sandboxed Python run without the cache; the baseline is the
//     command a user would otherwise type);
//   - `forge tools export DIR` of 1,000 tools: the first export (all written) and the next
//     (nothing changed), each against `forge tools list` of the same tools in the same run;
//   - with `forge tools export DIR --watch` running, the time from a forge (by another process)
//     answering to its control directory being complete.
// Prints figures and ratios; never asserts. Run `pnpm build` first.
//
//   node apps/forge/bench/tool-dir.mjs     (BENCH_RUNS=30 for more samples)

import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createForge } from '@forge/runner';
import { stats } from '../../../bench/baseline.mjs';
import { fibScratch } from './scratch.mjs';

const run = promisify(execFile);
const CLI = join(dirname(fileURLToPath(import.meta.url)), '../dist/cli.js');
const RUNS = Number(process.env.BENCH_RUNS ?? 15);
const TOOLS = 1000;

const { root, project, env } = await fibScratch(CLI, 'forge-tool-dir-bench-');
const dir = join(root, 'tools');
const ms = (x) => `${x.toFixed(1)} ms`;
const wall = async (file, args, options = {}) => {
  const t = performance.now();
  await run(file, args, { cwd: project, env, ...options });
  return performance.now() - t;
};

console.log(`forge tool directory benchmark — node ${process.version}, ${availableParallelism()} cores, ${RUNS} runs each\n`);

// 1. A call through the directory against the same call by name.
await wall(process.execPath, [CLI, 'tools', 'export', dir]);
await wall(join(dir, 'fib_run'), ['--n', '20']);
await wall(process.execPath, [CLI, 'tools', 'call', 'fib_run', '{"n":20}']);
const viaDir = [];
const byName = [];
for (let i = 0; i < RUNS; i++) {
  const n = 20 + (i % 50);
  viaDir.push(await wall(join(dir, 'fib_run'), ['--n', String(n)], { cwd: root }));
  byName.push(await wall(process.execPath, [CLI, 'tools', 'call', 'fib_run', `{"n":${n}}`]));
}
const d = stats(viaDir);
const c = stats(byName);
console.log(`  forge tools call fib_run        p50 ${ms(c.p50)}  p95 ${ms(c.p95)}`);
console.log(`  DIR/fib_run --n N               p50 ${ms(d.p50)}  p95 ${ms(d.p95)}  (${(d.p50 / c.p50).toFixed(2)}× tools call)`);

// 2. 1,000 tools, forged in this process (forge tools forge takes one per run).
const f = await createForge({ home: env.FORGE_HOME, project, env, prebuild: false });
for (let i = 0; i < TOOLS; i++) {
  const r = await f.forgeTool({
    name: `many.t${i}`,
    description: `Echo ${i}.`,
    runtime: 'bash',
    input_schema: { type: 'object', properties: { n: { type: 'integer' } } },
    impl: `echo '{"ok":true,"data":${i}}'`,
  });
  if (!r.ok) throw new Error(r.message);
}
await f.close();
const many = join(root, 'many');
const first = await wall(process.execPath, [CLI, 'tools', 'export', many]);
const again = [];
const list = [];
for (let i = 0; i < Math.max(3, Math.floor(RUNS / 3)); i++) {
  again.push(await wall(process.execPath, [CLI, 'tools', 'export', many]));
  list.push(await wall(process.execPath, [CLI, 'tools', 'list']));
}
const a = stats(again);
const l = stats(list);
console.log(`\n  forge tools list (${TOOLS + 1} tools)     p50 ${ms(l.p50)}`);
console.log(`  export, first (all written)     ${ms(first)}  (${(first / l.p50).toFixed(2)}× tools list)`);
console.log(`  export, again (none changed)    p50 ${ms(a.p50)}  (${(a.p50 / l.p50).toFixed(2)}× tools list)`);

// 3. A forge by another process, until its control directory is complete in a watched directory.
const watched = join(root, 'watched');
const watch = spawn(process.execPath, [CLI, 'tools', 'export', watched, '--watch'], {
  cwd: project,
  env,
  stdio: ['ignore', 'ignore', 'pipe'],
});
let said = '';
watch.stderr.on('data', (b) => (said += b));
while (!said.includes('watching')) await new Promise((r) => setTimeout(r, 20)); // Lets time pass: polling the watch's start.
const specs = join(root, 'specs');
mkdirSync(specs);
const shows = [];
for (let i = 0; i < Math.max(3, Math.floor(RUNS / 3)); i++) {
  const name = `shown_${i}`;
  const spec = join(specs, `${name}.json`);
  writeFileSync(
    spec,
    JSON.stringify({ name, description: 'x', runtime: 'bash', input_schema: { type: 'object' }, impl: `echo '{"ok":true}'` }),
  );
  await run(process.execPath, [CLI, 'tools', 'forge', spec], { cwd: project, env });
  const answered = performance.now();
  while (!existsSync(join(watched, `${name}.d`, 'status'))) await new Promise((r) => setTimeout(r, 2)); // Lets time pass: polling the directory.
  shows.push(performance.now() - answered);
}
watch.kill('SIGTERM');
await new Promise((r) => watch.on('exit', r));
const s = stats(shows);
console.log(
  `\n  a forge shows in a watched dir  p50 ${ms(s.p50)}  max ${ms(Math.max(...shows))}  (target ≤ 1000 ms; ${TOOLS + 1} tools there)`,
);
