import type { FileHandle } from 'node:fs/promises';
import { basename } from 'node:path';
import type { Checkpoint } from './checkpoint.js';
import { AuditError, describeCause } from './errors.js';
import { GENESIS_HASH, isHex64, type VerifyReason } from './format.js';
import { MAX_LINE_BYTES } from './lines.js';
import { openRegular } from './regular-file.js';
import { type LogFiles, segmentName } from './segments.js';
import { brokenLinkMessage, type ChunkResult, type EntryFacts, PREV_NOT_HEX, seqGapMessage } from './verify-chunk.js';
import { CHUNK_BYTES, ChunkPool, snapshotBytes, startHelper } from './verify-pool.js';
import type { FirstBad, UsedCheckpoint, VerifyResult } from './verify-result.js';
import type { Snapshot, WalkStart } from './verify-start.js';

/** What one walk checks, and against which checkpoints. */
export interface WalkOptions {
  /** Start just after this checkpoint's entry, which it vouches for (from the first entry without). */
  from?: Checkpoint;
  /** Checkpoints to compare entries with as they pass (SPEC.md 5.4), sorted by `entries`. */
  used: UsedCheckpoint[];
  /** The most entries a checkpoint records: a log ending before it was truncated. */
  maxCovered: number;
  result: VerifyResult;
  threads: 1 | 2;
  /** False when the caller holds the writers' lock already. */
  takeLock: boolean;
}

/**
 * Walks the segments in order from `start` (the first entry without one) to the end of the
 * snapshot (SPEC.md section 4), stitching chunk results; returns the first bad.
 */
export async function walk(
  files: LogFiles,
  path: string,
  snap: Snapshot,
  start: WalkStart | undefined,
  o: WalkOptions,
): Promise<FirstBad | undefined> {
  const helper =
    o.threads === 2
      ? await startHelper(
          await snapshotBytes(snap),
          o.used.map((c) => c.entries),
        )
      : undefined;
  if (helper) o.result.threads = 2;
  const pool = new ChunkPool(helper);
  try {
    return await new ChainWalk(files, snap, start, o, pool).run(path);
  } finally {
    await pool.close();
  }
}

/** One segment file of the walk. */
interface Segment {
  n: number;
  path: string;
  active: boolean;
}

/** How far the walk is in one segment: lines stitched so far and the last entry verified in it. */
interface SegmentCursor {
  seg: Segment;
  file: string;
  lineBase: number;
  last: EntryFacts | undefined;
}

/** The chain as walked so far (the next entry expected, the next checkpoint to pass) across the segments. */
class ChainWalk {
  private seq: number;
  private prev: string;
  /** Index into `used` of the next checkpoint to compare. */
  private next = 0;
  private readonly marks: Set<number>;

  constructor(
    private readonly files: LogFiles,
    private readonly snap: Snapshot,
    private readonly start: WalkStart | undefined,
    private readonly o: WalkOptions,
    private readonly pool: ChunkPool,
  ) {
    this.seq = (start?.entry.seq ?? 0) + 1;
    this.prev = start?.entry.hash ?? GENESIS_HASH;
    this.marks = new Set(o.used.map((c) => c.entries));
  }

  async run(path: string): Promise<FirstBad | undefined> {
    const { snap, start, files } = this;
    const sealed = snap.sealed;
    const segs: Segment[] = [...sealed.map((x) => ({ ...x, active: false })), { n: (sealed.at(-1)?.n ?? 0) + 1, path, active: true }];
    const first = start ? segs.findIndex((x) => x.n === start.segment) : 0;
    const firstN = start?.segment ?? 1;
    for (let idx = first; idx < segs.length; idx++) {
      const seg = segs[idx] as Segment;
      const want = firstN + idx - first;
      if (seg.n !== want) {
        const missing = segmentName(files.base, want);
        return { seq: this.seq, line: 0, reason: 'segment_missing', file: missing, message: `sealed segment ${missing} is missing` };
      }
      // The walk's first segment may start after a checkpointed entry, which stands for the lines before it.
      const resume = idx === first ? start : undefined;
      let fh: FileHandle;
      if (seg.active) {
        if (!snap.active) break;
        fh = snap.active;
      } else {
        try {
          fh = await openRegular(seg.path);
        } catch (err) {
          throw new AuditError('io_error', `cannot read ${seg.path}: ${describeCause(err)}`, { cause: err });
        }
      }
      this.o.result.segments++;
      const cur: SegmentCursor = { seg, file: basename(seg.path), lineBase: resume?.line ?? 0, last: resume?.entry };
      try {
        const bad = await this.readSegment(cur, fh, resume?.offset ?? 0);
        if (bad) return bad;
      } finally {
        if (!seg.active) await fh.close();
      }
      const bad = this.segmentEnd(cur);
      if (bad) return bad;
    }
    const { seq } = this;
    const { maxCovered } = this.o;
    if (maxCovered >= seq) {
      // The active segment is missing altogether.
      return {
        seq,
        line: 1,
        reason: 'truncated',
        file: files.base,
        message: `log ends at entry ${seq - 1}, but a checkpoint records ${maxCovered} entries: it was truncated or replaced by an older copy`,
      };
    }
    return undefined;
  }

