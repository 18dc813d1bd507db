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

/** Throws `invalid_type` unless `type` fits the grammar; `audit.*` is reserved unless `internal`. */
export function assertEventType(type: unknown, internal = false): asserts type is string {
  if (typeof type !== 'string' || !TYPE_RE.test(type)) {
    throw new AuditError(
      'invalid_type',
      `event type ${JSON.stringify(type)} is invalid: use 1–128 characters from A–Z a–z 0–9 _ . : / -, starting with a letter or digit (for example "user.login")`,
    );
  }
  if (!internal && type.startsWith('audit.')) {
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

/** Builds one complete entry line (with its trailing line feed) and returns it with its hash. */
export function buildLine(seq: number, ts: string, type: string, dataJson: string, prev: string): { line: Buffer; hash: string } {
  const body = Buffer.from(`{"seq":${seq},"ts":"${ts}","type":"${type}","data":${dataJson},"prev":"${prev}"`);
  const hash = sha256Hex(body);
  const line = Buffer.allocUnsafe(body.length + SUFFIX_BYTES);
  body.copy(line, 0);
  line.write(`,"hash":"${hash}"}\n`, body.length, 'latin1');
  return { line, hash };
}

/** Result of checking one complete line (the bytes include the final line feed). */
export type LineCheck = { ok: true; entry: AuditEntry } | { ok: false; reason: 'bad_json' | 'hash_mismatch'; message: string };

/**
 * Checks steps 2–4 of SPEC.md section 4 on one complete line: suffix shape, hash of the body,
 * and the body's shape. Sequence and link checks need context and are the caller's.
 *
 * With `parseData` false (verify mode), `data` is only checked to be JSON, not built, and the
 * returned entry's `data` is `undefined` except for the log's own `audit.*` entries; and `prev`
 * is not checked to be hex: the caller must, before reporting a sequence or link fault for an
 * entry whose `prev` differs from the expected hash (verification needs no more, and this is
 * most of its cost).
 */
export function checkLine(line: Uint8Array, parseData = true): LineCheck {
  const n = line.length;
  if (n < SUFFIX_BYTES + 1 || line[n - 1] !== NL) {
    return { ok: false, reason: 'bad_json', message: 'line is too short to hold an entry' };
  }
  const s = n - SUFFIX_BYTES;
  const buf = Buffer.from(line.buffer, line.byteOffset, n);
  const suffix = buf.toString('latin1', s, n);
  const stored = suffix.slice(9, 73);
  // Comparing with the computed hash (always lowercase hex) validates the digits on the fast path.
  const computed = sha256Hex(buf.subarray(0, s));
  if (!suffix.startsWith(',"hash":"') || !suffix.endsWith('"}\n') || (stored !== computed && !isHex64(stored))) {
    return { ok: false, reason: 'bad_json', message: 'line does not end with ,"hash":"<64 lowercase hex>"}' };
  }
  if (stored !== computed) {
    return {
      ok: false,
      reason: 'hash_mismatch',
      message: `hash mismatch — stored ${stored.slice(0, 4)}…, computed ${computed.slice(0, 4)}…`,
    };
  }
  if (!isUtf8(buf)) return { ok: false, reason: 'bad_json', message: 'line is not valid UTF-8' };
  // The body's shape is checked on its bytes, not on a parsed object (SPEC.md section 4, step 4).
  // The head is ASCII by grammar, so decoding its bytes as latin1 keeps offsets equal to lengths.
  const head = HEAD_RE.exec(buf.toString('latin1', 0, Math.min(s, HEAD_MAX)));
  if (!head)
    return { ok: false, reason: 'bad_json', message: 'entry does not start with {"seq":…,"ts":"…","type":"…","data": in that form' };
  const seq = Number(head[1]);
  if (!Number.isSafeInteger(seq)) return { ok: false, reason: 'bad_json', message: '"seq" is beyond 2^53 − 1' };
  const dataStart = head[0].length;
  const dataEnd = s - PREV_TAIL;
  const prevText = dataEnd < dataStart ? '' : buf.toString('latin1', dataEnd, s);
  const prev = prevText.slice(9, 73);
  // In verify mode the caller compares `prev` with the expected hash, which validates the digits.
  if (!prevText.startsWith(',"prev":"') || prevText.charCodeAt(73) !== 0x22 || (parseData && !isHex64(prev))) {
    return { ok: false, reason: 'bad_json', message: 'entry does not end with "prev":"<64 lowercase hex>"' };
  }
  const type = head[3] as string;
  let data: JsonValue | undefined;
  if (parseData || type.startsWith('audit.')) {
    try {
      data = JSON.parse(buf.toString('utf8', dataStart, dataEnd));
    } catch (err) {
      return { ok: false, reason: 'bad_json', message: `"data" is not one JSON value (${(err as Error).message})` };
    }
  } else if (!isJsonValue(buf, dataStart, dataEnd)) {
    return { ok: false, reason: 'bad_json', message: '"data" is not one JSON value' };
  }
  const entry: AuditEntry = {
    seq,
    ts: head[2] as string,
    type,
    data: data as JsonValue,
    prev,
    hash: stored,
  };
  return { ok: true, entry };
}

/** Longest possible head: {"seq": + 16 digits + ,"ts":" + 24 + ","type":" + 128 + ","data": */
const HEAD_MAX = 7 + 16 + 7 + 24 + 10 + 128 + 9;
const HEAD_RE =
  /^\{"seq":([1-9][0-9]{0,15}),"ts":"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z)","type":"([A-Za-z0-9][A-Za-z0-9_.:/-]{0,127})","data":/;
/** `,"prev":"` + 64 hex + `"`. */
const PREV_TAIL = 74;
const HEX_TABLE = new Uint8Array(256);
for (const c of '0123456789abcdef') HEX_TABLE[c.charCodeAt(0)] = 1;

/** Whether `s` is 64 lowercase hex digits. */
export function isHex64(s: unknown): s is string {
  if (typeof s !== 'string' || s.length !== 64) return false;
  for (let i = 0; i < 64; i++) {
    const c = s.charCodeAt(i);
    if (c > 0xff || HEX_TABLE[c] !== 1) return false;
  }
  return true;
}
