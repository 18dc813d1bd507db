// forge's Merkle tree heads and proofs checked by code nobody here wrote: the Go checksum
// database's tlog package (golang.org/x/mod/sumdb/tlog, Debian's golang-golang-x-mod-dev) builds
// its own tree over the same leaves, must find every head and proof byte-identical to forge's,
// and verifies forge's proofs with CheckRecord and CheckTree (test/interop/tlogcheck.go).
import { expect, it } from 'vitest';
import { consistencyProof, inclusionProof, leafHash, MemoryTree, treeHead } from '../src/merkle.js';
import { runGo } from './helpers.js';

it('Go’s sumdb/tlog finds forge’s tree heads and proofs identical to its own, and verifies them', () => {
  const t = new MemoryTree();
  const leaves: string[] = [];
  for (let i = 0; i < 1500; i++) {
    const h = leafHash(Buffer.from(`{"seq":${i},"type":"interop.entry","data":{"i":${i}}}`));
    leaves.push(h.toString('hex'));
    t.appendLeafHash(h);
  }
  const hex = (xs: Uint8Array[]) => xs.map((x) => Buffer.from(x).toString('hex'));
  const sizes = [
    1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1000, 1023, 1024, 1025, 1500,
  ];
  const checks = sizes.map((n) => {
    const indexes = [...new Set([0, 1, n >> 1, n - 2, n - 1, (n * 7) % n, (n * 13 + 5) % n].filter((i) => i >= 0 && i < n))];
    const firsts = [...new Set([1, 2, 3, n >> 1, n - 1, (n * 5 + 3) % n].filter((m) => m >= 1 && m < n))];
    return {
      size: n,
      root: Buffer.from(treeHead(t, n)).toString('hex'),
      inclusion: indexes.map((index) => ({ index, proof: hex(inclusionProof(t, index, n)) })),
      consistency: firsts.map((first) => ({
        first,
        firstRoot: Buffer.from(treeHead(t, first)).toString('hex'),
        proof: hex(consistencyProof(t, first, n)),
      })),
    };
  });
  const r = runGo('tlogcheck.go', 'tlog', { leaves, checks });
  expect(r.stderr + r.stdout).toMatch(/^ok: /);
  expect(r.status).toBe(0);
  const proofs = checks.reduce((sum, c) => sum + c.inclusion.length + c.consistency.length, 0);
  expect(r.stdout.trim()).toBe(`ok: ${checks.length} tree heads, ${proofs} proofs`);
});
