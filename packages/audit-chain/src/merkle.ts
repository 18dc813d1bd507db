/**
 * The audit log as an RFC 6962 (RFC 9162 §2.1) Merkle tree: each entry's line is a leaf; the
 * tree head over the first `n` entries, an inclusion proof that entry `i` is among them, and a
 * consistency proof that the first `m` are a prefix of the first `n`, with their verification.
 *
 *   leaf hash  = SHA-256(0x00 ‖ line)          (the entry's line without its newline)
 *   node hash  = SHA-256(0x01 ‖ left ‖ right)
 *   MTH({})    = SHA-256("")
 *
 * Hashes are read through {@link TreeHashes}: the hash of each complete subtree, by level and
 * index (the level-`l` subtree `k` covers leaves `k·2^l … (k+1)·2^l − 1`), which is how the
 * C2SP tlog-tiles layout stores them. Proofs ask only for hashes of complete subtrees of the tree
 * they are about, so a store that keeps those (in memory, in tiles, in a database) serves any of
 * them. Sizes and indexes are plain numbers (safe up to 2^53 entries).
 */
import { createHash, hash } from 'node:crypto';

/** The length of every hash here (SHA-256). */
export const HASH_SIZE = 32;

/** An inner node's hashed bytes, filled in place. */
const node = Buffer.alloc(1 + 2 * HASH_SIZE, 1);
/** A leaf's hashed bytes (prefix and line), for lines shorter than it (grown once, to 128 KiB, for longer ones). */
let leafBytes = Buffer.alloc(4096);

/*
 * Digests are asked for as latin1 ("binary") strings and written into buffers from those: a
 * one-shot hash to a string costs about half of one to a Buffer (which allocates a Buffer per
 * hash), and the tree hashes one node per leaf besides the leaf, so this is most of its cost.
 * Runs of hashes join their strings and write them once.
 */
function digest(data: Uint8Array): Buffer {
  return Buffer.from(hash('sha256', data, 'binary'), 'latin1');
}

/** The leaf hash of one entry's line (its bytes without the newline). */
export function leafHash(line: Uint8Array): Buffer {
  if (line.length >= leafBytes.length) {
    // A long line is hashed from a copy of its own; the shared buffer stays small.
    if (line.length >= 1 << 16) return digest(Buffer.concat([Buffer.alloc(1), line]));
    leafBytes = Buffer.alloc(1 << 17);
  }
  leafBytes[0] = 0;
  leafBytes.set(line, 1);
  return digest(leafBytes.subarray(0, 1 + line.length));
}

/** The hash of an inner node. */
export function nodeHash(left: Uint8Array, right: Uint8Array): Buffer {
  if (left.length !== HASH_SIZE || right.length !== HASH_SIZE)
    return createHash('sha256').update(node.subarray(0, 1)).update(left).update(right).digest();
  node.set(left, 1);
  node.set(right, 1 + HASH_SIZE);
  return digest(node);
}

/**
 * Hashes a complete row of `count` hashes (a power of two) pairwise up to their subtree's hash,
 * in place. The row starts at `row[1]`; `row[0]` is spare: the byte before each pair holds the
 * node prefix while it is hashed (that byte is spent by then), so no pair is copied. The result
 * is left at `row[1…33)`.
 */
export function foldRow(row: Buffer, count: number): void {
  for (let n = count; n > 1; n >>= 1) {
    let digests = '';
    for (let p = 0; p < n >> 1; p++) {
      const at = p * 2 * HASH_SIZE;
      row[at] = 1;
      digests += hash('sha256', new Uint8Array(row.buffer, row.byteOffset + at, 1 + 2 * HASH_SIZE), 'binary');
    }
    row.write(digests, 1, (n >> 1) * HASH_SIZE, 'latin1');
  }
}

/** The tree head of the empty tree. */
export const EMPTY_ROOT: Buffer = createHash('sha256').digest();

/** Where a tree's complete subtrees' hashes are read. */
export interface TreeHashes {
  /** The hash of the complete subtree of `2^level` leaves starting at leaf `index · 2^level`. */
  hash(level: number, index: number): Uint8Array;
}

/** The largest power of two smaller than `n` (n ≥ 2). */
function split(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** log2 of `n` when `n` is a power of two, else -1. */
function levelOf(n: number): number {
  let level = 0;
  let k = 1;
  while (k < n) {
    k *= 2;
    level++;
  }
  return k === n ? level : -1;
}

/**
 * The hash of leaves `lo … hi − 1` as RFC 6962's MTH of that range (`lo` is a multiple of the
 * largest power of two not above `hi − lo`, as every range a proof names is).
 */
function rangeHash(t: TreeHashes, lo: number, hi: number): Uint8Array {
  const n = hi - lo;
  const level = levelOf(n);
  if (level >= 0 && lo % n === 0) return t.hash(level, lo / n);
  const k = split(n);
  return nodeHash(rangeHash(t, lo, lo + k), rangeHash(t, lo + k, hi));
}

function checkSize(what: string, n: number): void {
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`${what} must be a whole number ≥ 0 (got ${n})`);
}

/** The tree head (root hash) of the first `size` leaves. */
export function treeHead(t: TreeHashes, size: number): Uint8Array {
  checkSize('the tree size', size);
  return size === 0 ? EMPTY_ROOT : rangeHash(t, 0, size);
}

