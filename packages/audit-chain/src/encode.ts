import {
  type Checkpoint,
  checkpointLine,
  type KeyInput,
  keyId,
  parseCheckpoint,
  signCheckpoint,
  toKey,
  verifyCheckpointSignature,
} from './checkpoint.js';
import { AuditError } from './errors.js';
import { type AuditEntry, assertEventType, checkLine, encodeData, isHex64, SUFFIX_BYTES, sha256Hex } from './format.js';
import type { JsonValue } from './ijson.js';

/**
 * The entry codec of SPEC.md, for stores other than the file log (a database table, say) that
 * must produce and read the exact bytes of entry lines and checkpoint records, so that what they
 * hold can be written out as a file log that `verifyLog` accepts byte for byte.
 */

/** The fields of one entry line (SPEC.md section 2), before hashing. */
export interface EntryFields {
  /** Position in the whole log, from 1. */
  seq: number;
  /** RFC 3339 UTC time with milliseconds (`Date#toISOString()`). */
  ts: string;
  /** Event type (SPEC.md section 2); `audit.*` types are accepted here: they are the log's own. */
  type: string;
  data: JsonValue;
  /** Hash of the previous entry, or `GENESIS_HASH` for entry 1. */
  prev: string;
}

/** One encoded entry line. */
export interface EncodedEntry {
  /** The complete line, ending with its line feed, exactly as it appears in a log file. */
  line: string;
  /** The entry's hash: SHA-256 of the line minus its 76-byte suffix, lowercase hex. */
  hash: string;
  /** Length of `line` in UTF-8 bytes. */
  bytes: number;
}

/** An append checked and canonicalised by {@link prepareAppend}, to be encoded later. */
export interface PreparedAppend {
  readonly type: string;
  /** `data` in the canonical form the file log writes (keys sorted, no whitespace). */
  readonly dataJson: string;
  /** Upper bound of the encoded line's length in bytes (whatever its seq). */
  readonly maxBytes: number;
}

const prepared = new WeakSet<PreparedAppend>();
const TS_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const TYPE_RE = /^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$/;
const MAX_SEQ = Number.MAX_SAFE_INTEGER;

/**
 * Checks one append exactly as `AuditLog.append` of the file log does, and canonicalises its data.
 * Throws an `AuditError`: `invalid_type` (bad grammar, or a reserved `audit.*` type),
 * `invalid_data` (not I-JSON; the message names the JSON pointer) or `entry_too_large` (the line
 * could exceed `maxEntryBytes`, default 1 MiB). Nothing is written.
 */
export function prepareAppend(type: string, data: JsonValue = null, options: { maxEntryBytes?: number } = {}): PreparedAppend {
  const maxEntryBytes = options.maxEntryBytes ?? 1 << 20;
  assertEventType(type);
  const dataJson = encodeData(data);
  // Fixed parts: {"seq":,"ts":"","type":"","data":,"prev":""} + suffix, seq ≤ 16 digits, ts 24.
  const maxBytes = 46 + 16 + 24 + type.length + Buffer.byteLength(dataJson) + 64 + SUFFIX_BYTES;
  if (maxBytes > maxEntryBytes) {
    throw new AuditError(
      'entry_too_large',
      `entry of type "${type}" would be ${maxBytes} bytes, over the ${maxEntryBytes}-byte limit; log a digest or a reference instead of the body`,
    );
  }
  const p: PreparedAppend = Object.freeze({ type, dataJson, maxBytes });
  prepared.add(p);
  return p;
}

function assertPosition(seq: number, ts: string, prev: string): void {
  if (!Number.isSafeInteger(seq) || seq < 1 || seq > MAX_SEQ) {
    throw new AuditError('invalid_data', `entry seq ${seq} is invalid: it must be an integer from 1 to 2^53 − 1`);
  }
  if (typeof ts !== 'string' || !TS_RE.test(ts)) {
    throw new AuditError('invalid_data', `entry ts ${JSON.stringify(ts)} is invalid: use Date#toISOString() (2026-11-30T01:20:54.123Z)`);
  }
  if (!isHex64(prev)) throw new AuditError('invalid_data', 'entry prev must be 64 lowercase hex digits (GENESIS_HASH for entry 1)');
}

function encodeLine(seq: number, ts: string, type: string, dataJson: string, prev: string): EncodedEntry {
  const body = `{"seq":${seq},"ts":"${ts}","type":"${type}","data":${dataJson},"prev":"${prev}"`;
  const hash = sha256Hex(body);
  return { line: `${body},"hash":"${hash}"}\n`, hash, bytes: Buffer.byteLength(body) + SUFFIX_BYTES };
}

/**
 * Encodes one entry line of SPEC.md section 2 (data in the file log's canonical form) and its
 * hash. Two calls with the same fields give the same bytes. Throws `invalid_type` for a type
 * outside the grammar and `invalid_data` for data that is not I-JSON or a bad seq, ts or prev.
 */
