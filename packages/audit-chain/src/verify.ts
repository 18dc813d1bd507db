import type { KeyObject } from 'node:crypto';
import { existsSync } from 'node:fs';
import { type FileHandle, open, stat } from 'node:fs/promises';
import { basename } from 'node:path';
import { Worker } from 'node:worker_threads';
import { type Checkpoint, type KeyInput, keyId, parseCheckpoint, toKey, verifyCheckpointSignature } from './checkpoint.js';
import { AuditError, describeCause } from './errors.js';
import { GENESIS_HASH, isHex64, type VerifyReason } from './format.js';
import { MAX_LINE_BYTES, scanLines } from './lines.js';
import { DirLock } from './lock.js';
import { type LogFiles, listSealedSegments, logFiles, type SealedSegment, segmentName } from './segments.js';
import { brokenLinkMessage, type ChunkResult, type EntryFacts, PREV_NOT_HEX, seqGapMessage, verifyChunk } from './verify-chunk.js';

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

  const result: VerifyResult = {
    ok: true,
    entries: 0,
    head: GENESIS_HASH,
    segments: 0,
    uncheckpointed: 0,
    checkpoints_ignored: 0,
    threads: 1,
  };
  const fail = (bad: FirstBad): VerifyResult => {
    result.ok = false;
    result.first_bad = bad;
    return result;
  };

  const cps = await readCheckpoints(files.checkpoints, pub, result);
  if ('reason' in cps) return fail(cps);
  const used = cps.used.filter((c) => c.entries > 0).sort((a, b) => a.entries - b.entries || a.line - b.line);
  const latest = cps.used.reduce<UsedCheckpoint | undefined>((a, c) => (!a || c.entries >= a.entries ? c : a), undefined);
  const maxCovered = used.at(-1)?.entries ?? 0;

  const bad = await walk(files, path, used, maxCovered, result, options.threads ?? 1);
  if (bad) return fail(bad);

  if (latest) {
    result.checkpoint = { entries: latest.entries, head: latest.head, time: latest.time, signed: latest.sig !== undefined };
    if (latest.key_id) result.checkpoint.key_id = latest.key_id;
    result.uncheckpointed = result.entries - latest.entries;
  } else {
    result.uncheckpointed = result.entries;
  }
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

const CHUNK_BYTES = 1 << 20;

