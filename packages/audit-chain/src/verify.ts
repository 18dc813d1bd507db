import type { KeyObject } from 'node:crypto';
import { type FileHandle, open, stat } from 'node:fs/promises';
import { basename } from 'node:path';
import {
  type Checkpoint,
  type KeyInput,
  keyId,
  latestCheckpoint,
  parseCheckpoint,
  toKey,
  verifyCheckpointSignature,
} from './checkpoint.js';
import { AuditError, describeCause } from './errors.js';
import { GENESIS_HASH, isHex64, type VerifyReason } from './format.js';
import { MAX_LINE_BYTES, scanLines } from './lines.js';
import { type LogFiles, logFiles, segmentName } from './segments.js';
import { brokenLinkMessage, type ChunkResult, type EntryFacts, PREV_NOT_HEX, seqGapMessage } from './verify-chunk.js';
import { CHUNK_BYTES, ChunkPool, startHelper } from './verify-pool.js';
import { type Snapshot, snapshot, startAfter, type WalkStart } from './verify-start.js';

export interface VerifyOptions {
  /**
   * Ed25519 public key (PEM or KeyObject). When given, only checkpoints signed by this key are
   * trusted, each must verify, and at least one must exist.
   */
  publicKey?: KeyInput;
  /**
   * Threads to verify with: 1, or 2 to hash and scan on a helper thread as well (about 1.5× the
   * throughput on a machine with two free cores, for ~15 MiB more memory). Default 1.
   */
  threads?: 1 | 2;
  /**
   * Verify only the entries after the newest checkpoint (signed by `publicKey`, when given): that
   * checkpoint vouches for the entries before it, which are not read. This is what a writer checks
   * when it opens the log, and its cost is bounded by how often checkpoints are written. The log
   * must hold the checkpoint's entry where the checkpoint says (`truncated`, `segment_missing` or
   * `rollback` otherwise, or the reason that entry is damaged). Damage before the checkpoint is
   * found only without this option. Default false.
   */
  fromCheckpoint?: boolean;
}

/** Where verification first failed. */
export interface FirstBad {
  /** The entry (sequence number) that is bad or missing. */
  seq: number;
  /** 1-based line in `file` (one past the end when an entry is missing; 0 for a missing file). */
  line: number;
  reason: VerifyReason;
  /** Base name of the file the line is in. */
  file: string;
  /** What was found, for people: `hash mismatch — stored 9f2c…, computed 41aa…`. */
  message: string;
}

export interface VerifyResult {
  ok: boolean;
  /** Entries that verified (all of them when `ok`). */
  entries: number;
  /** Hash of the last entry that verified (genesis for none). */
  head: string;
  /** Present only when `ok` is false. */
  first_bad?: FirstBad;
  /** Segment files walked (sealed ones plus the active one). */
  segments: number;
  /** The latest checkpoint used, when there is one. */
  checkpoint?: { entries: number; head: string; time: string; signed: boolean; key_id?: string };
  /** Entries after the latest checkpoint: not yet vouched for by any checkpoint. */
  uncheckpointed: number;
  /** Checkpoints set aside because they are not signed by the given public key. */
  checkpoints_ignored: number;
  /** Threads that verified: 2 only when asked for and the log is large enough (32 MiB) to gain. */
  threads: 1 | 2;
}

interface UsedCheckpoint extends Checkpoint {
  line: number;
}

/**
 * Verifies the log at `path` against SPEC.md sections 4 and 5: streams every segment in bounded
 * memory, hashing the bytes as written, and compares the chain with the checkpoints. Never throws
 * for a damaged log (that is a result with `ok: false` and the first bad entry); throws
 * `io_error` when the files cannot be read and `invalid_key` for a bad public key.
 */
export async function verifyLog(path: string, options: VerifyOptions = {}): Promise<VerifyResult> {
  const files = logFiles(path);
  const pub = options.publicKey === undefined ? undefined : toKey(options.publicKey, 'public', 'publicKey');
  try {
    await stat(files.dir);
  } catch (err) {
    throw new AuditError('io_error', `cannot verify ${path}: directory ${files.dir} is not accessible (${describeCause(err)})`, {
      cause: err,
    });
  }

  if (options.fromCheckpoint) {
    const cp = await latestCheckpoint(files.checkpoints, pub);
    if (pub && !cp) return failed(newResult(), noSigned(basename(files.checkpoints), pub));
    return verifyAfterCheckpoint(path, cp, { takeLock: true });
  }

  const result = newResult();
  const cps = await readCheckpoints(files.checkpoints, pub, result);
  if ('reason' in cps) return failed(result, cps);
  const used = cps.used.filter((c) => c.entries > 0).sort((a, b) => a.entries - b.entries || a.line - b.line);
  const latest = cps.used.reduce<UsedCheckpoint | undefined>((a, c) => (!a || c.entries >= a.entries ? c : a), undefined);
  const maxCovered = used.at(-1)?.entries ?? 0;

  const bad = await verifyFrom(files, path, { used, maxCovered, result, threads: options.threads ?? 1, takeLock: true });
  if (bad) return failed(result, bad);

  if (latest) {
    result.checkpoint = { entries: latest.entries, head: latest.head, time: latest.time, signed: latest.sig !== undefined };
    if (latest.key_id) result.checkpoint.key_id = latest.key_id;
    result.uncheckpointed = result.entries - latest.entries;
  } else {
    result.uncheckpointed = result.entries;
  }
  return result;
}