  private at(cur: SegmentCursor, line: number, reason: VerifyReason, message: string, s = this.seq): FirstBad {
    return { seq: s, line, reason, file: cur.file, message };
  }

  /** Reads the segment from byte `pos` in chunks and verifies them in file order; returns the first bad. */
  private async readSegment(cur: SegmentCursor, fh: FileHandle, pos: number): Promise<FirstBad | undefined> {
    const { pool } = this;
    const size = cur.seg.active ? this.snap.activeSize : (await fh.stat()).size;
    let carry: Buffer = EMPTY; // an incomplete line, carried into the next chunk
    let chunkStart = pos; // file offset of the next chunk's first byte
    // Chunks are verified in file order, some on a helper thread; results are applied in order.
    const queue: { start: number; result: Promise<ChunkResult> }[] = [];
    const drainQueue = async (keep: number): Promise<FirstBad | undefined> => {
      while (queue.length > keep) {
        const job = queue.shift() as (typeof queue)[number];
        const b = this.stitch(cur, await job.result, job.start);
        if (b) return b;
      }
      return undefined;
    };
    // Reads the next chunk, after the carried partial line, into a buffer of its own.
    const readNext = async (from: Buffer, at: number) => {
      const buf = pool.take(from.length + CHUNK_BYTES);
      from.copy(buf, 0);
      const { bytesRead } = await fh.read(buf, from.length, Math.min(buf.length - from.length, size - at), at);
      return { buf, bytesRead, filled: from.length + bytesRead };
    };
    let reading = pos < size ? readNext(carry, pos) : undefined;
    while (reading) {
      const { buf, bytesRead, filled } = await reading;
      reading = undefined;
      if (bytesRead === 0) {
        pool.give(buf);
        break;
      }
      pos += bytesRead;
      const nl = buf.lastIndexOf(0x0a, filled - 1);
      if (nl < 0) {
        carry = Buffer.from(buf.subarray(0, filled));
        pool.give(buf);
        if (pos < size && carry.length < MAX_LINE_BYTES) reading = readNext(carry, pos);
        continue;
      }
      carry = Buffer.from(buf.subarray(nl + 1, filled));
      // Read ahead: the next chunk arrives (on libuv's threads) while this one is verified.
      if (pos < size) reading = readNext(carry, pos);
      queue.push({ start: chunkStart, result: pool.verify(buf, nl + 1, this.marks) });
      chunkStart += nl + 1;
      const b = await drainQueue(pool.depth);
      if (b) {
        await reading?.catch(() => undefined); // never close the file under a read in flight
        return b;
      }
    }
    const b = await drainQueue(0);
    if (b) return b;
    return this.leftover(cur, carry);
  }

  /** What an incomplete last line of a segment means: too long, a sealed segment cut, a truncated log, or a torn tail. */
  private leftover(cur: SegmentCursor, carry: Buffer): FirstBad | undefined {
    const { seq } = this;
    const { maxCovered } = this.o;
    if (carry.length >= MAX_LINE_BYTES) return this.at(cur, cur.lineBase + 1, 'bad_json', 'line is longer than 16 MiB');
    if (carry.length === 0) return undefined;
    if (!cur.seg.active) return this.at(cur, cur.lineBase + 1, 'bad_json', 'sealed segment ends with an incomplete line');
    return maxCovered >= seq
      ? this.at(
          cur,
          cur.lineBase + 1,
          'truncated',
          `log ends inside entry ${seq}, but a checkpoint records ${maxCovered} entries: it was truncated`,
        )
      : this.at(
          cur,
          cur.lineBase + 1,
          'torn_tail',
          `incomplete last line (${carry.length} bytes, no line feed): a write was interrupted; the next writer moves it aside`,
        );
  }

