#!/usr/bin/env node
// Benchmarks of @forge/sandbox against raw bwrap with a minimal argv running the same command,
// measured in the same run. Prints p50/p95 and the ratios. Not a test: figures depend on the host.
//
//   pnpm bench     (BENCH_RUNS=200 for more samples)

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { PROC_MASKED, PROC_READ_ONLY, prebuiltStats, probe, resolveRuntimes, runSandboxed } from '../dist/index.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 100);
const host = await probe();
if (!host.ok) {
  console.error(`cannot benchmark: ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')}`);
  process.exit(2);
}
const python = (await resolveRuntimes()).get('python3');

/** The least bwrap needs to run a program from /usr (plus extra read-only mounts). */
function rawArgs(command, mounts = [], env = {}) {
  // The same environment the sandbox gives, so both runs do the same work.
  const a = ['--unshare-all', '--die-with-parent', '--clearenv'];
  for (const [k, v] of Object.entries({ PATH: '/usr/local/bin:/usr/bin:/bin', HOME: '/tmp', TMPDIR: '/tmp', LANG: 'C.UTF-8', ...env }))
    a.push('--setenv', k, v);
  a.push('--ro-bind', '/usr', '/usr');
  for (const r of host.roots) a.push(...(r.symlink ? ['--symlink', r.symlink, r.path] : ['--ro-bind', r.path, r.path]));
  for (const m of mounts) a.push('--ro-bind', m, m);
  a.push('--proc', '/proc', '--dev', '/dev', '--', ...command);
  return a;
}

function raw(command, mounts, env) {
  return new Promise((resolve, reject) => {
    const c = spawn(host.bwrap.path, rawArgs(command, mounts, env), { stdio: ['ignore', 'ignore', 'inherit'] });
    c.on('error', reject);
    c.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`raw bwrap exited ${code}`))));
  });
}

async function sandboxed(command, mounts = [], env = {}) {
  const r = await runSandboxed({ command, env, mounts: mounts.map((source) => ({ source, mode: 'ro' })) });
  if (r.reason !== 'exit' || r.exitCode !== 0) throw new Error(`sandboxed run ended ${r.reason} ${r.exitCode}: ${r.stderrTail}`);
}

/**
 * Runs `fn` and `base` RUNS times each, in interleaved blocks of 10, so both see the same
 * machine state without one run's teardown (namespaces are freed asynchronously) landing in the
 * other's timing.
 */
async function paired(fn, base) {
  const a = [];
  const b = [];
  for (let i = 0; i < RUNS; i += 10) {
    for (let k = 0; k < 10; k++) {
      const t = performance.now();
      await base();
      b.push(performance.now() - t);
    }
    for (let k = 0; k < 10; k++) {
      const t = performance.now();
      await fn();
      a.push(performance.now() - t);
    }
  }
  return { ours: stats(a), raw: stats(b) };
}

function stats(xs) {
  const s = [...xs].sort((x, y) => x - y);
  return { p50: s[Math.floor(s.length / 2)], p95: s[Math.floor(s.length * 0.95)] };
}

const ms = (x) => `${x.toFixed(2)} ms`;

console.log(
  `@forge/sandbox benchmark — node ${process.version}, ${availableParallelism()} cores, bwrap ${host.bwrap.version}, ${RUNS} runs each`,
);
console.log('  (! marks a figure that misses its target on this machine)\n');

// Warm up both paths (page cache, probe and runtime caches).
for (let i = 0; i < 5; i++) {
  await raw(['/bin/true']);
  await sandboxed(['/bin/true']);
}

const t = await paired(
  () => sandboxed(['/bin/true']),
  () => raw(['/bin/true']),
);
const over = t.ours.p50 - t.raw.p50;
console.log(
  `${over <= 3 ? ' ' : '!'} /bin/true           p50 ${ms(t.ours.p50)}  p95 ${ms(t.ours.p95)}   raw bwrap p50 ${ms(t.raw.p50)}  p95 ${ms(t.raw.p95)}`,
);
console.log(`${over <= 3 ? ' ' : '!'}   overhead at p50   ${ms(over)} (target ≤ 3 ms), ratio ${(t.ours.p50 / t.raw.p50).toFixed(2)}×`);

