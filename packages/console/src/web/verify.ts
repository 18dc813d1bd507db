/**
 * The audit log verified where it is shown: SPEC.md sections 4 and 5 (forge-audit-chain v1) over
 * the bytes of the log's files, with WebCrypto's SHA-256 and Ed25519 only. It reaches the verdict
 * `forge audit verify` reaches on the same files (the test runs both over every test vector), so
 * the page showing the log need not trust the server that sends it: the server only hands over
 * bytes, and any byte it changed is caught here as it would be there.
 *
 * Runs in a browser and in Node (both have `crypto.subtle` and `TextDecoder`).
 */

import type { Checkpoint } from '@forge/audit-chain';
import {
  hashAt,
  hexIs,
  LineFacts,
  notUtf8,
  SEALED_TYPE,
  SEGMENT_TYPE,
  SUFFIX_LEN,
  segmentIs,
  shapeFits,
  suffixFits,
  typeIs,
} from './lines.js';

export const GENESIS = '0'.repeat(64);
const MAX_INT = 2 ** 53 - 1;

/** Bytes WebCrypto takes (not over a SharedArrayBuffer). */
export type Bytes = Uint8Array<ArrayBuffer>;

/** What went wrong first, as SPEC.md section 4 names it. */
export type Reason =
  | 'torn_tail'
  | 'bad_json'
  | 'hash_mismatch'
  | 'segment_missing'
  | 'seq_gap'
  | 'broken_link'
  | 'truncated'
  | 'rollback'
  | 'bad_checkpoint'
  | 'signature_invalid';

/** The first bad entry: its seq, the file and line (from 1) where it is, and why. */
export interface FirstBad {
  seq: number;
  line: number;
  reason: Reason;
  file: string;
}

/** A verification's outcome, in the shape `forge-audit verify --json` prints. */
export interface Verdict {
  ok: boolean;
  /** Entries that verified (before the first bad one). */
  entries: number;
  /** The hash of the last entry that verified (genesis when none). */
  head: string;
  first_bad?: FirstBad;
  /** Checkpoints used; and the entries after the newest one (nothing vouches for them but the chain). */
  checkpoints: { used: number; ignored: number; latest?: number; not_yet_checkpointed: number };
  /** Bytes hashed, for the rate the page shows. */
  bytes: number;
}

/** The log's files as the verifier reads them. */
export interface LogSource {
  /** The log's base name (`forge.log`): its active segment. */
  base: string;
  /** The names of the files beside it (the server's directory listing); sealed segments are found among them. */
  names: readonly string[];
  /** A file's bytes, or undefined when it does not exist. */
  read(name: string): Promise<Bytes | undefined>;
  /**
   * A segment's bytes as they arrive (a fetch's body), or undefined when it does not exist: when
   * given, segments are verified as they stream, a batch of lines at a time, never held whole.
   */
  stream?(name: string): Promise<AsyncIterable<Bytes> | undefined>;
}

/** Options: a public key makes only checkpoints that key signed count, and at least one must (5.4). */
export interface VerifyOptions {
  /** The raw 32-byte Ed25519 key, or a PEM `PUBLIC KEY`. */
  publicKey?: Bytes | string;
  /**
   * Bytes of whole lines taken at once (1 MiB): WebCrypto is asynchronous, so the digests of a
   * batch are asked for together, and the next batch's while this one is checked.
   */
  batchBytes?: number;
}

const subtle = (): SubtleCrypto => {
  const s = globalThis.crypto?.subtle;
  if (!s) throw new Error('WebCrypto is not available here (a page must be served from a secure context: https, or http on loopback)');
  return s;
};

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));
function hex(buf: ArrayBuffer | Uint8Array): string {
  const b = buf instanceof Uint8Array ? buf : new Uint8Array(buf);
  let s = '';
  for (let i = 0; i < b.length; i++) s += HEX[b[i] as number];
  return s;
}

// A byte order mark is kept (not dropped): a line that starts with one is not a checkpoint.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The DER of an Ed25519 SubjectPublicKeyInfo up to the raw key (RFC 8410). */
const ED25519_SPKI = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];

