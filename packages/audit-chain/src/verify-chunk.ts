import { checkLine, isHex64, type VerifyReason } from './format.js';

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

/** What verifying a run of complete lines found. Plain data: it crosses thread boundaries. */
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

/**
 * Verifies a buffer of complete lines (each ending in '\n') on its own: every line's suffix, hash
 * and shape, and the sequence and links between lines of the chunk. The first line's sequence and
 * link to the previous chunk are the caller's to check. Pure and synchronous, so it runs the same
 * on the main thread or in a worker.
 */
export function verifyChunk(buf: Uint8Array, markSeqs: ReadonlySet<number>): ChunkResult {
  const result: ChunkResult = { lines: 0, marks: [] };
  let i = 0;
  let prev: EntryFacts | undefined;
  while (i < buf.length) {
    const nl = buf.indexOf(0x0a, i);
    const end = nl < 0 ? buf.length : nl + 1;
    const index = result.lines++;
    const c = checkLine(buf.subarray(i, end), false);
    if (!c.ok) {
      result.fail = { index, reason: c.reason, message: c.message };
      break;
    }
    const e = c.entry;
    if (prev && (e.seq !== prev.seq + 1 || e.prev !== prev.hash)) {
      if (e.prev !== prev.hash && !isHex64(e.prev)) {
        result.fail = { index, reason: 'bad_json', message: PREV_NOT_HEX };
        break;
      }
      if (e.seq !== prev.seq + 1) {
        result.fail = { index, reason: 'seq_gap', message: seqGapMessage(prev.seq + 1, e.seq) };
        break;
      }
      if (e.prev !== prev.hash) {
        result.fail = { index, reason: 'broken_link', message: brokenLinkMessage(e.prev, prev.hash) };
        break;
      }
    }
    const facts: EntryFacts = { seq: e.seq, prev: e.prev, hash: e.hash, type: e.type, end };
    if (e.type.startsWith('audit.')) facts.data = e.data;
    if (!prev) result.first = facts;
    if (markSeqs.has(e.seq)) result.marks.push(facts);
    prev = facts;
    i = end;
  }
  result.last = prev;
  return result;
}

export function seqGapMessage(expected: number, found: number): string {
  return `sequence gap — expected entry ${expected}, found ${found} (an entry was deleted, repeated, reordered or inserted)`;
}

export function brokenLinkMessage(found: string, expected: string): string {
  return `broken link — prev is ${found.slice(0, 4)}…, but the previous entry's hash is ${expected.slice(0, 4)}… (an entry was replaced or spliced in)`;
}

export const PREV_NOT_HEX = 'entry does not end with "prev":"<64 lowercase hex>"';
