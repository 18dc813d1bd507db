/**
 * Signed notes (C2SP signed-note) and the checkpoints they carry (C2SP tlog-checkpoint): the
 * format transparency logs, their witnesses and monitors read, and that the Go checksum
 * database's `sumdb/note` opens.
 *
 * A note is UTF-8 text (no control character but the line feed, ending with one), a blank line,
 * then one signature line per signer: `— <name> <base64(key ID ‖ signature)>`. For an Ed25519
 * key the key ID is the first 4 bytes (big-endian) of SHA-256(name ‖ "\n" ‖ 0x01 ‖ public key),
 * and the signature is Ed25519 over the text. A verifier key is written
 * `<name>+<key ID, 8 hex digits>+<base64(0x01 ‖ public key)>`.
 *
 * A checkpoint's text is the log's origin line, the tree size in decimal, the tree head in
 * base64, then optional extension lines.
 */
import { createHash, createPublicKey, type KeyObject, sign, verify } from 'node:crypto';
import { HASH_SIZE } from './merkle.js';

const ED25519 = 1;
/** A C2SP tlog-cosignature (cosignature/v1): Ed25519 over a header, a time line and the text. */
const COSIGNATURE_V1 = 4;
const SIGNATURE_PREFIX = '\u2014 ';
/** Most signature lines a note may carry (more is refused unread). */
const MAX_SIGNATURES = 100;

/** A key name: not empty, no white space, no `+`. */
function validName(name: string): boolean {
  return name !== '' && !/[\s+]/u.test(name);
}

/** The 32 raw bytes of an Ed25519 public key. */
function rawPublic(key: KeyObject): Buffer {
  const jwk = key.export({ format: 'jwk' });
  if (key.asymmetricKeyType !== 'ed25519' || typeof jwk.x !== 'string') throw new TypeError('a note key is an Ed25519 key');
  return Buffer.from(jwk.x, 'base64url');
}

/** The key ID of an Ed25519 key under `name` (as a cosigner's with `alg` 4). */
export function noteKeyId(name: string, publicKey: KeyObject, alg: number = ED25519): number {
  const encoded = Buffer.concat([Buffer.from([alg]), rawPublic(publicKey)]);
  return createHash('sha256').update(`${name}\n`).update(encoded).digest().readUInt32BE(0);
}

/** The verifier key (`name+keyid+base64`) of an Ed25519 public key, or of the private key's. */
export function noteVerifierKey(name: string, key: KeyObject): string {
  return verifierKey(name, key, ED25519);
}

/**
 * The verifier key of a cosigner (a witness): its Ed25519 key with signature type 4, whose
 * signatures are C2SP tlog-cosignature `cosignature/v1` (a time, then Ed25519).
 */
export function cosignerVerifierKey(name: string, key: KeyObject): string {
  return verifierKey(name, key, COSIGNATURE_V1);
}

function verifierKey(name: string, key: KeyObject, alg: number): string {
  if (!validName(name)) throw new TypeError(`"${name}" is not a key name (no white space, no "+", not empty)`);
  const pub = key.type === 'private' ? createPublicKey(key) : key;
  const encoded = Buffer.concat([Buffer.from([alg]), rawPublic(pub)]);
  return `${name}+${noteKeyId(name, pub, alg).toString(16).padStart(8, '0')}+${encoded.toString('base64')}`;
}

/** What a cosignature/v1 signs: the header, the time line, then the note's text. */
function cosignedMessage(text: string, time: number): Buffer {
  return Buffer.from(`cosignature/v1\ntime ${time}\n${text}`, 'utf8');
}

/**
 * A cosignature line (C2SP tlog-cosignature, `cosignature/v1`) on a note's `text` by `signer` at
 * `time` (seconds since the epoch): `— <name> base64(key ID ‖ u64 time ‖ Ed25519 signature)`.
 */
export function cosignNote(text: string, signer: NoteSigner, time: number): string {
  const problem = textProblem(text);
  if (problem) throw new TypeError(`a note's text ${problem}`);
  if (!validName(signer.name)) throw new TypeError(`"${signer.name}" is not a key name (no white space, no "+", not empty)`);
  if (!Number.isSafeInteger(time) || time < 0) throw new TypeError(`a cosignature's time is whole seconds ≥ 0 (got ${time})`);
  const head = Buffer.alloc(12);
  head.writeUInt32BE(noteKeyId(signer.name, createPublicKey(signer.privateKey), COSIGNATURE_V1), 0);
  head.writeBigUInt64BE(BigInt(time), 4);
  const sig = sign(null, cosignedMessage(text, time), signer.privateKey);
  return `${SIGNATURE_PREFIX}${signer.name} ${Buffer.concat([head, sig]).toString('base64')}\n`;
}

