// The Merkle tree of the log (src/merkle.ts) against a reference computation written straight
// from RFC 6962's recursive definitions (MTH, PATH, PROOF/SUBPROOF) over the leaf list: every tree
// head, inclusion proof and consistency proof for every size and index up to 128, random ones up
// to 5,000; and every change to a proof, a leaf, a head or an index is caught. (A proof checked
// against a head under another size can pass when both sizes give the proof the same shape: the
// signed checkpoint binds the size to its head, as in every RFC 6962 log.)
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  consistencyProof,
  EMPTY_ROOT,
  inclusionProof,
  leafHash,
  MemoryTree,
  nodeHash,
  treeHead,
  verifyConsistency,
  verifyInclusion,
} from '../src/merkle.js';

/** RFC 6962 §2.1, as written (over ranges of the leaf list, each range's MTH remembered). */
const k = (n: number) => {
  let p = 1;
  while (p * 2 < n) p *= 2;
  return p;
};
const memo = new WeakMap<Buffer[], Map<string, Buffer>>();
function mth(all: Buffer[], lo = 0, hi = all.length): Buffer {
  if (hi === lo) return createHash('sha256').digest();
  if (hi - lo === 1) return all[lo] as Buffer;
  let seen = memo.get(all);
  if (!seen) memo.set(all, (seen = new Map()));
  const key = `${lo}:${hi}`;
  const hit = seen.get(key);
  if (hit) return hit;
  const s = k(hi - lo);
  const h = nodeHash(mth(all, lo, lo + s), mth(all, lo + s, hi));
  seen.set(key, h);
  return h;
}
function path(m: number, all: Buffer[], lo: number, hi: number): Buffer[] {
  if (hi - lo === 1) return [];
  const s = k(hi - lo);
  return m < s ? [...path(m, all, lo, lo + s), mth(all, lo + s, hi)] : [...path(m - s, all, lo + s, hi), mth(all, lo, lo + s)];
}
function subproof(m: number, all: Buffer[], lo: number, hi: number, b: boolean): Buffer[] {
  if (m === hi - lo) return b ? [] : [mth(all, lo, hi)];
  const s = k(hi - lo);
  return m <= s
    ? [...subproof(m, all, lo, lo + s, b), mth(all, lo + s, hi)]
    : [...subproof(m - s, all, lo + s, hi, false), mth(all, lo, lo + s)];
}
const proof = (m: number, all: Buffer[], n: number) => (m === 0 || m === n ? [] : subproof(m, all, 0, n, true));

/** `n` leaves: the leaf hashes of lines "entry 0" …, and the tree over them. */
function tree(n: number): { leaves: Buffer[]; t: MemoryTree } {
  const t = new MemoryTree();
  const leaves: Buffer[] = [];
  for (let i = 0; i < n; i++) {
    const h = leafHash(Buffer.from(`{"seq":${i},"type":"test.entry"}`));
    leaves.push(h);
    t.appendLeafHash(h);
  }
  return { leaves, t };
}

const hex = (xs: Uint8Array[]) => xs.map((x) => Buffer.from(x).toString('hex'));