/** The raw key of a PEM `PUBLIC KEY` (Ed25519 SubjectPublicKeyInfo, 44 bytes of DER), or of 32 raw bytes. */
export function rawPublicKey(key: Bytes | string): Bytes {
  if (typeof key !== 'string') {
    if (key.length !== 32) throw new Error(`an Ed25519 public key is 32 bytes, not ${key.length}`);
    return key;
  }
  const m = /-----BEGIN PUBLIC KEY-----([\s\S]*?)-----END PUBLIC KEY-----/.exec(key);
  if (!m) throw new Error('the key is not a PEM "PUBLIC KEY" block (paste the whole file, BEGIN and END lines included)');
  const der = Uint8Array.from(atob((m[1] as string).replace(/\s+/g, '')), (c) => c.charCodeAt(0));
  if (der.length !== 44 || !ED25519_SPKI.every((b, i) => der[i] === b))
    throw new Error(
      `the PEM key is not an Ed25519 public key (an Ed25519 key's DER is 44 bytes starting 302a300506032b6570032100; this one is ${der.length} bytes)`,
    );
  return der.slice(12);
}

/** SPEC 5.1: first 8 bytes of SHA-256 of the raw key, as 16 hex digits. */
export async function keyId(raw: Bytes): Promise<string> {
  return hex(await subtle().digest('SHA-256', raw)).slice(0, 16);
}

// ---- checkpoints (SPEC 5) ----

