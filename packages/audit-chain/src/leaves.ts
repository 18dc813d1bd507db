/**
 * The leaf hashes of a run of complete lines (SPEC.md section 9): pure, so a helper thread and
 * the main thread hash chunks of a log the same way.
 */
import { hash } from 'node:crypto';
import { foldRow, HASH_SIZE } from './merkle.js';
import { TILE_WIDTH } from './tiles.js';

/** Leaf hashes, one after another, and how many. */
export interface ChunkLeaves {
  hashes: Buffer;
  count: number;
  /** With the run's first index: the hash of each full tile of leaves inside the run, in order. */
  tiles?: TileFolds;
}

/** The hashes of full level-0 tiles within a run of leaves: the first starts at leaf `start` of the run. */
export interface TileFolds {
  start: number;
  hashes: Buffer;
}

/** A tile's leaf hashes after a spare byte, folded in place (see foldRow). */
const folding = Buffer.alloc(1 + TILE_WIDTH * HASH_SIZE);

/**
 * Hashes each line of `buf[from, end)` (complete lines, each ending in a newline) as a leaf.
 * The byte before each line (`buf[from − 1]` for the first, the previous newline for the next)
 * holds the leaf prefix while that line is hashed and is put back after: no line is copied.
 * With `first`, the index of the first line among the log's entries, it also hashes each full
 * tile of leaves that lies inside the run up to the next level (the tree's other half of the
 * hashing, done here while the leaves are at hand). The buffers returned own their whole
 * ArrayBuffers, so they can move to another thread.
 */
export function chunkLeaves(buf: Buffer, from: number, end: number, first?: number): ChunkLeaves {
  if (from < 1) throw new RangeError('chunkLeaves needs one byte before the first line');
  // The digests as latin1 strings, joined and written once (see merkle.ts); each line is hashed
  // through a plain Uint8Array view, cheaper to make than a Buffer's subarray.
  let digests = '';
  let count = 0;
  let start = from;
  for (let nl = buf.indexOf(0x0a, start); nl >= 0 && nl < end; nl = buf.indexOf(0x0a, start)) {
    const before = buf[start - 1] as number;
    buf[start - 1] = 0;
    digests += hash('sha256', new Uint8Array(buf.buffer, buf.byteOffset + start - 1, nl - start + 1), 'binary');
    buf[start - 1] = before;
    start = nl + 1;
    count++;
  }
  const hashes = Buffer.from(new ArrayBuffer(count * HASH_SIZE));
  hashes.write(digests, 0, count * HASH_SIZE, 'latin1');
  if (first === undefined) return { hashes, count };
  const tileStart = (TILE_WIDTH - (first % TILE_WIDTH)) % TILE_WIDTH;
  const full = Math.max(0, Math.floor((count - tileStart) / TILE_WIDTH));
  const tiles = Buffer.from(new ArrayBuffer(full * HASH_SIZE));
  for (let j = 0; j < full; j++) {
    const at = (tileStart + j * TILE_WIDTH) * HASH_SIZE;
    hashes.copy(folding, 1, at, at + TILE_WIDTH * HASH_SIZE);
    foldRow(folding, TILE_WIDTH);
    folding.copy(tiles, j * HASH_SIZE, 1, 1 + HASH_SIZE);
  }
  return { hashes, count, tiles: { start: tileStart, hashes: tiles } };
}