/** A note signer: the key's name and its Ed25519 private key. */
export interface NoteSigner {
  name: string;
  privateKey: KeyObject;
}

/** The text with a signature line per signer (C2SP signed-note). */
export function signNote(text: string, signers: readonly NoteSigner[]): string {
  const problem = textProblem(text);
  if (problem) throw new TypeError(`a note's text ${problem}`);
  let out = `${text}\n`;
  for (const s of signers) {
    if (!validName(s.name)) throw new TypeError(`"${s.name}" is not a key name (no white space, no "+", not empty)`);
    const id = Buffer.alloc(4);
    id.writeUInt32BE(noteKeyId(s.name, createPublicKey(s.privateKey)));
    const sig = sign(null, Buffer.from(text, 'utf8'), s.privateKey);
    out += `${SIGNATURE_PREFIX}${s.name} ${Buffer.concat([id, sig]).toString('base64')}\n`;
  }
  return out;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: finding them is the point
const CONTROL = /[\x00-\x09\x0b-\x1f]/;

function textProblem(text: string): string | undefined {
  if (text === '' || !text.endsWith('\n')) return 'must end with a line feed';
  if (CONTROL.test(text)) return 'holds a control character other than the line feed';
  if (text.includes('\n\n')) return 'holds a blank line (it would end the text)';
  return undefined;
}

/** A signature on a note, by key name and ID; a cosignature's carries its time (seconds). */
export interface NoteSignature {
  name: string;
  keyId: number;
  time?: number;
}

/** An opened note: its text, the signatures of known keys that verified, and the others. */
export type OpenedNote =
  | { ok: true; text: string; verified: NoteSignature[]; unknown: NoteSignature[] }
  | { ok: false; reason: 'malformed' | 'unverified' | 'bad_signature'; message: string };

/** A known verifier key, parsed. */
interface Verifier {
  name: string;
  keyId: number;
  key: KeyObject;
  /** 1: a signer's Ed25519 signature; 4: a cosigner's cosignature/v1. */
  alg: number;
}

/** Parses a verifier key (`name+keyid+base64(0x01 ‖ public key)`), or says why it is not one. */
export function parseVerifierKey(vkey: string): Verifier | string {
  // The base64 key may hold "+": only the first two separate fields.
  const first = vkey.indexOf('+');
  const second = first < 0 ? -1 : vkey.indexOf('+', first + 1);
  const name = first < 0 ? '' : vkey.slice(0, first);
  const hex = second < 0 ? '' : vkey.slice(first + 1, second);
  const b64 = second < 0 ? '' : vkey.slice(second + 1);
  if (!name || !hex || !b64 || !validName(name) || !/^[0-9a-f]{8}$/i.test(hex) || Buffer.from(b64, 'base64').toString('base64') !== b64)
    return 'is not name+keyid+key (8 hex digits, then the base64 key)';
  const encoded = Buffer.from(b64, 'base64');
  const alg = encoded[0] as number;
  if (encoded.length !== 33 || (alg !== ED25519 && alg !== COSIGNATURE_V1))
    return 'is not an Ed25519 verifier key (algorithm byte 1, or 4 for a cosigner, and 32 bytes)';
  const key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: encoded.subarray(1).toString('base64url') }, format: 'jwk' });
  const keyId = Number.parseInt(hex, 16);
  if (noteKeyId(name, key, alg) !== keyId) return 'has a key ID that is not its key’s';
  return { name, keyId, key, alg };
}

