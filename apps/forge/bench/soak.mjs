#!/usr/bin/env node
// Soak: 5,000 mixed calls through one `forge serve` over stdio, printing the server's RSS and open
// descriptors at intervals, so a leak shows as a number rather than as a crash days later. The mix:
// cache hits, cold sandboxed runs, forge_list, unknown tools, validation failures and tool
// failures. The baseline is the server itself after the first interval (warm caches, sandboxes
// built ahead); the last line prints the growth against it. Prints figures; never asserts.
// Run `pnpm build` first.
//
//   node bench/soak.mjs      (SOAK_CALLS=20000 for a longer run)

import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { probe } from '@forge/sandbox';
import { loadExample } from '../../../examples/index.mjs';
import { serveChild } from './serve.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const CLI = join(here, '../dist/cli.js');
const CALLS = Number(process.env.SOAK_CALLS ?? 5000);
const EVERY = Math.max(1, Math.floor(CALLS / 10));

const host = await probe();
if (!host.ok) {
  console.error(`cannot soak: ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')}`);
  process.exit(2);
}

const root = mkdtempSync(join(tmpdir(), 'forge-soak-'));
process.on('exit', () => rmSync(root, { recursive: true, force: true }));
const home = join(root, 'home');
const project = join(root, 'project');
mkdirSync(home, { recursive: true, mode: 0o700 });
mkdirSync(join(project, '.forge'), { recursive: true });
writeFileSync(
  join(home, 'policy.json'),
  JSON.stringify({ breakers: { per_tool_rpm: 1e9, per_session_forge_count: 1e9, failure_threshold: 1e9 } }),
);
const env = {
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('FORGE_'))),
  FORGE_HOME: home,
  NO_COLOR: '1',
};

const s = serveChild(CLI, project, env);
await s.ready;
const call = (name, args) => s.request('tools/call', { name, arguments: args });
const forged = await call('forge_tool', loadExample('fib'));
if (forged.result?.isError) throw new Error(`forging fib failed: ${JSON.stringify(forged.result)}`);
const fails = await call('forge_tool', {
  name: 'flaky',
  description: 'exits 3 on odd input, prints an envelope on even',
  runtime: 'sh',
  input_schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] },
  impl: 'read x; case "$x" in *[13579]\\}) exit 3;; esac; echo \'{"ok": true, "data": 1}\'',
});
if (fails.result?.isError) throw new Error(`forging flaky failed: ${JSON.stringify(fails.result)}`);

/** The server's resident set (KiB) and open descriptors, from /proc. */
function sample() {
  const status = readFileSync(`/proc/${s.child.pid}/status`, 'utf8');
  const rss = Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1]);
  return { rss, fds: readdirSync(`/proc/${s.child.pid}/fd`).length };
}

const kinds = { hit: 0, cold: 0, list: 0, unknown: 0, invalid: 0, failed: 0 };
const errors = [];
console.log(`forge serve soak — ${CALLS} mixed calls over stdio, samples every ${EVERY}`);
console.log('  calls   RSS        fds   calls/s');
let baseline;
let t = performance.now();
for (let i = 1; i <= CALLS; i++) {
  const r = i % 20;
  let reply;
  if (r < 10) {
    kinds.hit++;
    reply = await call('fib', { n: i % 50 }); // 50 distinct inputs: hits after the first pass
  } else if (r < 11) {
    kinds.cold++;
    reply = await call('flaky', { n: 2 * i }); // not deterministic: a sandboxed run each time
  } else if (r < 12) {
    kinds.failed++;
    reply = await call('flaky', { n: 2 * i + 1 });
  } else if (r < 15) {
    kinds.list++;
    reply = await call('forge_list', {});
  } else if (r < 17) {
    kinds.unknown++;
    reply = await call('no_such_tool', {});
  } else {
    kinds.invalid++;
    reply = await call('fib', { n: -1 });
  }
  if (reply.error) errors.push(reply.error.message);
  if (i % EVERY === 0) {
    const now = performance.now();
    const m = sample();
    baseline ??= m;
    console.log(
      `  ${String(i).padStart(5)}   ${(m.rss / 1024).toFixed(1).padStart(6)} MiB  ${String(m.fds).padStart(4)}   ${(EVERY / ((now - t) / 1000)).toFixed(0)}`,
    );
    t = now;
  }
}
const end = sample();
await s.stop();
console.log(
  `\n  mix: ${Object.entries(kinds)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ')}; protocol errors ${errors.length}`,
);
console.log(
  `  growth after the first sample: RSS ${((end.rss - baseline.rss) / 1024).toFixed(1)} MiB (${((end.rss / baseline.rss - 1) * 100).toFixed(1)}%), descriptors ${end.fds - baseline.fds}`,
);
if (errors.length) console.log(`  first protocol error: ${errors[0]}`);
