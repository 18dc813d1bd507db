/**
 * The leaf hashes of a log's entries (SPEC.md section 9), read in large chunks and hashed on two
 * threads when the log is large: what checking a tree against its log costs is mostly hashing.
 */
import { type FileHandle, stat } from 'node:fs/promises';
import type { ChunkLeaves, TileFolds } from './leaves.js';
import { MAX_LINE_BYTES } from './lines.js';
import { eachSegment } from './log-tree.js';
import { listSealedSegments, logFiles } from './segments.js';
import { TileRows } from './tile-rows.js';
import { TILE_WIDTH } from './tiles.js';
import { ChunkPool, snapshotBytes, startHelper } from './verify-pool.js';

/**
 * Calls `onRun` with the leaf hashes of the first `entries` entries of the log at `path` (every
 * segment, in order), a run of them at a time (`count` hashes one after another), and returns
 * how many there were. Lines are read as `eachLine` reads them: complete lines only, a segment's
 * reading ending at a line past 16 MiB. Fewer than `entries` asked for (when not all) is
 * `log_corrupt`. `tiles` gives the hashes of the full tiles of leaves inside a run, hashed with
 * the leaves (see chunkLeaves). With `threads: 2` a large log is hashed on a helper thread as well.
 */
export async function eachLeafRun(
  path: string,
  entries: number,
  onRun: (hashes: Buffer, count: number, tiles?: TileFolds) => void | Promise<void>,
  o: { threads?: 1 | 2 } = {},
): Promise<number> {
  const files = logFiles(path);
  const sealed = await listSealedSegments(files);
  const activeSize = (await stat(files.active).catch(() => ({ size: 0 }))).size;
  const helper = o.threads === 2 ? await startHelper(await snapshotBytes({ sealed, activeSize }), []) : undefined;
  const pool = new ChunkPool(helper);
  try {
    return await eachSegment(path, entries, (fh, before) => segmentLeaves(fh, pool, before, entries, onRun));
  } finally {
    await pool.close();
  }
}

/** Bytes read per chunk: a few milliseconds of hashing, so that the two threads finish close together. */
const READ_BYTES = 1 << 20;
/** Room before each chunk's bytes for the partial line carried from the chunk before. */
const HEADROOM = 256 << 10;
/** Chunks read ahead of the one being handed out, so that neither thread waits for the disk. */
const READ_AHEAD = 3;

/** One segment's leaves, after the `n` entries before it; returns the count past them. */
async function segmentLeaves(
  fh: FileHandle,
  pool: ChunkPool,
  n: number,
  entries: number,
  onRun: (hashes: Buffer, count: number, tiles?: TileFolds) => void | Promise<void>,
): Promise<number> {
  const { size } = await fh.stat();
  // Chunks are hashed in file order, some on the helper; their hashes are handed on in order.
  const queue: Promise<ChunkLeaves>[] = [];
  const deliver = async (keep: number) => {
    while (queue.length > keep) {
      const r = await (queue.shift() as Promise<ChunkLeaves>);
      const take = Math.min(r.count, entries - n);
      if (take > 0) await onRun(r.hashes, take, r.tiles);
      n += take;
    }
  };
  // Each read is of a fixed span of the file, so several are in flight at once. Its bytes land
  // after a spare byte and some headroom; the partial line carried from the chunk before is put
  // in the headroom, just before them, and the spare byte before that holds the first line's
  // leaf prefix while it is hashed.
  let next = 0;
  const reads: Promise<{ buf: Buffer; bytesRead: number; asked: number; last: boolean }>[] = [];
  const readAhead = () => {
    while (reads.length < READ_AHEAD && next < size) {
      const at = next;
      next += READ_BYTES;
      const last = next >= size;
      const asked = Math.min(READ_BYTES, size - at);
      const buf = pool.take(1 + HEADROOM + READ_BYTES, 1 + HEADROOM + READ_BYTES);
      reads.push(fh.read(buf, 1 + HEADROOM, asked, at).then(({ bytesRead }) => ({ buf, bytesRead, asked, last })));
    }
  };
  let carry = Buffer.alloc(0);
  let dispatched = n; // entries in the chunks handed out so far
  try {
    readAhead();
    while (reads.length > 0) {
      const { buf: read, bytesRead, asked, last } = await (reads.shift() as (typeof reads)[number]);
      if (bytesRead === 0) {
        pool.give(read);
        break;
      }
      // A span read short is the file's end now (cut while it is read): no span after it is
      // joined to it (those read ahead are dropped); the lines complete here are its last.
      const short = bytesRead < asked;
      if (!short) readAhead();
      let buf = read;
      let from = 1 + HEADROOM - carry.length;
      if (carry.length <= HEADROOM) carry.copy(buf, from);
      else {
        // A line longer than the headroom: this chunk gets a buffer of its own.
        buf = Buffer.from(new ArrayBuffer(1 + carry.length + bytesRead));
        carry.copy(buf, 1);
        read.copy(buf, 1 + carry.length, 1 + HEADROOM, 1 + HEADROOM + bytesRead);
        pool.give(read);
        from = 1;
      }
      const filled = buf === read ? 1 + HEADROOM + bytesRead : buf.length;
      const nl = buf.lastIndexOf(0x0a, filled - 1);
      if (nl < from) {
        carry = Buffer.from(buf.subarray(from, filled));
        if (buf === read) pool.give(read);
        if (carry.length >= MAX_LINE_BYTES || short) break; // past 16 MiB, or cut: the segment's reading ends here
        continue;
      }
      const first = dispatched;
      // Counted before the chunk is handed on: a buffer moved to the helper reads as empty here.
      // The chunk ends at the last tile boundary inside it when what follows fits the headroom,
      // so that every full tile is folded by whichever thread hashed its leaves.
      let cut = nl;
      let lines = 0;
      let atBoundary = -1;
      let boundaryLines = 0;
      for (let i = buf.indexOf(0x0a, from); i >= 0 && i <= nl; i = buf.indexOf(0x0a, i + 1)) {
        lines++;
        if ((first + lines) % TILE_WIDTH === 0) {
          atBoundary = i;
          boundaryLines = lines;
        }
      }
      if (!short && !last && atBoundary >= 0 && filled - (atBoundary + 1) <= HEADROOM) {
        cut = atBoundary;
        lines = boundaryLines;
      }
      dispatched += lines;
      carry = Buffer.from(buf.subarray(cut + 1, filled));
      queue.push(pool.leaves(buf, from, cut + 1, first));
      // Results wait to be handed on in order, while the helper works through its queue.
      await deliver(pool.leafWindow);
      if (n >= entries || short) break;
    }
  } finally {
    // Never close the file under a read in flight.
    await Promise.all(reads.map((r) => r.catch(() => undefined)));
  }
  await deliver(0);
  return n;
}

/**
 * The tree head of the first `entries` entries of the log at `path` (all of them by default),
 * in bounded memory: what a checkpoint of that size must hold. Fewer entries than asked for is
 * `log_corrupt`.
 */
export async function logTreeHead(
  path: string,
  entries = Number.MAX_SAFE_INTEGER,
  o: { threads?: 1 | 2 } = {},
): Promise<{ size: number; root: Uint8Array }> {
  const rows = new TileRows();
  const size = await eachLeafRun(path, entries, (hashes, count, tiles) => rows.addRun(hashes, count, () => {}, tiles), o);
  return { size, root: rows.root() };
}
