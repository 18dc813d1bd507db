#!/usr/bin/env node
// The Merkle tree of the log (src/merkle.ts), in memory, with 1,000,000 leaves of entry-sized lines:
//   - appending: leaf hash and the subtrees each leaf completes, against SHA-256 of the same
//     lines alone (the chain's own hash), measured in the same run;
//   - an inclusion proof and a consistency proof: making one and checking one (targets: make
//     ≤ 1 ms, check ≤ 0.1 ms).
// Prints figures and ratios; never asserts. Needs `pnpm build` first.
//
//   node packages/audit-chain/bench/merkle.mjs     (BENCH_LEAVES=200000 for a smaller tree)

import { createHash } from 'node:crypto';
import { stats } from '../../../bench/baseline.mjs';
import { consistencyProof, inclusionProof, leafHash, MemoryTree, treeHead, verifyConsistency, verifyInclusion } from '../dist/index.js';

const LEAVES = Number(process.env.BENCH_LEAVES ?? 1_000_000);
const line = (i) =>
  Buffer.from(
    `{"seq":${i + 1},"ts":"2026-12-04T12:00:00.000Z","type":"forge.called","data":{"name":"code.csv_stats","ok":true,"run_id":"mx8ynzuy-b94b47de${String(i).padStart(4, '0')}"},"prev":"${'a'.repeat(64)}"`,
  );

const lines = Array.from({ length: LEAVES }, (_, i) => line(i));
let t = performance.now();
for (const l of lines) createHash('sha256').update(l).digest();
const shaMs = performance.now() - t;
const tree = new MemoryTree();
t = performance.now();
for (const l of lines) tree.append(l);
const treeMs = performance.now() - t;

const pick = (n) => Math.floor(Math.random() * n);
const sample = (fn, runs = 2000) => {
  const xs = [];
  for (let i = 0; i < runs; i++) {
    const s = performance.now();
    fn();
    xs.push(performance.now() - s);
  }
  return stats(xs);
};
const head = treeHead(tree, LEAVES);
const makeIncl = sample(() => inclusionProof(tree, pick(LEAVES), LEAVES));
const proofs = Array.from({ length: 2000 }, () => {
  const i = pick(LEAVES);
  return { i, leaf: leafHash(lines[i]), proof: inclusionProof(tree, i, LEAVES) };
});
let k = 0;
const checkIncl = sample(() => {
  const p = proofs[k++ % proofs.length];
  if (!verifyInclusion(p.i, LEAVES, p.leaf, p.proof, head)) throw new Error('inclusion proof failed');
});
const makeCons = sample(() => consistencyProof(tree, 1 + pick(LEAVES - 1), LEAVES));
const cons = Array.from({ length: 2000 }, () => {
  const m = 1 + pick(LEAVES - 1);
  return { m, old: treeHead(tree, m), proof: consistencyProof(tree, m, LEAVES) };
});
k = 0;
const checkCons = sample(() => {
  const c = cons[k++ % cons.length];
  if (!verifyConsistency(c.m, LEAVES, c.old, head, c.proof)) throw new Error('consistency proof failed');
});

const us = (x) => `${(x * 1000).toFixed(1)} µs`;
console.log(
  `@forge/audit-chain Merkle tree — node ${process.version}, ${LEAVES.toLocaleString('en')} leaves of ${lines[0].length} bytes\n`,
);
console.log(
  `  appending: ${Math.round(LEAVES / (treeMs / 1000)).toLocaleString('en')} leaves/s; SHA-256 of the same lines alone ${Math.round(
    LEAVES / (shaMs / 1000),
  ).toLocaleString('en')}/s (tree ${(treeMs / shaMs).toFixed(2)}× the chain's hashing)`,
);
console.log(
  `  inclusion proof: make p50 ${us(makeIncl.p50)} (p99 ${us(makeIncl.p99)}), check p50 ${us(checkIncl.p50)} (p99 ${us(checkIncl.p99)})`,
);
console.log(
  `  consistency proof: make p50 ${us(makeCons.p50)} (p99 ${us(makeCons.p99)}), check p50 ${us(checkCons.p50)} (p99 ${us(checkCons.p99)})`,
);
console.log('\n  targets: make ≤ 1 ms, check ≤ 0.1 ms');
