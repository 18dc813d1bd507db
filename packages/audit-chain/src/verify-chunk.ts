import { inspectLine, isAuditType, isHex64, newLineFacts, SUFFIX_BYTES, type VerifyReason } from './format.js';

/** Facts about one entry that the stitching step needs. */
export interface EntryFacts {
  seq: number;
  prev: string;
  hash: string;
  type: string;
  /** Present only for `audit.*` entries (segment headers and seals). */
  data?: unknown;
  /** Offset just past the entry's line feed, relative to the chunk. */
  end: number;
}

/** What verifying a run of complete lines found. */
export interface ChunkResult {
  /** Lines examined: all of them, or up to and including the failing one. */
  lines: number;
  first?: EntryFacts;
  /** The last entry that verified (before the failing line, when there is one). */
  last?: EntryFacts;
  /** Entries whose seq was asked for (checkpointed entries). */
  marks: EntryFacts[];
  /** The first line that failed on its own or against the line before it in this chunk. */
  fail?: { index: number; reason: VerifyReason; message: string };
}

export const PREV_NOT_HEX = 'entry does not end with "prev":"<64 lowercase hex>"';

/**
 * Verifies a buffer of complete lines (each ending in '\n') on its own: every line's suffix, hash
 * and shape, and the sequence and links between lines of the chunk. The first line's sequence and
 * link to what came before are the caller's to check. Allocates only for the first and last
 * entries, checkpointed ones, and the log's own `audit.*` entries.
 */
export function verifyChunk(buf: Buffer, markSeqs: ReadonlySet<number>): ChunkResult {
  const result: ChunkResult = { lines: 0, marks: [] };
  const f = newLineFacts();
  let i = 0;
  let prevSeq = 0;
  let prevHashAt = 0; // offset in `buf` of the previous line's stored hash digits
  let prevStart = 0;
  let prevEnd = 0;
  let lastAudit: EntryFacts | undefined;
  const facts = (end: number): EntryFacts => {
    const e: EntryFacts = {
      seq: f.seq,
      prev: buf.toString('latin1', f.prevStart, f.prevStart + 64),
      hash: f.hash,
      type: buf.toString('latin1', f.typeStart, f.typeEnd),
      end,
    };
    if (isAuditType(buf, f)) e.data = JSON.parse(buf.toString('utf8', f.dataStart, f.dataEnd));
    return e;
  };
  while (i < buf.length) {
    const nl = buf.indexOf(0x0a, i);
    const end = nl < 0 ? buf.length : nl + 1;
    const index = result.lines++;
    if (!inspectLine(buf, i, end, f)) {
      result.fail = { index, reason: f.reason ?? 'bad_json', message: f.message };
      break;
    }
    if (index > 0 && (f.seq !== prevSeq + 1 || !sameBytes(buf, f.prevStart, prevHashAt))) {
      const prev = buf.toString('latin1', f.prevStart, f.prevStart + 64);
      const prevHash = buf.toString('latin1', prevHashAt, prevHashAt + 64);
      if (!isHex64(prev)) result.fail = { index, reason: 'bad_json', message: PREV_NOT_HEX };
      else if (f.seq !== prevSeq + 1) result.fail = { index, reason: 'seq_gap', message: seqGapMessage(prevSeq + 1, f.seq) };
      else result.fail = { index, reason: 'broken_link', message: brokenLinkMessage(prev, prevHash) };
      break;
    }
    if (index === 0) result.first = facts(end);
    else if (isAuditType(buf, f)) lastAudit = facts(end);
    if (markSeqs.has(f.seq)) result.marks.push(index === 0 ? (result.first as EntryFacts) : facts(end));
    prevSeq = f.seq;
    prevHashAt = end - SUFFIX_BYTES + 9;
    prevStart = i;
    prevEnd = end;
    i = end;
  }
  if (result.lines > 0 && (result.fail === undefined || result.fail.index > 0)) {
    // The last entry that verified: re-read its facts (types and data matter for seals).
    if (prevStart === 0) result.last = result.first;
    else if (lastAudit?.seq === prevSeq) result.last = lastAudit;
    else {
      inspectLine(buf, prevStart, prevEnd, f);
      result.last = facts(prevEnd);
    }
  }
  return result;
}

/** Whether the 64 bytes at `a` equal the 64 bytes at `b` (a stored hash and a `prev`). */
function sameBytes(buf: Buffer, a: number, b: number): boolean {
  for (let k = 0; k < 64; k++) if (buf[a + k] !== buf[b + k]) return false;
  return true;
}

export function seqGapMessage(expected: number, found: number): string {
  return `sequence gap — expected entry ${expected}, found ${found} (an entry was deleted, repeated, reordered or inserted)`;
}

export function brokenLinkMessage(found: string, expected: string): string {
  return `broken link — prev is ${found.slice(0, 4)}…, but the previous entry's hash is ${expected.slice(0, 4)}… (an entry was replaced or spliced in)`;
}
