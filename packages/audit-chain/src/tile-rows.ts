/**
 * A tree kept as tiles fill (C2SP tlog-tiles): per tile level, the hashes not yet in a full tile.
 * That is all a growing tree needs to hash its next leaves, name each tile as it completes, give
 * the partial tiles of its size and its tree head: at most 255 hashes per level.
 */
import type { TileFolds } from './leaves.js';
import { EMPTY_ROOT, foldRow, HASH_SIZE, nodeHash } from './merkle.js';
import { TILE_HEIGHT, TILE_WIDTH, type Tile } from './tiles.js';

/** A tile whose 256 hashes are all known, with its bytes. */
export interface FullTile {
  level: number;
  index: number;
  data: Buffer;
}

/** The hash of a complete run of hashes of one level (a power of two of them), hashed pairwise. */
export function subtree(row: readonly Uint8Array[]): Uint8Array {
  if (row.length === 1) return row[0] as Uint8Array;
  const b = Buffer.concat([SPARE, ...row]);
  foldRow(b, row.length);
  return b.subarray(1, 1 + HASH_SIZE);
}

const SPARE = Buffer.alloc(1);
/** A full tile's hashes (after a spare byte), folded in place to the next level's hash. */
const folding = Buffer.alloc(1 + TILE_WIDTH * HASH_SIZE);

export class TileRows {
  size = 0;
  /** Per tile level, the hashes of that level not yet in a full tile (fewer than 256). */
  levels: Uint8Array[][] = [[]];

  /** Adds the next leaf hash; `full` sees each tile it completes, lowest level first. */
  add(leaf: Uint8Array, full: (t: FullTile) => void): void {
    this.size++;
    const row = this.levels[0] as Uint8Array[];
    row.push(leaf);
    if (row.length === TILE_WIDTH) {
      this.levels[0] = [];
      this.#full(0, Buffer.concat(row), full);
    }
  }

  /**
   * Adds `count` leaf hashes held one after another in `hashes` (as {@link add} would, one by
   * one); a run that starts a tile hands its 256 hashes on without splitting them up. The tiles
   * `full` sees may be views of `hashes`. `folded` gives the hashes of those tiles where they
   * were computed already (chunkLeaves, on another thread): they are taken as given.
   */
  addRun(hashes: Buffer, count: number, full: (t: FullTile) => void, folded?: TileFolds): void {
    let i = 0;
    while (i < count) {
      const row = this.levels[0] as Uint8Array[];
      if (row.length === 0 && count - i >= TILE_WIDTH) {
        this.size += TILE_WIDTH;
        this.#full(0, hashes.subarray(i * HASH_SIZE, (i + TILE_WIDTH) * HASH_SIZE), full, foldedAt(folded, i));
        i += TILE_WIDTH;
      } else {
        this.add(hashes.subarray(i * HASH_SIZE, (i + 1) * HASH_SIZE), full);
        i++;
      }
    }
  }

  /**
   * A full tile of `level` (its bytes in `data`): hands it on, and adds its hash (`hashed`, when
   * known) one level up.
   */
  #full(level: number, data: Buffer, full: (t: FullTile) => void, hashed?: Uint8Array): void {
    for (let l = level; ; l++) {
      full({ level: l, index: Math.floor(this.size / TILE_WIDTH ** (l + 1)) - 1, data });
      const up = (this.levels[l + 1] ??= []);
      if (l === level && hashed) up.push(hashed);
      else {
        data.copy(folding, 1);
        foldRow(folding, TILE_WIDTH);
        up.push(Buffer.from(folding.subarray(1, 1 + HASH_SIZE)));
      }
      if (up.length < TILE_WIDTH) return;
      this.levels[l + 1] = [];
      data = Buffer.concat(up);
    }
  }

  /** The partial tiles of this size (one per level that has hashes outside a full tile), with their bytes. */
  partials(): { tile: Tile; data: Buffer }[] {
    const out: { tile: Tile; data: Buffer }[] = [];
    for (const [level, row] of this.levels.entries()) {
      if (row.length === 0) continue;
      const index = Math.floor(Math.floor(this.size / TILE_WIDTH ** level) / TILE_WIDTH);
      out.push({ tile: { level, index, width: row.length }, data: Buffer.concat(row) });
    }
    return out;
  }

  /** The tree head over every leaf added. */
  root(): Uint8Array {
    if (this.size === 0) return EMPTY_ROOT;
    // The complete subtrees, largest first: each level's pending hashes, grouped by the bits of
    // their count. Folded from the right they give RFC 6962's tree head.
    const parts: Uint8Array[] = [];
    for (let level = this.levels.length - 1; level >= 0; level--) {
      const row = this.levels[level] as Uint8Array[];
      let at = 0;
      for (let bit = TILE_HEIGHT - 1; bit >= 0; bit--) {
        const n = 2 ** bit;
        if ((row.length & n) === 0) continue;
        parts.push(subtree(row.slice(at, at + n)));
        at += n;
      }
    }
    let h = parts.at(-1) as Uint8Array;
    for (let i = parts.length - 2; i >= 0; i--) h = nodeHash(parts[i] as Uint8Array, h);
    return h;
  }
}

/** The hash `folded` gives for the tile whose leaves start at leaf `i` of the run, if it gives one. */
function foldedAt(folded: TileFolds | undefined, i: number): Uint8Array | undefined {
  if (!folded) return undefined;
  const k = i - folded.start;
  if (k < 0 || k % TILE_WIDTH !== 0) return undefined;
  const at = (k / TILE_WIDTH) * HASH_SIZE;
  return at + HASH_SIZE <= folded.hashes.length ? folded.hashes.subarray(at, at + HASH_SIZE) : undefined;
}
