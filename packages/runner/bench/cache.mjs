#!/usr/bin/env node
// The result cache's hit path over its store, against the synchronous in-memory index lookup the
// cache was before the store interface (a Map get and an LRU reinsert), measured in the same run.
// Also the file store's set (a durable write: temp file, fsync, rename). Not a test: figures
// depend on the host.
//
//   node bench/cache.mjs      (after `pnpm --filter @forge/runner build`; BENCH_HITS=… for more)

import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileCacheStore } from '../dist/index.js';

const HITS = Number(process.env.BENCH_HITS ?? 200_000);
const ENTRIES = 2000;
const root = mkdtempSync(join(tmpdir(), 'forge-cache-bench-'));
process.on('exit', () => rmSync(root, { recursive: true, force: true }));

const key = (i) => createHash('sha256').update(`k${i}`).digest('hex');
const keys = Array.from({ length: ENTRIES }, (_, i) => key(i));
const envelope = (i) => ({
  ok: true,
  data: { n: i, fib: String(i * 7) },
  meta: { run_id: 'lz0000a-0f3a9c1e0001', cache: 'miss', duration_ms: 3 },
});

const store = fileCacheStore(join(root, 'cache'));
const t = performance.now();
for (let i = 0; i < ENTRIES; i++) await store.set(keys[i], envelope(i), 'lz0000a-0f3a9c1e0001');
const setMs = (performance.now() - t) / ENTRIES;

// Baseline: the index lookup as the cache did it before (synchronous).
const slots = new Map(
  keys.map((k, i) => [k, { bytes: 100, created: Date.now(), entry: { envelope: envelope(i), seed_run: 's', created_at: Date.now() } }]),
);
const syncGet = (k) => {
  const slot = slots.get(k);
  if (!slot) return undefined;
  if (Date.now() - slot.created > 7 * 24 * 3600_000) return undefined;
  slots.delete(k);
  slots.set(k, slot);
  return slot.entry;
};

async function rate(get, awaited) {
  let found = 0;
  const t0 = performance.now();
  for (let i = 0; i < HITS; i++) {
    const e = awaited ? await get(keys[i % ENTRIES]) : get(keys[i % ENTRIES]);
    if (e) found++;
  }
  if (found !== HITS) throw new Error(`expected ${HITS} hits, got ${found}`);
  return HITS / ((performance.now() - t0) / 1000);
}

// Warm up both, then alternate three rounds each and keep the best of each.
await rate(syncGet, false);
await rate((k) => store.get(k), true);
const base = [];
const now = [];
for (let r = 0; r < 3; r++) {
  base.push(await rate(syncGet, false));
  now.push(await rate((k) => store.get(k), true));
}
const b = Math.max(...base);
const n = Math.max(...now);
const perHitNs = (x) => (1e9 / x).toFixed(0);
console.log(`@forge/runner result cache — node ${process.version}, ${ENTRIES} entries, ${HITS} hits per round (best of 3)`);
console.log(`  hit, before (sync index lookup)      ${Math.round(b).toLocaleString()} /s   ${perHitNs(b)} ns each`);
console.log(
  `  hit, fileCacheStore.get (awaited)    ${Math.round(n).toLocaleString()} /s   ${perHitNs(n)} ns each   ratio ${(b / n).toFixed(2)}× the baseline's time, +${(1e9 / n - 1e9 / b).toFixed(0)} ns a hit`,
);
console.log(`  set (temp file, fsync, rename)       ${setMs.toFixed(3)} ms each`);
