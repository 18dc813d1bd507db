import type { FileHandle } from 'node:fs/promises';
import type { Checkpoint } from './checkpoint.js';
import { AuditError, describeCause } from './errors.js';
import { checkLine, type VerifyReason } from './format.js';
import { lastLine, scanLines } from './lines.js';
import { DirLock } from './lock.js';
import { openRegular } from './regular-file.js';
import { type LogFiles, listSealedSegments, type SealedSegment, segmentName } from './segments.js';
import type { EntryFacts } from './verify-chunk.js';
import type { FirstBad } from './verify-result.js';

// Where a verification starts: the files as they are at one instant, and the place just after a
// checkpointed entry when the checkpoint vouches for the entries before it.

/** A consistent view of the files to verify: the sealed segments and the active one, opened. */
export interface Snapshot {
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
 * With `takeLock` false the caller holds the lock.
 */
export async function snapshot(files: LogFiles, takeLock: boolean): Promise<Snapshot> {
  const lock = new DirLock(files.lock, { timeoutMs: SNAPSHOT_LOCK_MS });
  let locked = false;
  try {
    if (takeLock) {
      await lock.acquire();
      locked = true;
    }
  } catch {
    // Read-only directory, or a writer holding the lock for long: verify what is there.
  }
  try {
    const sealed = await listSealedSegments(files);
    let active: FileHandle | undefined;
    try {
      active = await openRegular(files.active);
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

/** Where a walk after a checkpoint starts: just past the checkpointed entry. */
export interface WalkStart {
  segment: number;
  offset: number;
  /** Line of the checkpointed entry in its segment. */
  line: number;
  /** The checkpointed entry: the one the first entry walked must follow. */
  entry: EntryFacts;
}

/**
 * Where a walk after checkpoint `cp` starts. The log must hold `cp`'s entry: a line ending at
 * `cp.offset` of segment `cp.segment`, with `cp`'s sequence number and hash (else `truncated`,
 * `segment_missing` or `rollback`). Reads that one line, not the entries before it.
 */
export async function startAfter(files: LogFiles, snap: Snapshot, cp: Checkpoint): Promise<WalkStart | FirstBad> {
  const activeN = (snap.sealed.at(-1)?.n ?? 0) + 1;
  const file = cp.segment === activeN ? files.base : segmentName(files.base, cp.segment);
  const was = `a checkpoint of ${cp.time} records entry ${cp.entries} in ${file} up to byte ${cp.offset}`;
  const bad = (reason: VerifyReason, message: string): FirstBad => ({
    seq: cp.entries,
    line: cp.segment === 1 ? cp.entries : 0,
    reason,
    file,
    message: `${was}, but ${message}`,
  });
  if (cp.segment > activeN) return bad('truncated', `the log has ${activeN} segment(s): it was cut or replaced by an older copy`);
  let fh: FileHandle;
  let size: number;
  if (cp.segment === activeN) {
    if (!snap.active) return bad('truncated', `${file} is missing`);
    fh = snap.active;
    size = snap.activeSize;
  } else {
    const seg = snap.sealed.find((x) => x.n === cp.segment);
    if (!seg) return bad('segment_missing', `sealed segment ${file} is missing`);
    try {
      fh = await openRegular(seg.path);
      size = (await fh.stat()).size;
    } catch (err) {
      throw new AuditError('io_error', `cannot read ${seg.path}: ${describeCause(err)}`, { cause: err });
    }
  }
  try {
    if (size < cp.offset) return bad('truncated', `${file} is ${size} bytes: it was truncated or replaced by an older copy`);
    const at = await lastLine(fh, cp.offset);
    const c = at && !at.torn ? checkLine(at.line) : undefined;
    // The checkpointed line itself damaged: that is the first bad entry, as a full walk finds it.
    if (c && !c.ok) return { ...bad(c.reason, ''), message: c.message };
    if (!c?.ok || c.entry.seq !== cp.entries || c.entry.hash !== cp.head) {
      const found = c?.ok ? `entry ${c.entry.seq} (${c.entry.hash.slice(0, 4)}…, not ${cp.head.slice(0, 4)}…)` : 'no complete line';
      return bad('rollback', `${found} ends there: the history was rewritten or rolled back`);
    }
    // Segment 1 holds entries from 1 on; a later one's lines are counted (it is bounded by rotation).
    const line = cp.segment === 1 ? cp.entries : await countLines(fh, cp.offset);
    const e = c.entry;
    return { segment: cp.segment, offset: cp.offset, line, entry: { ...e, end: cp.offset } };
  } finally {
    if (fh !== snap.active) await fh.close();
  }
}

async function countLines(fh: FileHandle, end: number): Promise<number> {
  let n = 0;
  await scanLines(fh, 0, end, () => {
    n++;
    return true;
  });
  return n;
}
