/**
 * A tree kept as tiles fill (C2SP tlog-tiles): per tile level, the hashes not yet in a full tile.
 * That is all a growing tree needs to hash its next leaves, name each tile as it completes, give
 * the partial tiles of its size and its tree head: at most 255 hashes per level.
 */
import { EMPTY_ROOT, nodeHash } from './merkle.js';
import { TILE_HEIGHT, TILE_WIDTH, type Tile } from './tiles.js';

/** A tile whose 256 hashes are all known, with its bytes. */
export interface FullTile {
  level: number;
  index: number;
  data: Buffer;
}

/** The hash of a complete run of hashes of one level (a power of two of them), hashed pairwise. */
export function subtree(row: readonly Uint8Array[]): Uint8Array {
  let r = row;
  while (r.length > 1) {
    const next: Uint8Array[] = [];
    for (let i = 0; i < r.length; i += 2) next.push(nodeHash(r[i] as Uint8Array, r[i + 1] as Uint8Array));
    r = next;
  }
  return r[0] as Uint8Array;
}

export class TileRows {
  size = 0;
  /** Per tile level, the hashes of that level not yet in a full tile (fewer than 256). */
  levels: Uint8Array[][] = [[]];

  /** Adds the next leaf hash; `full` sees each tile it completes, lowest level first. */
  add(leaf: Uint8Array, full: (t: FullTile) => void): void {
    this.size++;
    let h = leaf;
    for (let level = 0; ; level++) {
      const row = (this.levels[level] ??= []);
      row.push(h);
      if (row.length < TILE_WIDTH) return;
      // 256 hashes of this level: a full tile, and the next level's next hash.
      full({ level, index: Math.floor(this.size / TILE_WIDTH ** (level + 1)) - 1, data: Buffer.concat(row) });
      h = subtree(row);
      this.levels[level] = [];
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