export function encodeEntry(fields: EntryFields): EncodedEntry {
  const { seq, ts, type, data, prev } = fields;
  if (typeof type !== 'string' || !TYPE_RE.test(type)) {
    throw new AuditError('invalid_type', `event type ${JSON.stringify(type)} is invalid: use 1–128 characters from A–Z a–z 0–9 _ . : / -`);
  }
  assertPosition(seq, ts, prev);
  return encodeLine(seq, ts, type, encodeData(data), prev);
}

/**
 * Encodes an append checked earlier by {@link prepareAppend} at its place in the chain, without
 * checking its data again (the hot path of a store that validates at append time and assigns
 * `seq` and `prev` when its batch commits). Throws `TypeError` for an object that
 * `prepareAppend` did not return.
 */
export function encodePrepared(p: PreparedAppend, at: { seq: number; ts: string; prev: string }): EncodedEntry {
  if (!prepared.has(p)) throw new TypeError('encodePrepared takes an object returned by prepareAppend');
  assertPosition(at.seq, at.ts, at.prev);
  return encodeLine(at.seq, at.ts, p.type, p.dataJson, at.prev);
}

/** Result of {@link decodeEntry}. */
export type DecodedEntry = { ok: true; entry: AuditEntry } | { ok: false; reason: 'bad_json' | 'hash_mismatch'; message: string };

/**
 * Checks one complete entry line (with its final line feed) as a verifier does (SPEC.md section 4,
 * steps 2–4: shape, hash over the bytes as given, UTF-8) and returns the entry with its data
 * parsed. Sequence and link checks need the entry before it: they are the caller's.
 */
export function decodeEntry(line: string | Uint8Array): DecodedEntry {
  return checkLine(typeof line === 'string' ? Buffer.from(line) : line);
}

/** The facts a checkpoint states (SPEC.md section 5.1). */
export interface CheckpointFields {
  /** Entries in the log at the checkpoint (0 for an empty log). */
  entries: number;
  /** Hash of entry `entries` (`GENESIS_HASH` when 0). */
  head: string;
  /** Segment holding entry `entries` (1 for a log of one segment, and when empty). */
  segment: number;
  /** Byte length of that segment through entry `entries`'s line feed. */
  offset: number;
  /** RFC 3339 UTC time with milliseconds. */
  time: string;
}

/**
 * Builds a checkpoint record and its exact line in a checkpoint file (with the line feed),
 * signed with `signingKey` (Ed25519, PEM or KeyObject) when given, as the file log's
 * `checkpoint()` writes it. Throws `invalid_data` for fields SPEC.md section 5.1 refuses and
 * `invalid_key` for a key that is not an Ed25519 private key.
 */
export function encodeCheckpoint(
  fields: CheckpointFields,
  options: { signingKey?: KeyInput } = {},
): { checkpoint: Checkpoint; line: string } {
  let cp: Checkpoint = { entries: fields.entries, head: fields.head, segment: fields.segment, offset: fields.offset, time: fields.time };
  const checked = parseCheckpoint(checkpointLine(cp).slice(0, -1));
  if (typeof checked === 'string') throw new AuditError('invalid_data', `checkpoint is invalid: ${checked}`);
  if (options.signingKey !== undefined) cp = signCheckpoint(cp, toKey(options.signingKey, 'private', 'signingKey'));
  return { checkpoint: cp, line: checkpointLine(cp) };
}

/** Result of {@link decodeCheckpoint}. */
export type DecodedCheckpoint =
  | {
      ok: true;
      checkpoint: Checkpoint;
      /**
       * With a public key: `'valid'` when signed by that key and the signature verifies,
       * `'invalid'` when signed by that key but altered, `'other_key'` when unsigned or signed by
       * another key. Without a key: `'unchecked'`.
       */
      signature: 'valid' | 'invalid' | 'other_key' | 'unchecked';
    }
  | { ok: false; message: string };

/**
 * Parses one line of a checkpoint file (with or without its line feed) as a verifier does
 * (SPEC.md section 5.1) and, given `publicKey`, checks its signature (section 5.4). Throws
 * `invalid_key` for a key that is not an Ed25519 public key.
 */
export function decodeCheckpoint(line: string, options: { publicKey?: KeyInput } = {}): DecodedCheckpoint {
  const cp = parseCheckpoint(line.endsWith('\n') ? line.slice(0, -1) : line);
  if (typeof cp === 'string') return { ok: false, message: cp };
  if (options.publicKey === undefined) return { ok: true, checkpoint: cp, signature: 'unchecked' };
  const pub = toKey(options.publicKey, 'public', 'publicKey');
  if (cp.key_id !== keyId(pub)) return { ok: true, checkpoint: cp, signature: 'other_key' };
  return { ok: true, checkpoint: cp, signature: verifyCheckpointSignature(cp, pub) ? 'valid' : 'invalid' };
}