describe('Merkle tree (RFC 6962)', () => {
  it('hashes leaves and nodes with their domain prefixes, and the empty tree as SHA-256 of nothing', () => {
    const sha = (...parts: Buffer[]) => createHash('sha256').update(Buffer.concat(parts)).digest();
    expect(leafHash(Buffer.from('abc'))).toEqual(sha(Buffer.from([0]), Buffer.from('abc')));
    const a = Buffer.alloc(32, 1);
    const b = Buffer.alloc(32, 2);
    expect(nodeHash(a, b)).toEqual(sha(Buffer.from([1]), a, b));
    expect(EMPTY_ROOT.toString('hex')).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    expect(treeHead(new MemoryTree(), 0)).toEqual(EMPTY_ROOT);
  });

  it('every head and proof up to 128 leaves is the reference one, and verifies', () => {
    const { leaves, t } = tree(128);
    for (let n = 1; n <= 128; n++) {
      const root = treeHead(t, n);
      expect(Buffer.from(root).equals(mth(leaves, 0, n)), `head of ${n}`).toBe(true);
      for (let i = 0; i < n; i++) {
        const p = inclusionProof(t, i, n);
        expect(hex(p), `leaf ${i} of ${n}`).toEqual(hex(path(i, leaves, 0, n)));
        expect(verifyInclusion(i, n, leaves[i] as Buffer, p, root)).toBe(true);
      }
      for (let m = 0; m <= n; m++) {
        const p = consistencyProof(t, m, n);
        expect(hex(p), `${m} → ${n}`).toEqual(hex(proof(m, leaves, n)));
        expect(verifyConsistency(m, n, treeHead(t, m), root, p), `${m} → ${n}`).toBe(true);
      }
    }
  });

  it('random heads and proofs up to 5,000 leaves agree with the reference', () => {
    const { leaves, t } = tree(5000);
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 5000 }), fc.nat(), fc.nat(), (n, a, b) => {
        const i = a % n;
        const m = b % (n + 1);
        const root = treeHead(t, n);
        return (
          Buffer.from(root).equals(mth(leaves, 0, n)) &&
          hex(inclusionProof(t, i, n)).join() === hex(path(i, leaves, 0, n)).join() &&
          hex(consistencyProof(t, m, n)).join() === hex(proof(m, leaves, n)).join() &&
          verifyInclusion(i, n, leaves[i] as Buffer, inclusionProof(t, i, n), root) &&
          verifyConsistency(m, n, treeHead(t, m), root, consistencyProof(t, m, n))
        );
      }),
      { numRuns: 300 },
    );
  });

  it('a changed proof node, leaf, head or index is caught', () => {
    const { leaves, t } = tree(1000);
    const flip = (x: Uint8Array, at: number) => {
      const y = Buffer.from(x);
      y[at % 32] = (y[at % 32] as number) ^ 1;
      return y;
    };
    fc.assert(
      fc.property(fc.integer({ min: 2, max: 1000 }), fc.nat(), fc.nat(), fc.nat(), (n, a, b, c) => {
        const i = a % n;
        const m = 1 + (b % (n - 1));
        const root = treeHead(t, n);
        const leaf = leaves[i] as Buffer;
        const p = inclusionProof(t, i, n);
        const q = consistencyProof(t, m, n);
        const old = treeHead(t, m);
        const bad = [
          verifyInclusion(i, n, flip(leaf, c), p, root),
          verifyInclusion(i, n, leaf, p, flip(root, c)),
          p.length > 0 &&
            verifyInclusion(
              i,
              n,
              leaf,
              p.map((x, j) => (j === c % p.length ? flip(x, c) : x)),
              root,
            ),
          verifyInclusion(i, n, leaf, [...p, root], root),
          p.length > 0 && verifyInclusion(i, n, leaf, p.slice(1), root),
          verifyInclusion((i + 1) % n, n, leaf, p, root),
          verifyConsistency(m, n, flip(old, c), root, q),
          verifyConsistency(m, n, old, flip(root, c), q),
          q.length > 0 &&
            verifyConsistency(
              m,
              n,
              old,
              root,
              q.map((x, j) => (j === c % q.length ? flip(x, c) : x)),
            ),
          q.length > 0 && verifyConsistency(m, n, old, root, q.slice(0, -1)),
          m > 1 && verifyConsistency(m - 1, n, old, root, q),
        ];
        return bad.every((x) => x === false);
      }),
      { numRuns: 500 },
    );
  });

  it('refuses what is not a tree position, and never reads past the tree', () => {
    const { t } = tree(10);
    expect(() => inclusionProof(t, 10, 10)).toThrow(/not in a tree of 10/);
    expect(() => consistencyProof(t, 11, 10)).toThrow(/not a prefix/);
    expect(() => treeHead(t, -1)).toThrow(/whole number/);
    expect(() => treeHead(t, 11)).toThrow(/no complete subtree/);
    expect(verifyInclusion(0, 0, EMPTY_ROOT, [], EMPTY_ROOT)).toBe(false);
    expect(verifyConsistency(0, 5, EMPTY_ROOT, treeHead(t, 5), [])).toBe(true);
    expect(verifyConsistency(0, 5, Buffer.alloc(32), treeHead(t, 5), [])).toBe(false);
    expect(verifyConsistency(5, 5, treeHead(t, 5), treeHead(t, 5), [])).toBe(true);
  });
});