  /** How a segment must end: a sealed one with its audit.sealed entry, the active one no earlier than a checkpoint records. */
  private segmentEnd(cur: SegmentCursor): FirstBad | undefined {
    const { seq } = this;
    const { maxCovered } = this.o;
    if (!cur.seg.active) {
      const d = cur.last?.data as { segment?: unknown } | null | undefined;
      if (cur.last?.type !== 'audit.sealed' || typeof d !== 'object' || d === null || d.segment !== cur.seg.n) {
        return this.at(
          cur,
          cur.lineBase + 1,
          'truncated',
          `sealed segment ${cur.file} does not end with its audit.sealed entry: it lost its tail`,
        );
      }
    } else if (maxCovered >= seq) {
      return this.at(
        cur,
        cur.lineBase + 1,
        'truncated',
        `log ends at entry ${seq - 1}, but a checkpoint records ${maxCovered} entries: it was truncated or replaced by an older copy`,
      );
    }
    return undefined;
  }

  /** Applies one chunk's result in file order; returns the first bad thing it shows. */
  private stitch(cur: SegmentCursor, r: ChunkResult, chunkStart: number): FirstBad | undefined {
    const { result } = this.o;
    const { seg, lineBase } = cur;
    if (r.lines === 0) return undefined;
    if (r.fail?.index === 0) return this.at(cur, lineBase + 1, r.fail.reason, r.fail.message);
    const first = r.first as EntryFacts;
    if (first.prev !== this.prev && !isHex64(first.prev)) return this.at(cur, lineBase + 1, 'bad_json', PREV_NOT_HEX);
    if (lineBase === 0) {
      const d = first.data as { segment?: unknown } | null | undefined;
      const isHeader = first.type === 'audit.segment';
      if (seg.n > 1 && (!isHeader || typeof d !== 'object' || d === null || d.segment !== seg.n)) {
        return this.at(
          cur,
          1,
          'segment_missing',
          `segment ${seg.n} does not start with its audit.segment header: a segment was removed or renamed`,
        );
      }
      if (seg.n === 1 && isHeader) {
        return this.at(
          cur,
          1,
          'segment_missing',
          'the first segment starts with an audit.segment header: the segments before it were removed',
        );
      }
    }
    if (first.seq !== this.seq) return this.at(cur, lineBase + 1, 'seq_gap', seqGapMessage(this.seq, first.seq));
    if (first.prev !== this.prev) return this.at(cur, lineBase + 1, 'broken_link', brokenLinkMessage(first.prev, this.prev));
    const failSeq = r.fail ? first.seq + r.fail.index : Number.POSITIVE_INFINITY;
    const rolledBack = this.passCheckpoints(cur, r, first, failSeq, chunkStart);
    if (rolledBack) return rolledBack;
    if (r.fail) {
      // Every line before the failing one verified: account for them first.
      result.entries = failSeq - 1;
      result.head = (r.last as EntryFacts).hash;
      return this.at(cur, lineBase + r.fail.index + 1, r.fail.reason, r.fail.message, failSeq);
    }
    const last = r.last as EntryFacts;
    cur.last = last;
    this.seq = last.seq + 1;
    this.prev = last.hash;
    result.entries = last.seq;
    result.head = last.hash;
    cur.lineBase += r.lines;
    return undefined;
  }

  /** Compares the checkpointed entries of a chunk (before `failSeq`) with their checkpoints (SPEC.md 5.4). */
  private passCheckpoints(
    cur: SegmentCursor,
    r: ChunkResult,
    first: EntryFacts,
    failSeq: number,
    chunkStart: number,
  ): FirstBad | undefined {
    const { used, result } = this.o;
    for (const m of r.marks) {
      if (m.seq >= failSeq) break;
      for (; this.next < used.length && (used[this.next] as UsedCheckpoint).entries < m.seq; this.next++);
      for (; this.next < used.length && (used[this.next] as UsedCheckpoint).entries === m.seq; this.next++) {
        const cp = used[this.next] as UsedCheckpoint;
        const end = chunkStart + m.end;
        if (cp.head !== m.hash || cp.segment !== cur.seg.n || cp.offset !== end) {
          result.entries = m.seq - 1;
          result.head = m.prev;
          return this.at(
            cur,
            cur.lineBase + (m.seq - first.seq) + 1,
            'rollback',
            `entry ${m.seq} differs from the checkpoint of ${cp.time} (checkpoint line ${cp.line}: head ${cp.head.slice(0, 4)}… in segment ${cp.segment} at byte ${cp.offset}; log: ${m.hash.slice(0, 4)}… in segment ${cur.seg.n} at byte ${end}): the history was rewritten or rolled back`,
            m.seq,
          );
        }
      }
    }
    return undefined;
  }
}

const EMPTY = Buffer.alloc(0);