/** The inclusion proof of leaf `index` in the tree of `size` leaves (RFC 9162 §2.1.3.1), leaf-side first. */
export function inclusionProof(t: TreeHashes, index: number, size: number): Uint8Array[] {
  checkSize('the tree size', size);
  checkSize('the leaf index', index);
  if (index >= size) throw new RangeError(`leaf ${index} is not in a tree of ${size} leaves`);
  const proof: Uint8Array[] = [];
  let lo = 0;
  let hi = size;
  const sides: Uint8Array[] = [];
  while (hi - lo > 1) {
    const k = split(hi - lo);
    if (index < lo + k) {
      sides.push(rangeHash(t, lo + k, hi));
      hi = lo + k;
    } else {
      sides.push(rangeHash(t, lo, lo + k));
      lo += k;
    }
  }
  for (let i = sides.length - 1; i >= 0; i--) proof.push(sides[i] as Uint8Array);
  return proof;
}

/** The consistency proof from the tree of `first` leaves to the tree of `second` (RFC 9162 §2.1.4.1). */
export function consistencyProof(t: TreeHashes, first: number, second: number): Uint8Array[] {
  checkSize('the first tree size', first);
  checkSize('the second tree size', second);
  if (first > second) throw new RangeError(`a tree of ${first} leaves is not a prefix of one of ${second}`);
  if (first === 0 || first === second) return [];
  const sides: Uint8Array[] = [];
  let m = first;
  let lo = 0;
  let hi = second;
  let whole = true;
  for (;;) {
    const n = hi - lo;
    if (m === n) {
      if (!whole) sides.push(rangeHash(t, lo, hi));
      break;
    }
    const k = split(n);
    if (m <= k) {
      sides.push(rangeHash(t, lo + k, hi));
      hi = lo + k;
    } else {
      sides.push(rangeHash(t, lo, lo + k));
      lo += k;
      m -= k;
      whole = false;
    }
  }
  return sides.reverse();
}

const odd = (x: number) => x % 2 === 1;
const half = (x: number) => Math.floor(x / 2);

function same(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(b);
}

/**
 * Whether `proof` shows the leaf whose hash is `leaf` at `index` in the tree of `size` leaves whose
 * head is `root` (RFC 9162 §2.1.3.2).
 */
export function verifyInclusion(index: number, size: number, leaf: Uint8Array, proof: readonly Uint8Array[], root: Uint8Array): boolean {
  if (!Number.isSafeInteger(index) || !Number.isSafeInteger(size) || index < 0 || index >= size) return false;
  let fn = index;
  let sn = size - 1;
  let r: Uint8Array = leaf;
  for (const p of proof) {
    if (p.length !== HASH_SIZE || sn === 0) return false;
    if (odd(fn) || fn === sn) {
      r = nodeHash(p, r);
      if (!odd(fn))
        while (!odd(fn) && fn !== 0) {
          fn = half(fn);
          sn = half(sn);
        }
    } else r = nodeHash(r, p);
    fn = half(fn);
    sn = half(sn);
  }
  return sn === 0 && same(r, root);
}

/**
 * Whether `proof` shows the tree of `first` leaves with head `firstRoot` to be a prefix of the tree
 * of `second` leaves with head `secondRoot` (RFC 9162 §2.1.4.2; the empty tree is a prefix of any).
 */
export function verifyConsistency(
  first: number,
  second: number,
  firstRoot: Uint8Array,
  secondRoot: Uint8Array,
  proof: readonly Uint8Array[],
): boolean {
  if (!Number.isSafeInteger(first) || !Number.isSafeInteger(second) || first < 0 || first > second) return false;
  if (proof.some((p) => p.length !== HASH_SIZE)) return false;
  if (first === second) return proof.length === 0 && same(firstRoot, secondRoot);
  if (first === 0) return proof.length === 0 && same(firstRoot, EMPTY_ROOT);
  const path = levelOf(first) >= 0 ? [firstRoot, ...proof] : [...proof];
  if (path.length === 0) return false;
  let fn = first - 1;
  let sn = second - 1;
  while (odd(fn)) {
    fn = half(fn);
    sn = half(sn);
  }
  let fr = path[0] as Uint8Array;
  let sr = path[0] as Uint8Array;
  for (const c of path.slice(1)) {
    if (sn === 0) return false;
    if (odd(fn) || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      if (!odd(fn))
        while (!odd(fn) && fn !== 0) {
          fn = half(fn);
          sn = half(sn);
        }
    } else sr = nodeHash(sr, c);
    fn = half(fn);
    sn = half(sn);
  }
  return sn === 0 && same(fr, firstRoot) && same(sr, secondRoot);
}

/**
 * A tree held in memory: every complete subtree's hash, kept as leaves are appended (each append
 * hashes the subtrees it completes, one per trailing one bit of the new size).
 */
export class MemoryTree implements TreeHashes {
  readonly #levels: Uint8Array[][] = [[]];

  /** How many leaves the tree holds. */
  get size(): number {
    return (this.#levels[0] as Uint8Array[]).length;
  }

  /** Appends a leaf by its hash (see {@link leafHash}); returns its index. */
  appendLeafHash(hash: Uint8Array): number {
    if (hash.length !== HASH_SIZE) throw new RangeError(`a leaf hash is ${HASH_SIZE} bytes (got ${hash.length})`);
    const index = this.size;
    let level = 0;
    let h = hash;
    let i = index;
    for (;;) {
      const row = (this.#levels[level] ??= []);
      row[i] = h;
      if (!odd(i)) break;
      h = nodeHash(row[i - 1] as Uint8Array, h);
      level++;
      i = half(i);
    }
    return index;
  }

  /** Appends the entry line `line` (without its newline); returns its index. */
  append(line: Uint8Array): number {
    return this.appendLeafHash(leafHash(line));
  }

  hash(level: number, index: number): Uint8Array {
    const h = this.#levels[level]?.[index];
    if (!h) throw new RangeError(`the tree of ${this.size} leaves has no complete subtree at level ${level}, index ${index}`);
    return h;
  }
}
