import { isUtf8 } from 'node:buffer';
import { hash } from 'node:crypto';
import stableStringify from 'fast-json-stable-stringify';
import { AuditError } from './errors.js';
import { assertIJson, type JsonValue } from './ijson.js';
import { isJsonValue } from './json-scan.js';

/** `prev` of the first entry, and the head of an empty log: 64 zeros. */
export const GENESIS_HASH = '0'.repeat(64);

/** `,"hash":"` + 64 hex + `"}` + `\n`. */
export const SUFFIX_BYTES = 76;
const NL = 0x0a;

/** Event types: 1–128 chars, `[A-Za-z0-9][A-Za-z0-9_.:/-]*`. */
const TYPE_RE = /^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$/;

/** One verified entry of the log. */
export interface AuditEntry {
  seq: number;
  ts: string;
  type: string;
  data: JsonValue;
  prev: string;
  hash: string;
}

/** Reasons a verifier can give for the first bad entry. Stable strings. */
export const VERIFY_REASONS = [
  'hash_mismatch',
  'broken_link',
  'seq_gap',
  'bad_json',
  'torn_tail',
  'truncated',
  'rollback',
  'signature_invalid',
  'bad_checkpoint',
  'segment_missing',
] as const;
export type VerifyReason = (typeof VERIFY_REASONS)[number];

export function sha256Hex(data: Uint8Array | string): string {
  return hash('sha256', data, 'hex');
}

/** Throws `invalid_type` unless `type` fits the grammar and is not reserved (`audit.*`). */
export function assertEventType(type: unknown): asserts type is string {
  if (typeof type !== 'string' || !TYPE_RE.test(type)) {
    throw new AuditError(
      'invalid_type',
      `event type ${JSON.stringify(type)} is invalid: use 1–128 characters from A–Z a–z 0–9 _ . : / -, starting with a letter or digit (for example "user.login")`,
    );
  }
  if (type.startsWith('audit.')) {
    throw new AuditError(
      'invalid_type',
      `event type "${type}" is reserved: types starting with "audit." are written by the log itself; pick another prefix`,
    );
  }
}

/**
 * Validates and canonicalises `data`, returning the JSON text to embed. Done at `append()` time
 * so a bad value is refused before it joins a batch.
 */
export function encodeData(data: unknown): string {
  assertIJson(data);
  return stableStringify(data);
}

/**
 * Builds one complete entry line (with its trailing line feed) and returns it with its hash and
 * its leaf hash in the log's Merkle tree (SPEC.md section 9: SHA-256 of 0x00 and the line without
 * its line feed, hashed from the same buffer, the prefix byte just before the line).
 */
export function buildLine(
  seq: number,
  ts: string,
  type: string,
  dataJson: string,
  prev: string,
): { line: Buffer; hash: string; leaf: Buffer } {
  const body = Buffer.from(`{"seq":${seq},"ts":"${ts}","type":"${type}","data":${dataJson},"prev":"${prev}"`);
  const digest = sha256Hex(body);
  const framed = Buffer.allocUnsafe(1 + body.length + SUFFIX_BYTES);
  framed[0] = 0;
  body.copy(framed, 1);
  framed.write(`,"hash":"${digest}"}\n`, 1 + body.length, 'latin1');
  const leaf = hash('sha256', framed.subarray(0, framed.length - 1), 'buffer');
  return { line: framed.subarray(1), hash: digest, leaf };
}

/** Result of checking one complete line (the bytes include the final line feed). */
export type LineCheck = { ok: true; entry: AuditEntry } | { ok: false; reason: 'bad_json' | 'hash_mismatch'; message: string };

/**
 * Where the parts of a checked line are, filled in by {@link inspectLine}. One object is reused
 * line after line, so that verification allocates almost nothing per entry.
 */
export interface LineFacts {
  seq: number;
  /** The entry's hash (equal to the stored one once the line passed). */
  hash: string;
  typeStart: number;
  typeEnd: number;
  dataStart: number;
  dataEnd: number;
  /** Offset of the 64 hex digits of `prev`. */
  prevStart: number;
  /** Why the line failed, when it did. */
  reason: 'bad_json' | 'hash_mismatch' | undefined;
  message: string;
}

