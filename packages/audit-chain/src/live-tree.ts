/**
 * The open log's Merkle tree, kept as it grows (SPEC.md section 9.4): every entry written is a
 * leaf; each run of 256 hashes of one tile level is written as a full tile as soon as it is
 * complete; at each checkpoint the partial tiles of that size and a signed tree checkpoint are
 * written, after every tile they need is durable. The tree needs no state of its own: what it
 * holds is rebuilt from the log (the entries are the truth), or, at a checkpoint the log's key
 * signed, from that checkpoint's tiles, whose tree head must equal the signed one.
 *
 * Every method runs under the writers' lock, so one writer at a time touches the tiles.
 */
import { constants as fsc } from 'node:fs';
import { mkdir, open, readdir, rename, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { syncDir, type Tail } from './active-segment.js';
import { AuditError, describeCause } from './errors.js';
import { scanLines } from './lines.js';
import { HASH_SIZE, leafHash } from './merkle.js';
import { formatTreeCheckpoint, type NoteSigner, openNote, parseTreeCheckpoint, signNote } from './note.js';
import { openRegular, readRegularFile } from './regular-file.js';
import { type LogFiles, segmentName } from './segments.js';
import { type FullTile, TileRows } from './tile-rows.js';
import { TILE_WIDTH, tilePath } from './tiles.js';

/** A temporary tile file older than this is a dead writer's leftover. */
const STALE_TMP_MS = 60_000;
let tmpCount = 0;

/** Where the tree's files live: `<log>.tlog/checkpoint` and `<log>.tlog/tile/…`. */
export function tlogDir(files: LogFiles): string {
  return `${files.active}.tlog`;
}

/** Where the tree's newest checkpoint is written (C2SP tlog-tiles' `checkpoint`). */
export function tlogCheckpointPath(files: LogFiles): string {
  return join(tlogDir(files), 'checkpoint');
}

/** Which log the tree's checkpoints name, and who signs them. */
export interface TreeSigning {
  origin: string;
  signer: NoteSigner | undefined;
  /** The signer's verifier key (C2SP signed-note), to read back what it signed. */
  vkey: string | undefined;
}

/** A position in the log: the byte just past the last line counted, in segment `segment`. */
interface Position {
  segment: number;
  offset: number;
}

export class LiveTree {
  #rows = new TileRows();
  #pos: Position = { segment: 1, offset: 0 };
  /** Full tiles being written in the background, and the first failure among them. */
  #writing: Promise<void> = Promise.resolve();
  #failed: AuditError | undefined;
  /** Full tiles completed and not yet written. */
  #complete: FullTile[] = [];
  /** Tile files written since the last checkpoint, not yet synced. */
  #unsynced = new Set<string>();
  #madeDirs = new Set<string>();
  /** Partial versions of tiles now full, removed once the full tile is synced. */
  #superseded: string[] = [];
  /** Lines were written that this tree did not see at its position: read the log before trusting it. */
  #behind = false;
  readonly #dir: string;

  constructor(
    private readonly files: LogFiles,
    private readonly fileMode: number,
  ) {
    this.#dir = tlogDir(files);
  }

  get size(): number {
    return this.#rows.size;
  }

  /**
   * Lines written to segment `segment` from byte `start` (each with its newline), in order, with
   * their leaf hashes. Counted when they follow what the tree holds; otherwise the tree reads the
   * log at its next {@link catchUp}.
   */
  written(segment: number, start: number, lines: readonly Buffer[], leaves: readonly Buffer[]): void {
    if (this.#behind || segment !== this.#pos.segment || start !== this.#pos.offset) {
      this.#behind = true;
      return;
    }
    for (const [i, line] of lines.entries()) {
      this.#addLeaf(leaves[i] as Buffer);
      this.#pos.offset += line.length;
    }
  }

  /** Segment `sealed` was sealed at `size` bytes and the next one started empty. */
  rotated(sealed: number, size: number): void {
    if (!this.#behind && this.#pos.segment === sealed && this.#pos.offset === size) this.#pos = { segment: sealed + 1, offset: 0 };
    else this.#behind = true;
  }

  /**
   * Brings the tree up to the log's tail `t` (the lines other writers appended, or this one wrote
   * out of order), then writes the full tiles completed. A log that does not continue what the
   * tree holds (shorter, or counting other entries) is read again from its first entry.
   */
  async catchUp(t: Tail): Promise<void> {
    if (this.#failed) {
      await this.#writing;
      this.#failed = undefined;
      this.#reset();
    }
    if (this.#pos.segment !== t.segment || this.#pos.offset !== t.size || this.#rows.size !== t.seq) {
      try {
        await this.#read(t);
      } catch (err) {
        // Half a read leaves the tree nowhere in particular: start again from the first entry,
        // now if the log did not continue the tree, else at the next catch-up.
        this.#reset();
        this.#behind = true;
        if (!(err instanceof AuditError) || err.code !== 'log_corrupt') throw err;
        await this.#read(t).catch((again: unknown) => {
          this.#reset();
          throw again;
        });
      }
    }
    this.#behind = false;
    this.settle();
  }

  /**
   * Starts writing the full tiles completed so far, in the background: file creation costs what a
   * batch of appends should not wait for. Whole tiles are the same bytes whoever writes them, so
   * writers need not hold the lock for it; {@link publish} waits for them before syncing. A tile
   * that cannot be written is not lost: the tree starts again from the log's first entry at the
   * next {@link catchUp}, rewriting every tile.
   */
  settle(): void {
    if (this.#complete.length === 0) return;
    const done = this.#complete;
    this.#complete = [];
    this.#writing = this.#writing.then(async () => {
      try {
        for (const tile of done) {
          const full = tilePath({ level: tile.level, index: tile.index, width: TILE_WIDTH });
          await this.#writeTile(full, tile.data);
          this.#superseded.push(join(this.#dir, `${full}.p`));
        }
      } catch (err) {
        this.#failed = new AuditError('write_failed', `cannot write a tile under ${this.#dir}: ${describeCause(err)}`, { cause: err });
      }
    });
  }

  /** Waits for the tiles being written. */
  drain(): Promise<void> {
    return this.#writing;
  }

  /**
   * Publishes the tree at the log's tail `t`: its partial tiles, every tile written since the last
   * checkpoint synced, then the checkpoint (signed when a signer is set) replacing the last one.
   * Returns the signed note, or undefined when unsigned.
   */
  async publish(t: Tail, signing: TreeSigning): Promise<string | undefined> {
    await this.catchUp(t);
    await this.#writing;
    // A tile failed meanwhile: every tile again from the log, now.
    if (this.#failed) await this.catchUp(t);
    await this.#writing;
    if (this.#failed) throw this.#failed;
    for (const { tile, data } of this.#rows.partials()) await this.#writeTile(tilePath(tile), data);
    const dirs = new Set<string>();
    for (const file of this.#unsynced) {
      await syncFile(file);
      dirs.add(dirname(file));
    }
    for (const d of dirs) await syncDir(d);
    this.#unsynced.clear();
    // A reader of an older checkpoint reads the first hashes of the full tile instead (C2SP tlog-tiles).
    for (const p of this.#superseded.splice(0)) await rm(p, { recursive: true, force: true });
    if (!signing.signer) return undefined;
    const note = signNote(formatTreeCheckpoint({ origin: signing.origin, size: this.#rows.size, root: this.#rows.root() }), [
      signing.signer,
    ]);
    await mkdir(this.#dir, { recursive: true });
    await writeDurably(tlogCheckpointPath(this.files), note, this.fileMode);
    return note;
  }

  /** The tree head over every leaf the tree holds. */
  root(): Uint8Array {
    return this.#rows.root();
  }

  /**
   * Starts the tree at the log's checkpoint of `entries` entries ending at `at`, from that size's
   * tiles, when the tree checkpoint beside it is of that size and signed by `signing` (or, for a
   * log without a key, when the tiles are simply there); else from the log's first entry.
   * Returns how it started.
   */
  async start(
    t: Tail,
    at: { entries: number; segment: number; offset: number } | undefined,
    signing: TreeSigning,
  ): Promise<'tiles' | 'log'> {
    await this.#sweep();
    if (at && at.entries > 0 && at.entries <= t.seq) {
      const loaded = await this.#loadTiles(at.entries).catch(() => undefined);
      if (loaded) {
        this.#rows = Object.assign(new TileRows(), { levels: loaded, size: at.entries });
        let trusted = !signing.vkey;
        if (signing.vkey) {
          const note = await readRegularFile(tlogCheckpointPath(this.files)).catch(() => undefined);
          const opened = note ? openNote(note, [signing.vkey]) : undefined;
          const cp = opened?.ok ? parseTreeCheckpoint(opened.text) : undefined;
          trusted =
            typeof cp === 'object' && cp.origin === signing.origin && cp.size === at.entries && Buffer.from(cp.root).equals(this.root());
        }
        if (trusted) {
          this.#pos = { segment: at.segment, offset: at.offset };
          await this.catchUp(t);
          return 'tiles';
        }
      }
    }
    // Partial tiles of earlier sizes are not trusted either, nor the checkpoint over them: the
    // next checkpoint writes its own (until then a reader finds no checkpoint, not a stale one).
    await this.#sweep(true);
    await rm(tlogCheckpointPath(this.files), { force: true });
    this.#reset();
    await this.catchUp(t);
    return 'log';
  }

  // ---- internals -------------------------------------------------------------------------

  #reset(): void {
    this.#rows = new TileRows();
    this.#pos = { segment: 1, offset: 0 };
    this.#complete = [];
  }

  #addLeaf(leaf: Uint8Array): void {
    this.#rows.add(leaf, (t) => this.#complete.push(t));
  }

  /** Reads the log's lines from the tree's position to the tail `t`, each a leaf. */
  async #read(t: Tail): Promise<void> {
    const corrupt = (why: string) => new AuditError('log_corrupt', `the Merkle tree of ${this.files.active} cannot follow the log: ${why}`);
    if (this.#pos.segment > t.segment || (this.#pos.segment === t.segment && this.#pos.offset > t.size))
      throw corrupt(`it is shorter than the ${this.#rows.size} entries the tree holds`);
    for (let seg = this.#pos.segment; seg <= t.segment; seg++) {
      const path = seg === t.segment ? this.files.active : join(this.files.dir, segmentName(this.files.base, seg));
      let fh: Awaited<ReturnType<typeof open>>;
      try {
        fh = await openRegular(path);
      } catch (err) {
        throw corrupt(`segment ${path} cannot be read (${describeCause(err)})`);
      }
      try {
        const end = seg === t.segment ? t.size : (await fh.stat()).size;
        const from = seg === this.#pos.segment ? this.#pos.offset : 0;
        if (from > end) throw corrupt(`segment ${path} is shorter than the tree's position in it`);
        let bad = false;
        const past = await scanLines(fh, from, end, (line) => {
          if (line.torn || line.oversized) {
            bad = true;
            return false;
          }
          this.#addLeaf(leafHash(line.bytes.subarray(0, line.bytes.length - 1)));
          return true;
        });
        if (bad || past !== end) throw corrupt(`segment ${path} ends inside a line`);
        this.#pos = { segment: seg, offset: end };
      } finally {
        await fh.close();
      }
      // Full tiles are written as they come, so a long read holds at most a few in memory.
      this.settle();
      await this.#writing;
    }
    this.#pos = { segment: t.segment, offset: t.size };
    if (this.#rows.size !== t.seq) throw corrupt(`it holds ${t.seq} entries but ${this.#rows.size} lines`);
  }

  /** The pending hashes of each level at `size`, read from that size's tiles. */
  async #loadTiles(size: number): Promise<Uint8Array[][]> {
    const levels: Uint8Array[][] = [];
    for (let level = 0; level === 0 || Math.floor(size / TILE_WIDTH ** level) > 0; level++) {
      const nodes = Math.floor(size / TILE_WIDTH ** level);
      const width = nodes % TILE_WIDTH;
      const row: Uint8Array[] = [];
      if (width > 0) {
        const data = await readRegularFile(join(this.#dir, tilePath({ level, index: Math.floor(nodes / TILE_WIDTH), width })));
        if (data.length !== width * HASH_SIZE) throw new Error('a tile of the wrong length');
        for (let i = 0; i < width; i++) row.push(data.subarray(i * HASH_SIZE, (i + 1) * HASH_SIZE));
      }
      levels.push(row);
    }
    return levels;
  }

  /** Writes one tile through a temporary file of this writer's own, renamed into place (synced at the next checkpoint). */
  async #writeTile(rel: string, data: Buffer): Promise<void> {
    const file = join(this.#dir, rel);
    const dir = dirname(file);
    if (!this.#madeDirs.has(dir)) {
      await mkdir(dir, { recursive: true });
      this.#madeDirs.add(dir);
    }
    const tmp = `${file}.tmp-${process.pid}-${++tmpCount}`;
    await writeFile(tmp, data, { mode: this.fileMode });
    await rename(tmp, file);
    this.#unsynced.add(file);
  }

  /**
   * Removes what a writer killed while writing a tile or checkpoint left (`*.tmp-<pid>…`, once
   * old), and with
   * `partials` every partial tile.
   */
  async #sweep(partials = false): Promise<void> {
    const walk = async (dir: string): Promise<void> => {
      const names = await readdir(dir, { withFileTypes: true }).catch(() => []);
      for (const d of names) {
        const p = join(dir, d.name);
        if (d.isDirectory() && partials && d.name.endsWith('.p')) await rm(p, { recursive: true, force: true });
        else if (d.isDirectory()) await walk(p);
        else {
          const m = /\.tmp-(\d+)(-\d+)?$/.exec(d.name);
          // A checkpoint is written under the lock this writer holds: its leftover is a dead
          // writer's. A tile is written outside it: another writer's may be in flight, so only
          // a dead process's, or an old one, goes.
          if (
            m &&
            (!m[2] ||
              !alive(Number(m[1])) ||
              (await stat(p).then(
                (st) => Date.now() - st.mtimeMs > STALE_TMP_MS,
                () => false,
              )))
          )
            await unlink(p).catch(() => {});
        }
      }
    };
    await walk(this.#dir);
  }
}

/** Whether process `pid` exists on this host (a tile's temporary file names its writer). */
function alive(pid: number): boolean {
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function syncFile(path: string): Promise<void> {
  const fh = await openRegular(path);
  try {
    await fh.datasync();
  } finally {
    await fh.close();
  }
}

/** Writes `text` to `path` through a synced temporary file renamed into place, then syncs the directory. */
export async function writeDurably(path: string, text: string, mode: number): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}`;
  const fh = await open(tmp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_TRUNC, mode);
  try {
    await fh.writeFile(text);
    await fh.datasync();
  } finally {
    await fh.close();
  }
  await rename(tmp, path);
  await syncDir(dirname(path));
}