/**
 * Verifies the entries of the log at `path` after checkpoint `cp` (all of them without one, or for
 * a checkpoint of 0 entries): checks that the log holds `cp`'s entry where `cp` says, then walks
 * from just after it. `cp` vouches for the entries before it, which are not read. With
 * `takeLock: false` the caller holds the writers' lock (a writer opening the log).
 */
export async function verifyAfterCheckpoint(path: string, cp: Checkpoint | undefined, o: { takeLock: boolean }): Promise<VerifyResult> {
  const result = newResult();
  const from = cp && cp.entries > 0 ? cp : undefined;
  const bad = await verifyFrom(logFiles(path), path, {
    used: [],
    maxCovered: from?.entries ?? 0,
    result,
    threads: 1,
    takeLock: o.takeLock,
    ...(from ? { from } : {}),
  });
  if (bad) return failed(result, bad);
  if (cp) {
    result.checkpoint = { entries: cp.entries, head: cp.head, time: cp.time, signed: cp.sig !== undefined };
    if (cp.key_id) result.checkpoint.key_id = cp.key_id;
  }
  result.uncheckpointed = result.entries - (cp?.entries ?? 0);
  return result;
}

function newResult(): VerifyResult {
  return { ok: true, entries: 0, head: GENESIS_HASH, segments: 0, uncheckpointed: 0, checkpoints_ignored: 0, threads: 1 };
}

function failed(result: VerifyResult, bad: FirstBad): VerifyResult {
  result.ok = false;
  result.first_bad = bad;
  return result;
}

/** Reads and checks the checkpoint file (SPEC.md 5.4, before the walk). */
async function readCheckpoints(
  path: string,
  pub: KeyObject | undefined,
  result: VerifyResult,
): Promise<{ used: UsedCheckpoint[] } | FirstBad> {
  const file = basename(path);
  const used: UsedCheckpoint[] = [];
  let fh: Awaited<ReturnType<typeof open>>;
  try {
    fh = await open(path, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
      throw new AuditError('io_error', `cannot read ${path}: ${describeCause(err)}`, { cause: err });
    }
    return pub ? noSigned(file, pub) : { used };
  }
  const wantId = pub ? keyId(pub) : undefined;
  let lineNo = 0;
  let bad: FirstBad | undefined;
  try {
    await scanLines(fh, 0, (await fh.stat()).size, (raw) => {
      lineNo++;
      if (raw.torn) return false; // an interrupted checkpoint write: ignored
      const cp = raw.oversized ? 'longer than 16 MiB' : parseCheckpoint(raw.bytes.toString('utf8', 0, raw.bytes.length - 1));
      if (typeof cp === 'string') {
        bad = { seq: 0, line: lineNo, reason: 'bad_checkpoint', file, message: `checkpoint line ${lineNo} is malformed: ${cp}` };
        return false;
      }
      if (pub) {
        if (cp.key_id !== wantId) {
          result.checkpoints_ignored++;
          return true;
        }
        if (!pub || !verifyCheckpointSignature(cp, pub)) {
          bad = {
            seq: cp.entries,
            line: lineNo,
            reason: 'signature_invalid',
            file,
            message: `checkpoint line ${lineNo} (entries ${cp.entries}) has a signature that does not verify with key ${wantId}: the checkpoint was altered`,
          };
          return false;
        }
      }
      used.push({ ...cp, line: lineNo });
      return true;
    });
  } finally {
    await fh.close();
  }
  if (bad) return bad;
  if (pub && used.length === 0) return noSigned(file, pub);
  return { used };
}

function noSigned(file: string, pub: KeyObject): FirstBad {
  return {
    seq: 0,
    line: 0,
    reason: 'signature_invalid',
    file,
    message: `no checkpoint signed by key ${keyId(pub)}: nothing vouches for this log (run "forge-audit checkpoint --key …")`,
  };
}

