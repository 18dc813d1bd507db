// V8 heap snapshots of another node process, for the soak: RSS says little about a leak (V8 keeps
// the pages it grew into), the live heap does. The process runs with heapFlags(dir); each
// snapshot collects garbage first, so it holds what is still reachable.

import { closeSync, openSync, readdirSync, readFileSync, readSync, statSync } from 'node:fs';
import { join } from 'node:path';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Node flags that make a process write a heap snapshot into `dir` on SIGUSR2. */
export const heapFlags = (dir) => ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${dir}`];

/** True once the snapshot's JSON is complete (it ends with `]}`), whatever is still flushing. */
function complete(path) {
  const size = statSync(path).size;
  if (size < 2) return false;
  const fd = openSync(path, 'r');
  try {
    const tail = Buffer.alloc(2);
    readSync(fd, tail, 0, 2, size - 2);
    return tail.toString() === ']}';
  } finally {
    closeSync(fd);
  }
}

/**
 * Asks `pid` (started with heapFlags(dir)) for a heap snapshot; resolves with its path once
 * written. The process does nothing else meanwhile (seconds for a 100 MiB heap). Rejects after
 * `timeoutMs`.
 */
export async function takeHeapSnapshot(pid, dir, { timeoutMs = 300_000 } = {}) {
  const had = new Set(readdirSync(dir));
  process.kill(pid, 'SIGUSR2');
  for (const until = Date.now() + timeoutMs; Date.now() < until; ) {
    await sleep(500);
    const name = readdirSync(dir).find((f) => !had.has(f) && f.endsWith('.heapsnapshot'));
    if (name && complete(join(dir, name))) return join(dir, name);
  }
  throw new Error(`no heap snapshot of process ${pid} in ${dir} after ${timeoutMs} ms`);
}

/** A snapshot's live heap: total bytes, and count and bytes per kind (objects and closures by constructor name, other nodes by type). */
export function heapSummary(path) {
  const snap = JSON.parse(readFileSync(path, 'utf8'));
  const fields = snap.snapshot.meta.node_fields;
  const types = snap.snapshot.meta.node_types[0];
  const [type, name, size] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f));
  const byKind = new Map();
  let total = 0;
  for (let i = 0; i < snap.nodes.length; i += fields.length) {
    const t = types[snap.nodes[i + type]];
    const kind = t === 'object' || t === 'closure' ? `${snap.strings[snap.nodes[i + name]] || '(anonymous)'}` : `(${t})`;
    const bytes = snap.nodes[i + size];
    const k = byKind.get(kind) ?? { count: 0, bytes: 0 };
    k.count++;
    k.bytes += bytes;
    byKind.set(kind, k);
    total += bytes;
  }
  return { total, byKind };
}

/** What grew from summary `a` to `b`: the totals and the `top` kinds that gained the most bytes. */
export function heapGrowth(a, b, top = 8) {
  const rows = [];
  for (const [kind, after] of b.byKind) {
    const before = a.byKind.get(kind) ?? { count: 0, bytes: 0 };
    if (after.bytes > before.bytes) rows.push({ kind, count: after.count - before.count, bytes: after.bytes - before.bytes });
  }
  rows.sort((x, y) => y.bytes - x.bytes);
  return { before: a.total, after: b.total, rows: rows.slice(0, top) };
}
