/**
 * Checking the tree beside a log (SPEC.md section 9.4) against the log's own lines: every tile a
 * monitor would read holds the hashes the entries give, and the tree checkpoint's head is theirs.
 * What a tile or checkpoint changed on disk, or a log changed under them, comes out here, naming
 * the first thing that differs.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { sha256Hex } from './format.js';
import { eachLine } from './log-tree.js';
import { leafHash } from './merkle.js';
import { openNote, parseTreeCheckpoint, type TreeCheckpoint } from './note.js';
import { TileRows } from './tile-rows.js';
import { tileFiles, tilePath } from './tiles.js';

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
 * is (the tiles are still checked against the entries).
 */
export async function verifyTiles(path: string, o: { verifierKeys?: readonly string[] } = {}): Promise<TilesVerdict> {
  const dir = `${path}.tlog`;
  let cp: TreeCheckpoint | undefined;
  let checkpoint: TilesVerdict['checkpoint'] = 'none';
  const note = await readFile(join(dir, 'checkpoint'), 'utf8').catch(() => undefined);
  const bad = (size: number, tiles: number, what: string, reason: string): TilesVerdict => ({
    ok: false,
    size,
    tiles,
    checkpoint,
    first_bad: { what, reason },
  });
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
  let first: { what: string; reason: string } | undefined;
  // Each tile's digest, not its bytes, until it is read back: memory stays small for a long log.
  const pending: { path: string; digest: string; level: number; index: number; width: number }[] = [];
  const check = async () => {
    for (const t of pending.splice(0)) {
      if (first) return;
      tiles++;
      // A partial tile gone because its tile filled since: the full tile's first hashes (tiles.ts).
      const on =
        t.width < 256
          ? tileFiles(dir)({ level: t.level, index: t.index, width: t.width })
          : await readFile(join(dir, t.path)).catch(() => undefined);
      if (!on) first = { what: t.path, reason: 'missing' };
      else if (sha256Hex(on) !== t.digest) first = { what: t.path, reason: 'holds other hashes than the log’s entries give' };
    }
  };
  let size: number;
  try {
    size = await eachLine(path, cp?.size ?? Number.MAX_SAFE_INTEGER, (_, line) => {
      rows.add(leafHash(line), (t) =>
        pending.push({
          path: tilePath({ level: t.level, index: t.index, width: 256 }),
          digest: sha256Hex(t.data),
          level: t.level,
          index: t.index,
          width: 256,
        }),
      );
    });
  } catch (err) {
    return bad(rows.size, tiles, 'checkpoint', (err as Error).message);
  }
  // Full tiles are few (one per 256 entries): read once the lines are, in order.
  await check();
  if (first) return { ok: false, size, tiles, checkpoint, first_bad: first };
  if (cp) {
    if (!Buffer.from(rows.root()).equals(Buffer.from(cp.root)))
      return bad(size, tiles, 'checkpoint', `its tree head is not the head of the log's first ${cp.size} entries`);
    for (const { tile, data } of rows.partials())
      pending.push({ path: tilePath(tile), digest: sha256Hex(data), level: tile.level, index: tile.index, width: tile.width });
    await check();
    if (first) return { ok: false, size, tiles, checkpoint, first_bad: first };
  }
  return { ok: true, size, tiles, checkpoint };
}