/** What one walk checks, and against which checkpoints. */
interface WalkOptions {
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

/** Takes a snapshot of the files, finds where to start, walks; returns the first bad. */
async function verifyFrom(files: LogFiles, path: string, o: WalkOptions): Promise<FirstBad | undefined> {
  const snap = await snapshot(files, o.takeLock);
  try {
    let start: WalkStart | undefined;
    if (o.from) {
      const s = await startAfter(files, snap, o.from);
      if ('reason' in s) return s;
      start = s;
      o.result.entries = o.from.entries;
      o.result.head = o.from.head;
    }
    return await walk(files, path, snap, start, o);
  } finally {
    await snap.active?.close();
  }
}

/**
 * Walks the segments in order from `start` (the first entry without one) to the end of the
 * snapshot (SPEC.md section 4), stitching chunk results; returns the first bad.
 */
async function walk(
  files: LogFiles,
  path: string,
  snap: Snapshot,
  start: WalkStart | undefined,
  o: WalkOptions,
): Promise<FirstBad | undefined> {
  const { used, maxCovered, result, threads } = o;
  let seq = (start?.entry.seq ?? 0) + 1;
  let prev = start?.entry.hash ?? GENESIS_HASH;
  let next = 0; // index into `used` of the next checkpoint to compare
  const marks = new Set(used.map((c) => c.entries));
  const sealed = snap.sealed;
  const segs = [...sealed.map((x) => ({ ...x, active: false })), { n: (sealed.at(-1)?.n ?? 0) + 1, path, active: true }];
  const first = start ? segs.findIndex((x) => x.n === start.segment) : 0;
  const firstN = start?.segment ?? 1;
  const helper =
    threads === 2
      ? await startHelper(
          snap,
          used.map((c) => c.entries),
        )
      : undefined;
  if (helper) result.threads = 2;
  const pool = new ChunkPool(helper);
  try {
    return await walkSegments();
  } finally {
    await pool.close();
  }

  async function walkSegments(): Promise<FirstBad | undefined> {
    for (let idx = first; idx < segs.length; idx++) {
      const seg = segs[idx] as (typeof segs)[number];
      const file = basename(seg.path);
      const want = firstN + idx - first;
      if (seg.n !== want) {
        const missing = segmentName(files.base, want);
        return { seq, line: 0, reason: 'segment_missing', file: missing, message: `sealed segment ${missing} is missing` };
      }
      // The walk's first segment may start after a checkpointed entry, which stands for the lines before it.
      const resume = idx === first ? start : undefined;
      let fh: FileHandle;
      if (seg.active) {
        if (!snap.active) break;
        fh = snap.active;
      } else {
        try {
          fh = await open(seg.path, 'r');
        } catch (err) {
          throw new AuditError('io_error', `cannot read ${seg.path}: ${describeCause(err)}`, { cause: err });
        }
      }
      result.segments++;
      let lineBase = resume?.line ?? 0;
      let last: EntryFacts | undefined = resume?.entry;
      const at = (line: number, reason: VerifyReason, message: string, s = seq): FirstBad => ({ seq: s, line, reason, file, message });

      // Applies one chunk's result in file order; returns the first bad thing it shows.
      const stitch = (r: ChunkResult, chunkStart: number): FirstBad | undefined => {
        if (r.lines === 0) return undefined;
        if (r.fail?.index === 0) return at(lineBase + 1, r.fail.reason, r.fail.message);
        const first = r.first as EntryFacts;
        if (first.prev !== prev && !isHex64(first.prev)) return at(lineBase + 1, 'bad_json', PREV_NOT_HEX);
        if (lineBase === 0) {
          const d = first.data as { segment?: unknown } | null | undefined;
          const isHeader = first.type === 'audit.segment';
          if (seg.n > 1 && (!isHeader || typeof d !== 'object' || d === null || d.segment !== seg.n)) {
            return at(
              1,
              'segment_missing',
              `segment ${seg.n} does not start with its audit.segment header: a segment was removed or renamed`,
            );
          }
          if (seg.n === 1 && isHeader) {
            return at(1, 'segment_missing', 'the first segment starts with an audit.segment header: the segments before it were removed');
          }
        }
        if (first.seq !== seq) return at(lineBase + 1, 'seq_gap', seqGapMessage(seq, first.seq));
        if (first.prev !== prev) return at(lineBase + 1, 'broken_link', brokenLinkMessage(first.prev, prev));
        const failSeq = r.fail ? first.seq + r.fail.index : Number.POSITIVE_INFINITY;
        for (const m of r.marks) {
          if (m.seq >= failSeq) break;
          for (; next < used.length && (used[next] as UsedCheckpoint).entries < m.seq; next++);
          for (; next < used.length && (used[next] as UsedCheckpoint).entries === m.seq; next++) {
            const cp = used[next] as UsedCheckpoint;
            const end = chunkStart + m.end;
            if (cp.head !== m.hash || cp.segment !== seg.n || cp.offset !== end) {
              result.entries = m.seq - 1;
              result.head = m.prev;
              return at(
                lineBase + (m.seq - first.seq) + 1,
                'rollback',
                `entry ${m.seq} differs from the checkpoint of ${cp.time} (checkpoint line ${cp.line}: head ${cp.head.slice(0, 4)}… in segment ${cp.segment} at byte ${cp.offset}; log: ${m.hash.slice(0, 4)}… in segment ${seg.n} at byte ${end}): the history was rewritten or rolled back`,
                m.seq,
              );
            }
          }
        }
        if (r.fail) {
          // Every line before the failing one verified: account for them first.
          result.entries = failSeq - 1;
          result.head = (r.last as EntryFacts).hash;
          return at(lineBase + r.fail.index + 1, r.fail.reason, r.fail.message, failSeq);
        }
        last = r.last as EntryFacts;
        seq = last.seq + 1;
        prev = last.hash;
        result.entries = last.seq;
        result.head = last.hash;
        lineBase += r.lines;
        return undefined;
      };

      let carry: Buffer = EMPTY; // an incomplete line, carried into the next chunk
      try {
        const size = seg.active ? snap.activeSize : (await fh.stat()).size;
        let pos = resume?.offset ?? 0;
        let chunkStart = pos; // file offset of the next chunk's first byte
        // Chunks are verified in file order, some on a helper thread; results are applied in order.
        const queue: { start: number; result: Promise<ChunkResult> }[] = [];
        const drainQueue = async (keep: number): Promise<FirstBad | undefined> => {
          while (queue.length > keep) {
            const job = queue.shift() as (typeof queue)[number];
            const b = stitch(await job.result, job.start);
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
        let next = pos < size ? readNext(carry, pos) : undefined;
        while (next) {
          const { buf, bytesRead, filled } = await next;
          next = undefined;
          if (bytesRead === 0) {
            pool.give(buf);
            break;
          }
          pos += bytesRead;
          const nl = buf.lastIndexOf(0x0a, filled - 1);
          if (nl < 0) {
            carry = Buffer.from(buf.subarray(0, filled));
            pool.give(buf);
            if (pos < size && carry.length < MAX_LINE_BYTES) next = readNext(carry, pos);
            continue;
          }
          carry = Buffer.from(buf.subarray(nl + 1, filled));
          // Read ahead: the next chunk arrives (on libuv's threads) while this one is verified.
          if (pos < size) next = readNext(carry, pos);
          queue.push({ start: chunkStart, result: pool.verify(buf, nl + 1, marks) });
          chunkStart += nl + 1;
          const b = await drainQueue(pool.depth);
          if (b) {
            await next?.catch(() => undefined); // never close the file under a read in flight
            return b;
          }
        }
        const b = await drainQueue(0);
        if (b) return b;
        if (carry.length >= MAX_LINE_BYTES) return at(lineBase + 1, 'bad_json', 'line is longer than 16 MiB');
        if (carry.length > 0) {
          if (!seg.active) return at(lineBase + 1, 'bad_json', 'sealed segment ends with an incomplete line');
          return maxCovered >= seq
            ? at(
                lineBase + 1,
                'truncated',
                `log ends inside entry ${seq}, but a checkpoint records ${maxCovered} entries: it was truncated`,
              )
            : at(
                lineBase + 1,
                'torn_tail',
                `incomplete last line (${carry.length} bytes, no line feed): a write was interrupted; the next writer moves it aside`,
              );
        }
      } finally {
        if (!seg.active) await fh.close();
      }
      if (!seg.active) {
        const d = last?.data as { segment?: unknown } | null | undefined;
        if (last?.type !== 'audit.sealed' || typeof d !== 'object' || d === null || d.segment !== seg.n) {
          return at(lineBase + 1, 'truncated', `sealed segment ${file} does not end with its audit.sealed entry: it lost its tail`);
        }
      } else if (maxCovered >= seq) {
        return at(
          lineBase + 1,
          'truncated',
          `log ends at entry ${seq - 1}, but a checkpoint records ${maxCovered} entries: it was truncated or replaced by an older copy`,
        );
      }
    }
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
}

const EMPTY = Buffer.alloc(0);