/** Opens a signed note, checking every signature by a key in `verifierKeys`; at least one must verify. */
export function openNote(message: string | Uint8Array, verifierKeys: readonly string[]): OpenedNote {
  const bytes = typeof message === 'string' ? Buffer.from(message, 'utf8') : Buffer.from(message);
  const msg = bytes.toString('utf8');
  const malformed = (why: string): OpenedNote => ({ ok: false, reason: 'malformed', message: `not a signed note: ${why}` });
  if (!Buffer.from(msg, 'utf8').equals(bytes)) return malformed('it is not UTF-8');
  if (CONTROL.test(msg)) return malformed('it holds a control character other than the line feed');
  const split = msg.lastIndexOf('\n\n');
  if (split < 0) return malformed('no blank line before the signatures');
  const text = msg.slice(0, split + 1);
  const block = msg.slice(split + 2);
  if (block === '' || !block.endsWith('\n')) return malformed('the signatures do not end with a line feed');
  const known: Verifier[] = [];
  for (const v of verifierKeys) {
    const parsed = parseVerifierKey(v);
    if (typeof parsed === 'string') throw new TypeError(`verifier key "${v}" ${parsed}`);
    known.push(parsed);
  }
  const verified: NoteSignature[] = [];
  const unknown: NoteSignature[] = [];
  const lines = block.slice(0, -1).split('\n');
  if (lines.length > MAX_SIGNATURES) return malformed(`more than ${MAX_SIGNATURES} signatures`);
  for (const line of lines) {
    if (!line.startsWith(SIGNATURE_PREFIX)) return malformed(`a signature line does not start with "${SIGNATURE_PREFIX}"`);
    const rest = line.slice(SIGNATURE_PREFIX.length);
    const space = rest.indexOf(' ');
    const name = space < 0 ? rest : rest.slice(0, space);
    const b64 = space < 0 ? '' : rest.slice(space + 1);
    const raw = Buffer.from(b64, 'base64');
    if (!validName(name) || b64 === '' || raw.toString('base64') !== b64 || raw.length < 5)
      return malformed(`the signature line of "${name}" is not name and base64`);
    const keyId = raw.readUInt32BE(0);
    const v = known.find((k) => k.name === name && k.keyId === keyId);
    if (!v) {
      unknown.push({ name, keyId });
      continue;
    }
    if (verified.some((s) => s.name === name && s.keyId === keyId)) continue;
    const bad: OpenedNote = {
      ok: false,
      reason: 'bad_signature',
      message: `the ${v.alg === COSIGNATURE_V1 ? 'cosignature' : 'signature'} of ${name} (key ${keyId.toString(16).padStart(8, '0')}) does not verify`,
    };
    if (v.alg === COSIGNATURE_V1) {
      if (raw.length !== 4 + 8 + 64) return bad;
      const time = raw.readBigUInt64BE(4);
      if (time > BigInt(Number.MAX_SAFE_INTEGER) || !verify(null, cosignedMessage(text, Number(time)), v.key, raw.subarray(12))) return bad;
      verified.push({ name, keyId, time: Number(time) });
      continue;
    }
    if (!verify(null, Buffer.from(text, 'utf8'), v.key, raw.subarray(4))) return bad;
    verified.push({ name, keyId });
  }
  if (verified.length === 0)
    return {
      ok: false,
      reason: 'unverified',
      message: `no signature by a known key (signed by ${unknown.map((u) => u.name).join(', ') || 'no one'})`,
    };
  return { ok: true, text, verified, unknown };
}

/** A tree checkpoint (C2SP tlog-checkpoint): which log, how many leaves, their tree head. */
export interface TreeCheckpoint {
  origin: string;
  size: number;
  root: Uint8Array;
  /** Extension lines, in order (each non-empty, no line feed). */
  extensions?: string[];
}

/** The text of a tree checkpoint (sign it with {@link signNote}). */
export function formatTreeCheckpoint(cp: TreeCheckpoint): string {
  if (cp.origin === '' || cp.origin.includes('\n')) throw new TypeError('a checkpoint origin is one non-empty line');
  if (!Number.isSafeInteger(cp.size) || cp.size < 0) throw new TypeError(`a checkpoint size is a whole number ≥ 0 (got ${cp.size})`);
  if (cp.root.length !== HASH_SIZE) throw new TypeError(`a checkpoint root is ${HASH_SIZE} bytes`);
  const ext = cp.extensions ?? [];
  if (ext.some((e) => e === '' || e.includes('\n'))) throw new TypeError('a checkpoint extension is one non-empty line');
  return [cp.origin, String(cp.size), Buffer.from(cp.root).toString('base64'), ...ext].map((l) => `${l}\n`).join('');
}

/** The checkpoint a note's text holds, or why it holds none. */
export function parseTreeCheckpoint(text: string): TreeCheckpoint | string {
  if (!text.endsWith('\n')) return 'a checkpoint ends with a line feed';
  const [origin, size, root, ...extensions] = text.slice(0, -1).split('\n');
  if (!origin) return 'a checkpoint starts with its origin line';
  if (!size || !/^(0|[1-9][0-9]*)$/.test(size) || !Number.isSafeInteger(Number(size))) return `"${size}" is not a tree size`;
  const raw = Buffer.from(root ?? '', 'base64');
  if (raw.length !== HASH_SIZE || raw.toString('base64') !== root) return `"${root}" is not a base64 tree head`;
  if (extensions.some((e) => e === '')) return 'a checkpoint holds an empty line';
  return { origin, size: Number(size), root: raw, ...(extensions.length > 0 ? { extensions } : {}) };
}
