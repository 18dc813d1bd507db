/**
 * The Merkle tree's hashes as tiles (C2SP tlog-tiles): what a log serves so that a monitor, a
 * witness or a verifier reads any proof's hashes without the log's entries.
 *
 * A tile holds up to 256 consecutive hashes of one tree level: tile level `L` holds level `8·L`
 * of the tree, tile `N` its nodes `256·N … 256·N + 255`. A full tile is at `tile/<L>/<N>`; the
 * rightmost tile of a level, while it holds `W < 256` hashes, is at `tile/<L>/<N>.p/<W>`. `N` is
 * written in groups of three digits, all but the last prefixed with `x` (`x001/x234/067`). A
 * tile's bytes are its hashes, 32 bytes each, in order.
 */
import { closeSync, constants, fstatSync, fsyncSync, mkdirSync, openSync, readSync, renameSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { HASH_SIZE, nodeHash, type TreeHashes } from './merkle.js';

/** Tree levels per tile, and hashes in a full tile. */
export const TILE_HEIGHT = 8;
export const TILE_WIDTH = 256;

/** One tile: its tile level, index, and how many hashes it holds (256 for a full tile). */
export interface Tile {
  level: number;
  index: number;
  width: number;
}

/** The path of a tile under the log's tile root (`tile/0/x001/x234/067.p/5`). */
export function tilePath(t: Tile): string {
  let n = t.index;
  let path = String(n % 1000).padStart(3, '0');
  while (n >= 1000) {
    n = Math.floor(n / 1000);
    path = `x${String(n % 1000).padStart(3, '0')}/${path}`;
  }
  return `tile/${t.level}/${path}${t.width === TILE_WIDTH ? '' : `.p/${t.width}`}`;
}

/** How many nodes tree level `level` has in a tree of `size` leaves (complete subtrees only). */
function nodesAt(size: number, level: number): number {
  return Math.floor(size / 2 ** level);
}

/**
 * The tiles a tree of `size` leaves has that a tree of `from` leaves did not (all of them when
 * `from` is 0): the new full tiles, and each level's partial rightmost tile when it changed.
 */
export function newTiles(from: number, size: number): Tile[] {
  if (!Number.isSafeInteger(from) || !Number.isSafeInteger(size) || from < 0 || from > size)
    throw new RangeError(`no tiles from a tree of ${from} leaves to one of ${size}`);
  const out: Tile[] = [];
  for (let level = 0; nodesAt(size, TILE_HEIGHT * level) > 0; level++) {
    const had = nodesAt(from, TILE_HEIGHT * level);
    const has = nodesAt(size, TILE_HEIGHT * level);
    for (let n = Math.floor(had / TILE_WIDTH); n < Math.floor(has / TILE_WIDTH); n++) out.push({ level, index: n, width: TILE_WIDTH });
    const width = has % TILE_WIDTH;
    if (width > 0 && has !== had) out.push({ level, index: Math.floor(has / TILE_WIDTH), width });
  }
  return out;
}

/** A tile's bytes: its hashes, read from `t`. */
export function tileData(hashes: TreeHashes, tile: Tile): Buffer {
  const out = Buffer.alloc(tile.width * HASH_SIZE);
  for (let i = 0; i < tile.width; i++) out.set(hashes.hash(TILE_HEIGHT * tile.level, tile.index * TILE_WIDTH + i), i * HASH_SIZE);
  return out;
}

/**
 * Writes the tiles a tree of `size` leaves has that one of `from` did not, under `root`: each
 * through a temporary file, synced, renamed into place, and its directory synced, so a tile
 * that is there is whole. A tile already there is written again only when partial.
 */
export function writeTiles(root: string, hashes: TreeHashes, from: number, size: number): Tile[] {
  const tiles = newTiles(from, size);
  const dirs = new Set<string>();
  for (const tile of tiles) {
    const file = join(root, tilePath(tile));
    mkdirSync(dirname(file), { recursive: true });
    const tmp = `${file}.tmp-${process.pid}`;
    const fd = openSync(tmp, 'w', 0o644);
    try {
      writeSync(fd, tileData(hashes, tile));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, file);
    dirs.add(dirname(file));
  }
  for (const d of dirs) {
    const fd = openSync(d, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }
  return tiles;
}

/** The bytes of a full tile. */
const TILE_BYTES = TILE_WIDTH * HASH_SIZE;

/**
 * Reads the tile file `file` into `into` (at most its length) and returns how many bytes it
 * holds; undefined when there is no such file. Anything but a regular file there (a FIFO, a
 * device, a directory) throws rather than being read: whoever can write the tree's directory
 * cannot make a reader wait forever.
 */
export function readTileFile(file: string, into: Buffer): number | undefined {
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  try {
    if (!fstatSync(fd).isFile())
      throw new Error(`${file} is not a regular file: remove it (the log's writer rebuilds the tree from the entries)`);
    let n = 0;
    for (let r = 1; r > 0 && n < into.length; n += r) r = readSync(fd, into, n, into.length - n, n);
    return n;
  } finally {
    closeSync(fd);
  }
}

/** Reads a tile's bytes, or undefined when the store has no such tile. */
export type TileSource = (tile: Tile) => Uint8Array | undefined;

/**
 * Tiles as files under `root` (what {@link writeTiles} and a log's tree write). A partial tile
 * that is gone because its tile has since filled is read as the first hashes of the full tile
 * (C2SP tlog-tiles), so a reader of an older size is not caught out by the log growing.
 */
export function tileFiles(root: string): TileSource {
  const read = (path: string) => {
    const buf = Buffer.alloc(TILE_BYTES + 1);
    const n = readTileFile(join(root, path), buf);
    return n === undefined ? undefined : buf.subarray(0, n);
  };
  return (tile) => {
    const data = read(tilePath(tile));
    if (data || tile.width === TILE_WIDTH) return data;
    return read(tilePath({ ...tile, width: TILE_WIDTH }))?.subarray(0, tile.width * HASH_SIZE);
  };
}

/**
 * The complete subtrees of a tree of `size` leaves, read from its tiles (full ones, and the
 * partial ones of that size): a node above a tile's level is hashed from that tile's hashes.
 * A tile missing or of the wrong length throws, naming it.
 */
export class TileHashes implements TreeHashes {
  readonly size: number;
  readonly #read: TileSource;
  readonly #cache = new Map<string, Uint8Array>();

  constructor(read: TileSource, size: number) {
    this.#read = read;
    this.size = size;
  }

  #tile(level: number, index: number): Uint8Array {
    const has = nodesAt(this.size, TILE_HEIGHT * level);
    const full = (index + 1) * TILE_WIDTH <= has;
    const tile: Tile = { level, index, width: full ? TILE_WIDTH : has - index * TILE_WIDTH };
    if (tile.width <= 0) throw new RangeError(`a tree of ${this.size} leaves has no tile ${level}/${index}`);
    const key = tilePath(tile);
    const hit = this.#cache.get(key);
    if (hit) return hit;
    const data = this.#read(tile);
    if (!data) throw new Error(`tile ${key} is missing`);
    if (data.length !== tile.width * HASH_SIZE) throw new Error(`tile ${key} is ${data.length} bytes, not ${tile.width * HASH_SIZE}`);
    if (this.#cache.size > 64) this.#cache.clear();
    this.#cache.set(key, data);
    return data;
  }

  hash(level: number, index: number): Uint8Array {
    if (nodesAt(this.size, level) <= index)
      throw new RangeError(`a tree of ${this.size} leaves has no complete subtree at level ${level}, index ${index}`);
    const tileLevel = Math.floor(level / TILE_HEIGHT);
    const up = level - TILE_HEIGHT * tileLevel;
    // The node covers 2^up consecutive hashes of its tile's level.
    const first = index * 2 ** up;
    const data = this.#tile(tileLevel, Math.floor(first / TILE_WIDTH));
    const at = first % TILE_WIDTH;
    let row: Uint8Array[] = [];
    for (let i = 0; i < 2 ** up; i++) row.push(data.subarray((at + i) * HASH_SIZE, (at + i + 1) * HASH_SIZE));
    while (row.length > 1) {
      const next: Uint8Array[] = [];
      for (let i = 0; i < row.length; i += 2) next.push(nodeHash(row[i] as Uint8Array, row[i + 1] as Uint8Array));
      row = next;
    }
    return row[0] as Uint8Array;
  }
}
