// Pieces the benchmarks of several packages share: percentiles, paired measurement, and the raw
// bwrap + python baseline a sandboxed call is compared with. Not a package: benches import it
// by relative path.

import { spawn } from 'node:child_process';

/** p50 and p95 of a list of samples. */
export function stats(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return {
    p50: s[Math.floor(s.length / 2)],
    p95: s[Math.floor(s.length * 0.95)],
    p99: s[Math.min(s.length - 1, Math.floor(s.length * 0.99))],
  };
}

/**
 * Runs `fn` and `base` `runs` times each, alternating one of each (which goes first alternates
 * too), so both see the same machine state: this VM's speed drifts over seconds, more than the
 * differences measured. Each gets the index of the run. Returns the stats of both, and of the
 * per-pair differences (fn − base), whose median is the added time least blurred by drift.
 * `before`, when given, is awaited ahead of each pair, untimed; `beforeEach`, ahead of each of
 * the two (so neither pays for what the other left going).
 */
export async function paired(fn, base, runs, { before, beforeEach } = {}) {
  const a = [];
  const b = [];
  const time = async (f, i) => {
    await beforeEach?.(i);
    const t = performance.now();
    await f(i);
    return performance.now() - t;
  };
  for (let i = 0; i < runs; i++) {
    await before?.(i);
    if (i % 2 === 0) {
      b.push(await time(base, i));
      a.push(await time(fn, i));
    } else {
      a.push(await time(fn, i));
      b.push(await time(base, i));
    }
  }
  return { ours: stats(a), base: stats(b), diff: stats(a.map((x, i) => x - (b[i] ?? 0))) };
}

/**
 * The baseline of a sandboxed python call: raw bwrap with the least it needs (host roots, the
 * interpreter's mounts, the script), running `script` with `input` as JSON on stdin. `host` is
 * `probe()`'s result, `python` the `python3` runtime. Resolves when it printed an envelope.
 */
export function rawPython(host, python, script, input) {
  return rawRun(host, python, [python.interpreter, '-I', '-B', script], script, input);
}

/** The same for a node script, with the `node` runtime (and the environment it needs, NODE_OPTIONS). */
export function rawNode(host, node, script, input) {
  return rawRun(host, node, [node.interpreter, script], script, input);
}

function rawRun(host, runtime, command, script, input) {
  const a = ['--unshare-all', '--die-with-parent', '--clearenv', '--setenv', 'PATH', '/usr/bin:/bin', '--ro-bind', '/usr', '/usr'];
  for (const [k, v] of Object.entries(runtime.env ?? {})) a.push('--setenv', k, v);
  for (const r of host.roots) a.push(...(r.symlink ? ['--symlink', r.symlink, r.path] : ['--ro-bind', r.path, r.path]));
  for (const m of runtime.mounts) a.push('--ro-bind', m, m);
  a.push('--ro-bind', script, script, '--proc', '/proc', '--dev', '/dev', '--', ...command);
  return new Promise((resolve, reject) => {
    const c = spawn(host.bwrap.path, a, { stdio: ['pipe', 'pipe', 'inherit'] });
    let out = '';
    c.stdout.on('data', (d) => (out += d));
    c.on('error', reject);
    c.on('close', (code) => (code === 0 && out.includes('"ok"') ? resolve() : reject(new Error(`raw bwrap exited ${code}`))));
    c.stdin.end(JSON.stringify(input));
  });
}