const pyCmd = [python.interpreter, '-c', 'print(1)'];
const p = await paired(
  () => sandboxed(pyCmd, python.mounts, python.env),
  () => raw(pyCmd, python.mounts, python.env),
);
const pyRatio = p.ours.p50 / p.raw.p50;
console.log(
  `${pyRatio <= 1.1 ? ' ' : '!'} python -c print(1)  p50 ${ms(p.ours.p50)}  p95 ${ms(p.ours.p95)}   raw bwrap p50 ${ms(p.raw.p50)}  p95 ${ms(p.raw.p95)}`,
);
console.log(`${pyRatio <= 1.1 ? ' ' : '!'}   ratio at p50      ${pyRatio.toFixed(3)}× (target ≤ 1.10×)`);

// The same python run in a sandbox built ahead (RunOptions.prebuild): each run starts once the
// next sandbox has been built, so the build competes with neither side's timing.
const stageDir = mkdtempSync(join(tmpdir(), 'forge-sandbox-bench-'));
process.on('exit', () => rmSync(stageDir, { recursive: true, force: true }));
const pyProfile = { command: pyCmd, env: python.env, mounts: python.mounts.map((source) => ({ source, mode: 'ro' })) };
const built = [];
const rawPy = [];
for (let i = 0; i < RUNS; i++) {
  for (let k = 0; k < 500 && prebuiltStats().building > 0; k++) await new Promise((r) => setTimeout(r, 1));
  let t0 = performance.now();
  const r = await runSandboxed(pyProfile, { prebuild: { stageDir } });
  if (i > 0 && !r.prebuilt) throw new Error('expected a sandbox built ahead');
  built.push(performance.now() - t0);
  t0 = performance.now();
  await raw(pyCmd, python.mounts, python.env);
  rawPy.push(performance.now() - t0);
}
const b = stats(built.slice(1));
const rb = stats(rawPy.slice(1));
console.log(
  `  python, built ahead p50 ${ms(b.p50)}  p95 ${ms(b.p95)}   raw bwrap p50 ${ms(rb.p50)}, ratio ${(b.p50 / rb.p50).toFixed(3)}× (${ms(b.p50 - rb.p50)})`,
);

// Throughput: /bin/true with 4 runs in flight, against raw bwrap the same way.
async function throughput(fn, n = RUNS * 3, concurrency = 4) {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next++ < n) await fn();
    }),
  );
  return n / ((performance.now() - t0) / 1000);
}
const ours = await throughput(() => sandboxed(['/bin/true']));
const rawRate = await throughput(() => raw(['/bin/true']));
console.log(
  `${ours >= 150 ? ' ' : '!'} /bin/true, 4 in flight  ${ours.toFixed(0)} runs/s (target ≥ 150)   raw bwrap ${rawRate.toFixed(0)} runs/s, ratio ${(ours / rawRate).toFixed(2)}×`,
);

