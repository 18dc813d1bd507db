/**
 * An audit log line's shape (SPEC.md section 2), read from its bytes: no string is made for a line
 * that verifies, and the page can check a hundred thousand lines a second. Whether `data` is one
 * JSON value is decided by the same scan `forge-audit verify` runs (`@forge/audit-chain/json-scan`),
 * so the two agree on every line; UTF-8 validity is the caller's (it decodes a batch of lines at once).
 */
import { isJsonValue } from '@forge/audit-chain/json-scan';

/** `,"hash":"<64 hex>"}` and the line feed: the suffix every complete line ends with. */
export const SUFFIX_LEN = 76;
/** `,"prev":"<64 hex>"`: what the hashed body ends with. */
const TAIL_LEN = 74;
const MAX_INT = 2 ** 53 - 1;

// Templates: each byte stands for itself, except DIGIT (0-9) and HEX (0-9, a-f).
const DIGIT = 1;
const HEX = 2;
const template = (t: string) => Uint8Array.from(t, (c) => (c === '#' ? DIGIT : c === '%' ? HEX : c.charCodeAt(0)));
const SUFFIX = template(`,"hash":"${'%'.repeat(64)}"}\n`);
const TAIL = template(`,"prev":"${'%'.repeat(64)}"`);
const SEQ = template('{"seq":');
const TS = template(',"ts":"####-##-##T##:##:##.###Z","type":"');
const DATA = template('","data":');
/** A type's characters: 2 for those it may start with (`[A-Za-z0-9]`), 1 for those it may go on with (`[_.:/-]`). */
const TYPE = new Uint8Array(256);
for (const c of 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789') TYPE[c.charCodeAt(0)] = 2;
for (const c of '_.:/-') TYPE[c.charCodeAt(0)] = 1;
const HEX_CODES = Uint8Array.from('0123456789abcdef', (c) => c.charCodeAt(0));

/** Whether `b[at, at + t.length)` fits template `t` (and lies before `end`). */
function fits(b: Uint8Array, at: number, end: number, t: Uint8Array): boolean {
  if (at < 0 || at + t.length > end) return false;
  for (let k = 0; k < t.length; k++) {
    const c = b[at + k] as number;
    const w = t[k] as number;
    if (w === DIGIT ? c < 0x30 || c > 0x39 : w === HEX ? !((c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66)) : c !== w) return false;
  }
  return true;
}

/** Step 2 of SPEC section 4: the line `b[start, end)` (its line feed included) ends with the hash suffix. */
export const suffixFits = (b: Uint8Array, start: number, end: number): boolean =>
  end - start > SUFFIX_LEN && fits(b, end - SUFFIX_LEN, end, SUFFIX);

/** Whether the 64 hex digits at `b[at]` spell the 32 bytes `d`. */
export function hexIs(b: Uint8Array, at: number, d: Uint8Array): boolean {
  for (let k = 0; k < 32; k++) {
    const v = d[k] as number;
    if (b[at + 2 * k] !== HEX_CODES[v >> 4] || b[at + 2 * k + 1] !== HEX_CODES[v & 15]) return false;
  }
  return true;
}

/** Where the stored hash's digits of the line ending at `end` are. */
export const hashAt = (end: number) => end - SUFFIX_LEN + 9;

/** What the walk needs of a line whose shape passed: offsets into the batch's bytes. */
export class LineFacts {
  seq = 0;
  typeStart = 0;
  typeEnd = 0;
  dataStart = 0;
  dataEnd = 0;
  /** Where the `prev` digits are. */
  prevAt = 0;
}

/**
 * Step 4 of SPEC section 4 on the line `b[start, end)` whose suffix fits: the body is exactly
 * `{"seq":N,"ts":"…","type":"…","data":<one JSON value>,"prev":"<64 hex>"`, N at most 2^53 − 1.
 * Fills `f` and says whether it holds.
 */
export function shapeFits(b: Uint8Array, start: number, end: number, f: LineFacts): boolean {
  const bodyEnd = end - SUFFIX_LEN;
  if (!fits(b, start, bodyEnd, SEQ)) return false;
  let i = start + SEQ.length;
  if (!(b[i] !== undefined && (b[i] as number) >= 0x31 && (b[i] as number) <= 0x39)) return false;
  let seq = 0;
  const digits = i;
  while (i < bodyEnd && (b[i] as number) >= 0x30 && (b[i] as number) <= 0x39) seq = seq * 10 + ((b[i++] as number) - 0x30);
  if (i - digits > 16 || seq > MAX_INT || !fits(b, i, bodyEnd, TS)) return false;
  i += TS.length;
  f.typeStart = i;
  if (i >= bodyEnd || TYPE[b[i] as number] !== 2) return false;
  while (i < bodyEnd && (TYPE[b[i] as number] as number) > 0) i++;
  if (i - f.typeStart > 128 || !fits(b, i, bodyEnd, DATA)) return false;
  f.typeEnd = i;
  f.dataStart = i + DATA.length;
  f.dataEnd = bodyEnd - TAIL_LEN;
  if (f.dataEnd < f.dataStart || !fits(b, f.dataEnd, bodyEnd, TAIL)) return false;
  if (!isJsonValue(b, f.dataStart, f.dataEnd)) return false;
  f.seq = seq;
  f.prevAt = f.dataEnd + 9;
  return true;
}

const ascii = (s: string) => Uint8Array.from(s, (c) => c.charCodeAt(0));
export const SEGMENT_TYPE = ascii('audit.segment');
export const SEALED_TYPE = ascii('audit.sealed');

/** Whether the line's type is exactly `type`. */
export function typeIs(b: Uint8Array, f: LineFacts, type: Uint8Array): boolean {
  if (f.typeEnd - f.typeStart !== type.length) return false;
  for (let k = 0; k < type.length; k++) if (b[f.typeStart + k] !== type[k]) return false;
  return true;
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** SPEC 4: the line's `data.segment` is the JSON number `n` (booleans and strings never match). */
export function segmentIs(b: Uint8Array, f: LineFacts, n: number): boolean {
  let data: unknown;
  try {
    data = JSON.parse(utf8.decode(b.subarray(f.dataStart, f.dataEnd)));
  } catch {
    return false; // never, for a line whose shape fits: the scan and JSON.parse agree on what is JSON
  }
  return data !== null && typeof data === 'object' && !Array.isArray(data) && (data as { segment?: unknown }).segment === n;
}

/**
 * Which of the lines `b[ends[i-1], ends[i])` are not UTF-8: undefined when all are (one decode of
 * the whole batch, the usual case), else a flag per line.
 */
export function notUtf8(b: Uint8Array, ends: readonly number[]): Uint8Array | undefined {
  try {
    utf8.decode(b.subarray(0, ends[ends.length - 1] ?? 0));
    return undefined;
  } catch {
    const bad = new Uint8Array(ends.length);
    let start = 0;
    for (let i = 0; i < ends.length; i++) {
      try {
        utf8.decode(b.subarray(start, ends[i]));
      } catch {
        bad[i] = 1;
      }
      start = ends[i] as number;
    }
    return bad;
  }
}