// biome-ignore lint/suspicious/noControlCharactersInRegex: JSON strings exclude them, so the pattern names them
const STR = /^"(?:[^"\\\u0000-\u001f]|\\["\\/bfnrt]|\\u[0-9A-Fa-f]{4})*"/;
const NUM = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/;
const INT = /^-?(?:0|[1-9][0-9]*)$/;
const HEX64 = /^[0-9a-f]{64}$/;
const HEX16 = /^[0-9a-f]{16}$/;
const TIME = /^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$/;
const B64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const FIELDS = new Set(['entries', 'head', 'segment', 'offset', 'time', 'key_id', 'sig']);

/**
 * One complete line of the checkpoint file as a checkpoint, or undefined when it is not one. A
 * checkpoint is a flat JSON object; integers must be written as integers (`1.0` is not one), so
 * the line is tokenized here rather than parsed by `JSON.parse`.
 */
function parseCheckpoint(line: string): Checkpoint | undefined {
  const fields = new Map<string, string | number>();
  let s = line.replace(/^[ \t\n\r]+/, '');
  if (s[0] !== '{') return undefined;
  s = s.slice(1).replace(/^[ \t\n\r]+/, '');
  if (s[0] === '}') s = s.slice(1);
  else
    for (;;) {
      const k = STR.exec(s);
      if (!k) return undefined;
      const key = JSON.parse(k[0]) as string;
      s = s.slice(k[0].length).replace(/^[ \t\n\r]+/, '');
      if (s[0] !== ':') return undefined;
      s = s.slice(1).replace(/^[ \t\n\r]+/, '');
      const str = STR.exec(s);
      const num = str ? null : NUM.exec(s);
      if (str) fields.set(key, JSON.parse(str[0]) as string);
      else if (num) fields.set(key, INT.test(num[0]) && num[0].length < 18 ? Number(num[0]) : Number.NaN);
      else return undefined; // a literal, an array or an object: valid JSON perhaps, never a checkpoint field
      s = s.slice((str ?? num)?.[0].length ?? 0).replace(/^[ \t\n\r]+/, '');
      if (s[0] === ',') {
        s = s.slice(1).replace(/^[ \t\n\r]+/, '');
        continue;
      }
      if (s[0] !== '}') return undefined;
      s = s.slice(1);
      break;
    }
  if (s.replace(/^[ \t\n\r]+/, '') !== '') return undefined;
  for (const k of fields.keys()) if (!FIELDS.has(k)) return undefined;
  const signed = fields.has('key_id');
  if (fields.size !== (signed ? 7 : 5) || signed !== fields.has('sig')) return undefined;
  const int = (k: string, min: number) => {
    const v = fields.get(k);
    return typeof v === 'number' && Number.isInteger(v) && v >= min && v <= MAX_INT ? v : undefined;
  };
  const str = (k: string, re: RegExp) => {
    const v = fields.get(k);
    return typeof v === 'string' && re.test(v) ? v : undefined;
  };
  const entries = int('entries', 0);
  const segment = int('segment', 1);
  const offset = int('offset', 0);
  const head = str('head', HEX64);
  const time = str('time', TIME);
  if (entries === undefined || segment === undefined || offset === undefined || head === undefined || time === undefined) return undefined;
  if (entries === 0 && (head !== GENESIS || segment !== 1 || offset !== 0)) return undefined;
  const cp: Checkpoint = { entries, head, segment, offset, time };
  if (signed) {
    const keyIdValue = str('key_id', HEX16);
    const sig = str('sig', B64);
    // Canonical padded base64 of 64 bytes: it decodes and encodes back to itself.
    if (keyIdValue === undefined || sig === undefined || sig.length !== 88 || btoa(atob(sig)) !== sig) return undefined;
    cp.key_id = keyIdValue;
    cp.sig = sig;
  }
  return cp;
}

function signedNote(cp: Checkpoint): Bytes {
  return new TextEncoder().encode(
    `forge-audit-chain checkpoint v1\nentries ${cp.entries}\nhead ${cp.head}\nsegment ${cp.segment} ${cp.offset}\ntime ${cp.time}\n`,
  );
}

interface CheckpointRead {
  used: Checkpoint[];
  ignored: number;
  fault?: FirstBad;
}

async function readCheckpoints(bytes: Bytes | undefined, name: string, pub: Bytes | undefined): Promise<CheckpointRead> {
  const used: Checkpoint[] = [];
  let ignored = 0;
  let key: CryptoKey | undefined;
  const id = pub ? await keyId(pub) : undefined;
  if (bytes) {
    let from = 0;
    for (let lineNo = 1; ; lineNo++) {
      const nl = bytes.indexOf(10, from);
      if (nl < 0) break; // an interrupted last write: ignored
      let text: string | undefined;
      try {
        text = utf8.decode(bytes.subarray(from, nl));
      } catch {
        text = undefined;
      }
      from = nl + 1;
      const cp = text === undefined ? undefined : parseCheckpoint(text);
      if (!cp) return { used, ignored, fault: { seq: 0, line: lineNo, reason: 'bad_checkpoint', file: name } };
      if (!pub) used.push(cp);
      else if (cp.key_id === id) {
        key ??= await subtle().importKey('raw', pub, { name: 'Ed25519' }, false, ['verify']);
        const sig = Uint8Array.from(atob(cp.sig as string), (c) => c.charCodeAt(0));
        if (!(await subtle().verify({ name: 'Ed25519' }, key, sig, signedNote(cp))))
          return { used, ignored, fault: { seq: cp.entries, line: lineNo, reason: 'signature_invalid', file: name } };
        used.push(cp);
      } else ignored++;
    }
  }
  if (pub && used.length === 0) return { used, ignored, fault: { seq: 0, line: 0, reason: 'signature_invalid', file: name } };
  return { used, ignored };
}

// ---- entries (SPEC 2 and 4) ----

/** The sealed segments' numbers among `names` (`<base>.NNNNNN`, exactly six digits or more without padding). */
export function sealedNumbers(base: string, names: readonly string[]): number[] {
  const out: number[] = [];
  for (const name of names) {
    if (!name.startsWith(`${base}.`)) continue;
    const digits = name.slice(base.length + 1);
    if (!/^[0-9]{6,}$/.test(digits)) continue;
    const n = Number(digits);
    if (n >= 1 && String(n).padStart(6, '0') === digits) out.push(n);
  }
  return out.sort((a, b) => a - b);
}

/** A file read whole, as one chunk (or none when it is empty or absent). */
async function whole(src: LogSource, name: string): Promise<Bytes[] | undefined> {
  const data = await src.read(name);
  return data === undefined ? undefined : data.length === 0 ? [] : [data];
}

/** Lines in one buffer: line i is `buf[ends[i - 1] ?? 0, ends[i])`, each with its line feed but perhaps the last (a torn tail). */
interface Batch {
  buf: Bytes;
  ends: number[];
}

function batchOf(buf: Bytes, from: number, to: number): Batch {
  const region = buf.subarray(from, to);
  const ends: number[] = [];
  for (let nl = region.indexOf(10); nl >= 0; nl = region.indexOf(10, nl + 1)) ends.push(nl + 1);
  if ((ends[ends.length - 1] ?? 0) < region.length) ends.push(region.length);
  return { buf: region, ends };
}

function joined(parts: Bytes[], length: number): Bytes {
  if (parts.length === 1) return parts[0] as Bytes;
  const buf = new Uint8Array(length);
  let at = 0;
  for (const p of parts) {
    buf.set(p, at);
    at += p.length;
  }
  return buf;
}

/**
 * The lines of a file arriving in chunks, about `size` bytes of whole lines at a time (a line cut
 * by a chunk is carried into the next batch; the last may be torn). Each byte is copied once at most.
 */
async function* batches(chunks: AsyncIterable<Bytes> | Iterable<Bytes>, size: number): AsyncGenerator<Batch> {
  let parts: Bytes[] = [];
  let held = 0;
  for await (const chunk of chunks) {
    if (chunk.length === 0) continue;
    parts.push(chunk);
    held += chunk.length;
    if (held < size) continue;
    const buf = joined(parts, held);
    let from = 0;
    for (let nl = buf.indexOf(10, from + size - 1); nl >= 0; nl = buf.indexOf(10, from + size - 1)) {
      yield batchOf(buf, from, nl + 1);
      from = nl + 1;
    }
    parts = from < buf.length ? [buf.subarray(from)] : [];
    held = buf.length - from;
  }
  if (held > 0) yield batchOf(joined(parts, held), 0, held);
}

/** A batch with the digests of its complete lines asked for (WebCrypto hashes them off this thread). */
interface Hashing extends Batch {
  digests: Promise<(ArrayBuffer | undefined)[]>;
}

function hashing(b: Batch): Hashing {
  const crypto = subtle();
  const asked: (Promise<ArrayBuffer> | undefined)[] = new Array(b.ends.length);
  let start = 0;
  for (let i = 0; i < b.ends.length; i++) {
    const end = b.ends[i] as number;
    asked[i] =
      b.buf[end - 1] === 10 && end - start > SUFFIX_LEN ? crypto.digest('SHA-256', b.buf.subarray(start, end - SUFFIX_LEN)) : undefined;
    start = end;
  }
  return { ...b, digests: Promise.all(asked) };
}

class Fault extends Error {
  constructor(
    readonly reason: Reason,
    readonly file: string,
    readonly line: number,
  ) {
    super(reason);
  }
}

/**
 * Verifies the log `src` names, as SPEC.md sections 4 and 5 say: the checkpoint file first, then
 * every segment's lines in order. Resolves to the verdict; rejects only when a file cannot be read
 * or the key is malformed.
 */
export async function verifyLog(src: LogSource, options: VerifyOptions = {}): Promise<Verdict> {
  const pub = options.publicKey === undefined ? undefined : rawPublicKey(options.publicKey);
  const size = options.batchBytes ?? 1 << 20;
  const cpName = `${src.base}.checkpoints`;
  const cps = await readCheckpoints(await src.read(cpName), cpName, pub);
  const counted = (entries: number) => {
    const latest = cps.used.reduce((m, cp) => Math.max(m, cp.entries), 0);
    return {
      used: cps.used.length,
      ignored: cps.ignored,
      ...(cps.used.length > 0 ? { latest } : {}),
      not_yet_checkpointed: Math.max(0, entries - latest),
    };
  };
  if (cps.fault) return { ok: false, entries: 0, head: GENESIS, first_bad: cps.fault, checkpoints: counted(0), bytes: 0 };

  const byEntry = new Map<number, Checkpoint[]>();
  let maxCp = 0;
  for (const cp of cps.used) {
    byEntry.set(cp.entries, [...(byEntry.get(cp.entries) ?? []), cp]);
    maxCp = Math.max(maxCp, cp.entries);
  }
  const sealed = new Set(sealedNumbers(src.base, src.names));
  const k = sealed.size === 0 ? 0 : Math.max(...sealed);
  let seq = 1;
  let prev: Uint8Array = new Uint8Array(32); // the genesis hash: 64 zeros
  let bytes = 0;
  const cur = new LineFacts();
  try {
    for (let n = 1; n <= k + 1; n++) {
      const active = n === k + 1;
      const name = active ? src.base : `${src.base}.${String(n).padStart(6, '0')}`;
      if (!active && !sealed.has(n)) throw new Fault('segment_missing', name, 0);
      const chunks = src.stream ? await src.stream(name) : await whole(src, name);
      if (chunks === undefined && !active) throw new Fault('segment_missing', name, 0);
      let lineNo = 0;
      let offset = 0;
      // The last line that verified: whether it sealed segment n.
      let sealedHere = false;
      const check = async (h: Hashing) => {
        const { buf, ends } = h;
        const notUtf = notUtf8(buf, ends);
        const digests = await h.digests;
        for (let i = 0; i < ends.length; i++) {
          const start = i === 0 ? 0 : (ends[i - 1] as number);
          const end = ends[i] as number;
          lineNo++;
          if (buf[end - 1] !== 10) {
            if (!active) throw new Fault('bad_json', name, lineNo);
            throw new Fault(maxCp >= seq ? 'truncated' : 'torn_tail', name, lineNo);
          }
          if (!suffixFits(buf, start, end)) throw new Fault('bad_json', name, lineNo);
          const digest = new Uint8Array(digests[i] as ArrayBuffer);
          bytes += end - start - SUFFIX_LEN;
          if (!hexIs(buf, hashAt(end), digest)) throw new Fault('hash_mismatch', name, lineNo);
          if (notUtf?.[i] || !shapeFits(buf, start, end, cur)) throw new Fault('bad_json', name, lineNo);
          if (lineNo === 1 && n > 1 && !(typeIs(buf, cur, SEGMENT_TYPE) && segmentIs(buf, cur, n)))
            throw new Fault('segment_missing', name, lineNo);
          if (lineNo === 1 && n === 1 && typeIs(buf, cur, SEGMENT_TYPE)) throw new Fault('segment_missing', name, lineNo);
          if (cur.seq !== seq) throw new Fault('seq_gap', name, lineNo);
          if (!hexIs(buf, cur.prevAt, prev)) throw new Fault('broken_link', name, lineNo);
          offset += end - start;
          const due = byEntry.get(cur.seq);
          if (due) {
            const head = hex(digest);
            for (const cp of due)
              if (cp.head !== head || cp.segment !== n || cp.offset !== offset) throw new Fault('rollback', name, lineNo);
          }
          seq = cur.seq + 1;
          prev = digest;
          sealedHere = !active && typeIs(buf, cur, SEALED_TYPE) && segmentIs(buf, cur, n);
        }
      };
      // One batch checked while the next one's digests are computed.
      let pending: Hashing | undefined;
      for await (const batch of batches(chunks ?? [], size)) {
        const next = hashing(batch);
        if (pending) await check(pending);
        pending = next;
      }
      if (pending) await check(pending);
      if (!active && !sealedHere) throw new Fault('truncated', name, lineNo + 1);
      if (active && maxCp >= seq) throw new Fault('truncated', name, lineNo + 1);
    }
  } catch (err) {
    if (!(err instanceof Fault)) throw err;
    return {
      ok: false,
      entries: seq - 1,
      head: hex(prev),
      first_bad: { seq, line: err.line, reason: err.reason, file: err.file },
      checkpoints: counted(seq - 1),
      bytes,
    };
  }
  return { ok: true, entries: seq - 1, head: hex(prev), checkpoints: counted(seq - 1), bytes };
}