// What each hardening step costs, measured on raw bwrap running /bin/true, one step added at a
// time against the plain run next to it (paired, as above). The steps a run takes depend on the
// host: root drops to the sandbox uid (setpriv) and stages what that uid cannot reach (unshare +
// mount); every run covers /proc; a run with an output directory runs behind a holder shell and
// has it copied out.
console.log('\n  cost of each step, on raw bwrap /bin/true (paired medians):');
const { existsSync: exists, statSync: stat } = await import('node:fs');
const cover = [];
let coverPaths = 0;
for (const p of PROC_READ_ONLY) if (exists(p)) coverPaths += cover.push('--ro-bind', p, p) && 1;
for (const p of PROC_MASKED) {
  if (!exists(p)) continue;
  coverPaths++;
  if (stat(p).isDirectory()) cover.push('--perms', '0555', '--size', '4096', '--tmpfs', p, '--remount-ro', p);
  else cover.push('--ro-bind', '/dev/null', p);
}
function run(argv) {
  return new Promise((resolve, reject) => {
    const c = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
    c.on('error', reject);
    c.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${argv[0]} exited ${code}`))));
  });
}
const plain = () => run([host.bwrap.path, ...rawArgs(['/bin/true'])]);
const withArgs = (extra, command = ['/bin/true']) => {
  const a = rawArgs(command);
  const at = a.indexOf('--dev');
  return [host.bwrap.path, ...a.slice(0, at), ...extra, ...a.slice(at)];
};
async function step(name, argv) {
  const r = await paired(
    () => run(argv),
    () => plain(),
  );
  console.log(`    ${name.padEnd(44)} +${ms(r.ours.p50 - r.raw.p50)}  (p50 ${ms(r.ours.p50)} against ${ms(r.raw.p50)})`);
}
await step(`/proc read-only and masked (${coverPaths} paths)`, withArgs(cover));
await step('holder shell around the command', withArgs([], ['/bin/sh', '-c', '"$@"; s=$?; exit $s', 'sandbox', '/bin/true']));
// A run without an output directory starts its command behind a shell that checks it, sets the
// run's process limit in its own user namespace and marks the start (start.ts), then execs it;
// with one, the holder does that (no shell more).
const START = `{ [ -x "$1" ] || exit 127; } && ulimit -p 64 && printf '\\036forge-sandbox: started\\n' >/dev/null && exec "$@"`;
await step('starting shell, runs without output dir', withArgs([], ['/bin/sh', '-c', START, 'sandbox', '/bin/true']));
if (host.identity?.drop.length) {
  await step(`drop root: setpriv to uid ${host.identity.uid}`, [...host.identity.drop, ...withArgs(['--uid', '1000', '--gid', '1000'])]);
  const src = mkdtempSync(join(tmpdir(), 'forge-sandbox-bench-src-'));
  const point = mkdtempSync(join(tmpdir(), 'forge-sandbox-bench-point-'));
  process.on('exit', () => rmSync(src, { recursive: true, force: true }) || rmSync(point, { recursive: true, force: true }));
  await step('stage one source (unshare -m, mount --bind, -ef)', [
    'unshare',
    '--mount',
    '--propagation',
    'private',
    '--',
    '/bin/sh',
    '-c',
    'mount --bind "$1" "$2" && [ "$1" -ef "$2" ] && shift 2 && exec "$@"',
    'stage',
    src,
    point,
    ...withArgs(['--ro-bind', point, '/data']),
  ]);
}
// The whole path through runSandboxed: a run with a per-run output directory (tmpfs inside, the
// holder, the copy out) against the same run without one.
const outRoot = mkdtempSync(join(tmpdir(), 'forge-sandbox-bench-out-'));
process.on('exit', () => rmSync(outRoot, { recursive: true, force: true }));
let outN = 0;
const { mkdirSync: mkdir } = await import('node:fs');
const withOut = async () => {
  const dir = join(outRoot, String(outN++));
  mkdir(dir);
  const r = await runSandboxed({
    command: ['/bin/sh', '-c', 'echo x > /out/f'],
    mounts: [{ source: dir, target: '/out', mode: 'rw', perRun: true }],
  });
  if (r.exitCode !== 0 || r.outputs?.[0]?.files !== 1) throw new Error(`output run failed: ${r.stderrTail}`);
};
const o = await paired(withOut, () => sandboxed(['/bin/sh', '-c', 'echo x > /dev/null']));
console.log(
  `    ${'output directory: tmpfs, holder, copy out'.padEnd(44)} +${ms(o.ours.p50 - o.raw.p50)}  (p50 ${ms(o.ours.p50)} against ${ms(o.raw.p50)}, through runSandboxed)`,
);