export function newLineFacts(): LineFacts {
  return { seq: 0, hash: '', typeStart: 0, typeEnd: 0, dataStart: 0, dataEnd: 0, prevStart: 0, reason: undefined, message: '' };
}

const SEQ_HEAD = Buffer.from('{"seq":');
const TS_HEAD = Buffer.from(',"ts":"');
const TYPE_HEAD = Buffer.from('","type":"');
const DATA_HEAD = Buffer.from('","data":');
const PREV_HEAD = Buffer.from(',"prev":"');
const HASH_HEAD = Buffer.from(',"hash":"');
/** `,"prev":"` + 64 hex + `"`. */
const PREV_TAIL = 74;
/** Positions of digits in `DDDD-DD-DDTDD:DD:DD.DDDZ`; the other characters are fixed. */
const TS_SHAPE = '0000-00-00T00:00:00.000Z';
const TS_BYTES = Buffer.from(TS_SHAPE);

const HEX_TABLE = new Uint8Array(256);
for (const c of '0123456789abcdef') HEX_TABLE[c.charCodeAt(0)] = 1;
/** 1 for bytes allowed in an event type after its first character. */
const TYPE_TABLE = new Uint8Array(256);
for (const c of 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:/-') TYPE_TABLE[c.charCodeAt(0)] = 1;

function bytesAt(line: Uint8Array, at: number, lit: Uint8Array): boolean {
  if (at + lit.length > line.length) return false;
  for (let i = 0; i < lit.length; i++) if (line[at + i] !== lit[i]) return false;
  return true;
}

function badShape(f: LineFacts, message: string): false {
  f.reason = 'bad_json';
  f.message = message;
  return false;
}

/**
 * Checks steps 2–4 of SPEC.md section 4 on one complete line, `buf[start, end)` (with its final
 * line feed), on its bytes: suffix shape, hash of the body, UTF-8, the body's exact shape, and
 * that `data` is one JSON value (scanned, not built). Fills `f` (offsets are into `buf`) and
 * returns true when the line passes. Does not check that the `prev` digits are hex: a caller that
 * finds `prev` unequal to the expected hash must check {@link isHex64} first and report
 * `bad_json` (step 4) rather than a sequence or link fault.
 */
export function inspectLine(buf: Buffer, start: number, end: number, f: LineFacts): boolean {
  f.reason = undefined;
  if (end - start < SUFFIX_BYTES + 1 || buf[end - 1] !== NL) return badShape(f, 'line is too short to hold an entry');
  const s = end - SUFFIX_BYTES;
  if (!bytesAt(buf, s, HASH_HEAD) || buf[end - 3] !== 0x22 || buf[end - 2] !== 0x7d) {
    return badShape(f, 'line does not end with ,"hash":"<64 lowercase hex>"}');
  }
  const body = buf.subarray(start, s);
  const computed = sha256Hex(body);
  const stored = buf.toString('latin1', s + 9, s + 73);
  // Equality with the computed hash (always lowercase hex) also proves the stored digits valid.
  if (stored !== computed) {
    if (!isHex64(stored)) return badShape(f, 'line does not end with ,"hash":"<64 lowercase hex>"}');
    f.reason = 'hash_mismatch';
    f.message = `hash mismatch — stored ${stored.slice(0, 4)}…, computed ${computed.slice(0, 4)}…`;
    return false;
  }
  f.hash = computed;
  // The suffix is ASCII (checked above), so the body decides whether the line is UTF-8.
  if (!isUtf8(body)) return badShape(f, 'line is not valid UTF-8');

  // {"seq":<digits>,"ts":"<time>","type":"<type>","data":
  const headError = 'entry does not start with {"seq":…,"ts":"…","type":"…","data": in that form';
  if (!bytesAt(buf, start, SEQ_HEAD)) return badShape(f, headError);
  let i = start + SEQ_HEAD.length;
  if (!((buf[i] as number) >= 0x31 && (buf[i] as number) <= 0x39)) return badShape(f, headError);
  let seq = 0;
  const digitsStart = i;
  while (i < s && (buf[i] as number) >= 0x30 && (buf[i] as number) <= 0x39) {
    seq = seq * 10 + ((buf[i] as number) - 0x30);
    i++;
  }
  if (i - digitsStart > 16 || !Number.isSafeInteger(seq)) return badShape(f, '"seq" is beyond 2^53 − 1');
  if (!bytesAt(buf, i, TS_HEAD)) return badShape(f, headError);
  i += TS_HEAD.length;
  for (let k = 0; k < TS_BYTES.length; k++) {
    const c = buf[i + k] as number;
    const want = TS_BYTES[k] as number;
    if (want === 0x30 ? c < 0x30 || c > 0x39 : c !== want) return badShape(f, headError);
  }
  i += TS_BYTES.length;
  if (!bytesAt(buf, i, TYPE_HEAD)) return badShape(f, headError);
  i += TYPE_HEAD.length;
  const typeStart = i;
  const first = buf[i] as number;
  if (!((first >= 0x30 && first <= 0x39) || (first >= 0x41 && first <= 0x5a) || (first >= 0x61 && first <= 0x7a))) {
    return badShape(f, headError);
  }
  while (i < s && TYPE_TABLE[buf[i] as number] === 1) i++;
  if (i - typeStart > 128 || !bytesAt(buf, i, DATA_HEAD)) return badShape(f, headError);
  f.typeStart = typeStart;
  f.typeEnd = i;
  f.dataStart = i + DATA_HEAD.length;

  // ,"prev":"<64 hex>"   (digits checked by the caller, see above)
  const at = s - PREV_TAIL;
  if (at < f.dataStart || !bytesAt(buf, at, PREV_HEAD) || buf[s - 1] !== 0x22) {
    return badShape(f, 'entry does not end with "prev":"<64 lowercase hex>"');
  }
  f.prevStart = at + PREV_HEAD.length;
  f.dataEnd = at;
  if (!isJsonValue(buf, f.dataStart, f.dataEnd)) return badShape(f, '"data" is not one JSON value');
  f.seq = seq;
  return true;
}

/** Whether the checked line's type starts with `audit.` (the log's own entries). */
export function isAuditType(line: Buffer, f: LineFacts): boolean {
  return f.typeEnd - f.typeStart > 6 && bytesAt(line, f.typeStart, AUDIT_PREFIX);
}
const AUDIT_PREFIX = Buffer.from('audit.');

/**
 * Checks one complete line (SPEC.md section 4, steps 2–4, including that `prev` is hex) and
 * returns the entry with its data parsed. Sequence and link checks need context: the caller's.
 */
export function checkLine(line: Uint8Array): LineCheck {
  const buf = Buffer.isBuffer(line) ? line : Buffer.from(line.buffer, line.byteOffset, line.byteLength);
  const f = newLineFacts();
  if (!inspectLine(buf, 0, buf.length, f)) return { ok: false, reason: f.reason ?? 'bad_json', message: f.message };
  const prev = buf.toString('latin1', f.prevStart, f.prevStart + 64);
  if (!isHex64(prev)) return { ok: false, reason: 'bad_json', message: 'entry does not end with "prev":"<64 lowercase hex>"' };
  const entry: AuditEntry = {
    seq: f.seq,
    ts: buf.toString('latin1', f.typeStart - TYPE_HEAD.length - TS_SHAPE.length, f.typeStart - TYPE_HEAD.length),
    type: buf.toString('latin1', f.typeStart, f.typeEnd),
    data: JSON.parse(buf.toString('utf8', f.dataStart, f.dataEnd)) as JsonValue,
    prev,
    hash: f.hash,
  };
  return { ok: true, entry };
}

/** Whether `s` is 64 lowercase hex digits. */
export function isHex64(s: unknown): s is string {
  if (typeof s !== 'string' || s.length !== 64) return false;
  for (let i = 0; i < 64; i++) {
    const c = s.charCodeAt(i);
    if (c > 0xff || HEX_TABLE[c] !== 1) return false;
  }
  return true;
}