/** Walks every segment in order (SPEC.md section 4), stitching chunk results; returns the first bad. */
async function walk(
  files: ReturnType<typeof logFiles>,
  path: string,
  used: UsedCheckpoint[],
  maxCovered: number,
  result: VerifyResult,
  threads: 1 | 2,
): Promise<FirstBad | undefined> {
  let seq = 1;
  let prev = GENESIS_HASH;
  let next = 0; // index into `used` of the next checkpoint to compare
  const marks = new Set(used.map((c) => c.entries));
  const snap = await snapshot(files);
  const sealed = snap.sealed;
  const segs = [...sealed.map((x) => ({ ...x, active: false })), { n: (sealed.at(-1)?.n ?? 0) + 1, path, active: true }];
  const helper = threads === 2 ? await startHelper(snap, used) : undefined;
  if (helper) result.threads = 2;
  const pool = new ChunkPool(helper);
  try {
    return await walkSegments();
  } finally {
    await pool.close();
    await snap.active?.close();
  }

  async function walkSegments(): Promise<FirstBad | undefined> {
    for (let idx = 0; idx < segs.length; idx++) {
      const seg = segs[idx] as (typeof segs)[number];
      const file = basename(seg.path);
      if (seg.n !== idx + 1) {
        const missing = segmentName(files.base, idx + 1);
        return { seq, line: 0, reason: 'segment_missing', file: missing, message: `sealed segment ${missing} is missing` };
      }
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
      let lineBase = 0;
      let last: EntryFacts | undefined;
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
        let pos = 0;
        let chunkStart = 0; // file offset of the next chunk's first byte
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

/** A consistent view of the files to verify: the sealed segments and the active one, opened. */
interface Snapshot {
  sealed: SealedSegment[];
  /** The active segment, opened (undefined when it does not exist). */
  active: FileHandle | undefined;
  /** Bytes of the active segment to verify: its size when no write was in flight. */
  activeSize: number;
}

/**
 * Takes the writers' lock for an instant, when it can, to see the active segment between two
 * batches: a live log then never shows a write in progress as a torn tail, and a rotation after
 * this point cannot swap the file under the walk (the handle stays on the file seen here).
 * Without write access to the directory, or when the lock is busy for long, it goes on without.
 */
async function snapshot(files: LogFiles): Promise<Snapshot> {
  const lock = new DirLock(files.lock, { timeoutMs: SNAPSHOT_LOCK_MS });
  let locked = false;
  try {
    await lock.acquire();
    locked = true;
  } catch {
    // Read-only directory, or a writer holding the lock for long: verify what is there.
  }
  try {
    const sealed = await listSealedSegments(files);
    let active: FileHandle | undefined;
    try {
      active = await open(files.active, 'r');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
        throw new AuditError('io_error', `cannot read ${files.active}: ${describeCause(err)}`, { cause: err });
      }
    }
    return { sealed, active, activeSize: active ? (await active.stat()).size : 0 };
  } finally {
    if (locked) await lock.release();
  }
}

const SNAPSHOT_LOCK_MS = 2_000;
const EMPTY = Buffer.alloc(0);
/** Logs at least this large are verified on two threads (when the machine has two cores). */
const PARALLEL_MIN_BYTES = 32 << 20;

/** A helper thread that verifies one chunk at a time (see verify-worker.ts). */
interface Helper {
  idle: boolean;
  run(buf: Buffer, length: number): Promise<{ result: ChunkResult; buf: Buffer }>;
  close(): Promise<void>;
}

/**
 * Starts a helper thread for a large log. Verification is CPU-bound (a SHA-256 and a JSON scan
 * per line), so a second core nearly doubles throughput. The helper's heap is capped so that the
 * whole process stays small; without a built worker file (running from source) there is none.
 */
async function startHelper(snap: Snapshot, used: UsedCheckpoint[]): Promise<Helper | undefined> {
  let total = snap.activeSize;
  for (const seg of snap.sealed) total += (await stat(seg.path).catch(() => ({ size: 0 }))).size;
  if (total < PARALLEL_MIN_BYTES) return undefined;
  const file = new URL('./verify-worker.js', import.meta.url);
  if (!existsSync(file)) return undefined;
  const worker = new Worker(file, {
    workerData: used.map((c) => c.entries),
    resourceLimits: { maxYoungGenerationSizeMb: 4, maxOldGenerationSizeMb: 256 },
  });
  worker.unref();
  const waiting = new Map<number, { resolve(v: { result: ChunkResult; buf: Buffer }): void; reject(e: unknown): void }>();
  let failure: unknown;
  worker.on('message', (m: { id: number; result: ChunkResult; buf: ArrayBuffer }) => {
    helper.idle = true;
    waiting.get(m.id)?.resolve({ result: m.result, buf: Buffer.from(m.buf) });
    waiting.delete(m.id);
  });
  worker.on('error', (err) => {
    failure = err;
    for (const p of waiting.values()) p.reject(err);
    waiting.clear();
  });
  let ids = 0;
  const helper: Helper = {
    idle: true,
    run(buf, length) {
      if (failure) return Promise.reject(failure);
      helper.idle = false;
      const id = ids++;
      return new Promise((resolve, reject) => {
        waiting.set(id, { resolve, reject });
        worker.postMessage({ id, buf: buf.buffer, length }, [buf.buffer as ArrayBuffer]);
      });
    },
    async close() {
      await worker.terminate();
    },
  };
  return helper;
}

/** Chunk buffers, reused, and the choice of thread for each chunk. */
class ChunkPool {
  private readonly free: Buffer[] = [];
  constructor(private readonly helper: Helper | undefined) {}

  /** How many verified chunks may wait to be applied while the next one is read. */
  get depth(): number {
    return this.helper ? 2 : 0;
  }

  /** A buffer of at least `min` bytes that owns its whole ArrayBuffer (so it can move threads). */
  take(min: number): Buffer {
    const b = this.free.pop();
    if (b && b.length >= min) return b;
    // Room for a carried partial line plus a whole chunk, so one buffer serves chunk after chunk.
    return Buffer.from(new ArrayBuffer(Math.max(min, 2 * CHUNK_BYTES)));
  }

  give(b: Buffer): void {
    if (this.free.length < 4) this.free.push(b);
  }

  /** Verifies `buf[0, length)` on the helper when it is idle, else here and now. */
  verify(buf: Buffer, length: number, marks: ReadonlySet<number>): Promise<ChunkResult> {
    if (this.helper?.idle) {
      return this.helper.run(buf, length).then(({ result, buf: back }) => {
        this.give(back);
        return result;
      });
    }
    const result = verifyChunk(buf.subarray(0, length), marks);
    this.give(buf);
    return Promise.resolve(result);
  }

  async close(): Promise<void> {
    await this.helper?.close();
  }
}
