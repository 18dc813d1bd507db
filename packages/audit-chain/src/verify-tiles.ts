/**
 * Checking the tree beside a log (SPEC.md section 9.4) against the log's own lines: every tile a
 * monitor would read holds the hashes the entries give, and the tree checkpoint's head is theirs.
 * What a tile or checkpoint changed on disk, or a log changed under them, comes out here, naming
 * the first thing that differs.
 */
import { join } from 'node:path';
import { eachLeafRun } from './leaf-scan.js';
import { HASH_SIZE } from './merkle.js';
import { openNote, parseTreeCheckpoint, type TreeCheckpoint } from './note.js';
import { readRegularFile } from './regular-file.js';
import { type FullTile, TileRows } from './tile-rows.js';
import { readTileFile, TILE_WIDTH, tileFiles, tilePath } from './tiles.js';

/** Ends the scan of the entries at the first tile that differs. */
class TileMismatch extends Error {}

/** What {@link verifyTiles} found. */
export interface TilesVerdict {
  ok: boolean;
  /** Leaves checked: the tree checkpoint's size, else every entry of the log. */
  size: number;
  /** Tiles compared byte for byte. */
  tiles: number;
  /** Whether a tree checkpoint was checked: signed by a key given, read without keys, or none there. */
  checkpoint: 'signed' | 'unverified' | 'none';
  /** The first thing that differs: a tile's path, or `checkpoint`, and why. */
  first_bad?: { what: string; reason: string };
}

/**
 * Checks the tiles and the tree checkpoint under `<path>.tlog/` against the log at `path`. With
 * `verifierKeys`, the checkpoint must be signed by one of them; without, its text is taken as it
 * is (the tiles are still checked against the entries). With `threads: 2` a large log's entries
 * are hashed on a second thread as well.
 */
export async function verifyTiles(path: string, o: { verifierKeys?: readonly string[]; threads?: 1 | 2 } = {}): Promise<TilesVerdict> {
  const dir = `${path}.tlog`;
  let cp: TreeCheckpoint | undefined;
  let checkpoint: TilesVerdict['checkpoint'] = 'none';
  // The tree's own file: read only as a regular file (a FIFO there is reported, never waited on).
  let note: string | undefined;
  let unreadable: string | undefined;
  try {
    note = (await readRegularFile(join(dir, 'checkpoint'))).toString('utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') unreadable = (err as Error).message;
  }
  const bad = (size: number, tiles: number, what: string, reason: string): TilesVerdict => ({
    ok: false,
    size,
    tiles,
    checkpoint,
    first_bad: { what, reason },
  });
  if (unreadable !== undefined) return bad(0, 0, 'checkpoint', `cannot be read: ${unreadable}`);
  if (note !== undefined) {
    let text: string;
    if (o.verifierKeys && o.verifierKeys.length > 0) {
      const opened = openNote(note, o.verifierKeys);
      if (!opened.ok) return bad(0, 0, 'checkpoint', opened.message);
      text = opened.text;
      checkpoint = 'signed';
    } else {
      const end = note.indexOf('\n\n');
      text = end < 0 ? note : note.slice(0, end + 1);
      checkpoint = 'unverified';
    }
    const parsed = parseTreeCheckpoint(text);
    if (typeof parsed === 'string') return bad(0, 0, 'checkpoint', parsed);
    cp = parsed;
  } else if (o.verifierKeys && o.verifierKeys.length > 0) {
    return bad(0, 0, 'checkpoint', `there is no tree checkpoint (${join(dir, 'checkpoint')}) to check against the keys given`);
  }
  const rows = new TileRows();
  let tiles = 0;
  // Each tile is read and compared as the entries complete it (the reads are small and few, one
  // per 256 entries): memory stays small for a long log, and the first that differs is the lowest.
  let first: { what: string; reason: string } | undefined;
  const read = tileFiles(dir);
  const compare = (tile: { level: number; index: number; width: number }, expect: Buffer) => {
    tiles++;
    // A partial tile gone because its tile filled since is read as the full tile's first hashes.
    let on: Uint8Array | undefined;
    try {
      on = tile.width === TILE_WIDTH ? readFull(join(dir, tilePath(tile))) : read(tile);
    } catch (err) {
      first = { what: tilePath(tile), reason: `cannot be read: ${(err as Error).message}` };
      return;
    }
    if (!on) first = { what: tilePath(tile), reason: 'missing' };
    else if (!Buffer.from(on.buffer, on.byteOffset, on.byteLength).equals(expect))
      first = { what: tilePath(tile), reason: 'holds other hashes than the log’s entries give' };
  };
  let size: number;
  try {
    size = await eachLeafRun(
      path,
      cp?.size ?? Number.MAX_SAFE_INTEGER,
      (hashes, count, folded) => {
        // Tiles are compared as they complete; the first that differs ends the check.
        const onFull = (t: FullTile) => {
          if (!first) compare({ level: t.level, index: t.index, width: 256 }, t.data);
        };
        rows.addRun(hashes, count, onFull, folded);
        if (first) throw new TileMismatch();
      },
      { threads: o.threads ?? 1 },
    );
  } catch (err) {
    if (err instanceof TileMismatch) return { ok: false, size: rows.size, tiles, checkpoint, first_bad: first };
    return bad(rows.size, tiles, 'checkpoint', (err as Error).message);
  }
  if (cp) {
    if (!Buffer.from(rows.root()).equals(Buffer.from(cp.root)))
      return bad(size, tiles, 'checkpoint', `its tree head is not the head of the log's first ${cp.size} entries`);
    for (const { tile, data } of rows.partials()) if (!first) compare(tile, data);
    if (first) return { ok: false, size, tiles, checkpoint, first_bad: first };
  }
  return { ok: true, size, tiles, checkpoint };
}

/** A full tile's bytes, read into one buffer reused for every tile (each is compared, then dropped). */
const fullTile = Buffer.alloc(TILE_WIDTH * HASH_SIZE + 1);
function readFull(file: string): Buffer | undefined {
  // One byte more than a tile: a longer file is not the tile.
  const n = readTileFile(file, fullTile);
  return n === undefined ? undefined : fullTile.subarray(0, n);
}
