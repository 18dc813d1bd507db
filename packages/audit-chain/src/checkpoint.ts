import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject, sign, verify } from 'node:crypto';
import { type FileHandle, readFile } from 'node:fs/promises';
import { AuditError, describeCause } from './errors.js';
import { GENESIS_HASH, isHex64, sha256Hex } from './format.js';
import { lastLine } from './lines.js';
import { openRegular } from './regular-file.js';

/** One checkpoint: the log had `entries` entries and the last one's hash was `head`. */
export interface Checkpoint {
  entries: number;
  head: string;
  /** Segment holding entry `entries`. */
  segment: number;
  /** Byte length of that segment through entry `entries`. */
  offset: number;
  time: string;
  /** 16 hex digits identifying the signing key (signed checkpoints only). */
  key_id?: string;
  /** Base64 Ed25519 signature over {@link checkpointNote} (signed checkpoints only). */
  sig?: string;
}

const TIME_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** The exact text a checkpoint signature covers (SPEC.md section 5.2). */
export function checkpointNote(cp: Pick<Checkpoint, 'entries' | 'head' | 'segment' | 'offset' | 'time'>): string {
  return (
    'forge-audit-chain checkpoint v1\n' +
    `entries ${cp.entries}\n` +
    `head ${cp.head}\n` +
    `segment ${cp.segment} ${cp.offset}\n` +
    `time ${cp.time}\n`
  );
}

/** Serialises a checkpoint as its line in the checkpoint file (with the line feed). */
export function checkpointLine(cp: Checkpoint): string {
  const base = `{"entries":${cp.entries},"head":"${cp.head}","segment":${cp.segment},"offset":${cp.offset},"time":"${cp.time}"`;
  return cp.sig ? `${base},"key_id":"${cp.key_id}","sig":"${cp.sig}"}\n` : `${base}}\n`;
}

/** Parses one checkpoint line (without its line feed); returns an error message when malformed. */
export function parseCheckpoint(text: string): Checkpoint | string {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return 'not JSON';
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return 'not a JSON object';
  const c = v as Record<string, unknown>;
  const int = (x: unknown, min: number) => typeof x === 'number' && Number.isSafeInteger(x) && x >= min;
  if (!int(c.entries, 0)) return '"entries" must be a non-negative integer';
  if (!isHex64(c.head)) return '"head" must be 64 lowercase hex digits';
  if (!int(c.segment, 1)) return '"segment" must be a positive integer';
  if (!int(c.offset, 0)) return '"offset" must be a non-negative integer';
  if (typeof c.time !== 'string' || !TIME_RE.test(c.time)) return '"time" must be an RFC 3339 UTC time with milliseconds';
  if (c.entries === 0 && (c.head !== GENESIS_HASH || c.segment !== 1 || c.offset !== 0)) {
    return 'a checkpoint of 0 entries must have the genesis head, segment 1 and offset 0';
  }
  const signed = 'sig' in c || 'key_id' in c;
  if (signed) {
    if (typeof c.key_id !== 'string' || !/^[0-9a-f]{16}$/.test(c.key_id)) return '"key_id" must be 16 lowercase hex digits';
    if (typeof c.sig !== 'string' || !/^[A-Za-z0-9+/]{86}==$/.test(c.sig)) return '"sig" must be base64 of 64 bytes';
  }
  const allowed = new Set(['entries', 'head', 'segment', 'offset', 'time', 'key_id', 'sig']);
  const extra = Object.keys(c).find((k) => !allowed.has(k));
  if (extra) return `unknown field "${extra}"`;
  return c as unknown as Checkpoint;
}

/** 16-hex key id: first 8 bytes of SHA-256 over the raw 32-byte Ed25519 public key. */
export function keyId(publicKey: KeyObject): string {
  const der = publicKey.export({ format: 'der', type: 'spki' });
  return sha256Hex(der.subarray(der.length - 32)).slice(0, 16);
}

export function signCheckpoint(cp: Checkpoint, privateKey: KeyObject): Checkpoint {
  const pub = createPublicKey(privateKey);
  const sig = sign(null, Buffer.from(checkpointNote(cp)), privateKey).toString('base64');
  return { ...cp, key_id: keyId(pub), sig };
}

export function verifyCheckpointSignature(cp: Checkpoint, publicKey: KeyObject): boolean {
  if (!cp.sig) return false;
  try {
    return verify(null, Buffer.from(checkpointNote(cp)), publicKey, Buffer.from(cp.sig, 'base64'));
  } catch {
    return false;
  }
}

/** A key given as a `KeyObject`, PEM text, or (for the CLI) a path read by {@link loadKey}. */
export type KeyInput = KeyObject | string;

/** Turns PEM text or a KeyObject into an Ed25519 key of the wanted kind; throws `invalid_key`. */
export function toKey(input: KeyInput, kind: 'private' | 'public', source = 'key'): KeyObject {
  let key: KeyObject;
  try {
    if (typeof input !== 'string') key = input;
    else key = kind === 'private' ? createPrivateKey(input) : createPublicKey(input);
  } catch (err) {
    throw new AuditError(
      'invalid_key',
      `${source} is not a PEM ${kind === 'private' ? 'PRIVATE KEY (PKCS #8)' : 'PUBLIC KEY (SPKI)'}: ${(err as Error).message}; create a pair with "forge-audit keygen <prefix>"`,
      { cause: err },
    );
  }
  if (kind === 'public' && key.type === 'private') key = createPublicKey(key);
  if (key.asymmetricKeyType !== 'ed25519' || (kind === 'private' ? key.type !== 'private' : key.type !== 'public')) {
    throw new AuditError(
      'invalid_key',
      `${source} must be an Ed25519 ${kind} key (got ${key.asymmetricKeyType ?? 'unknown'} ${key.type}); create a pair with "forge-audit keygen <prefix>"`,
    );
  }
  return key;
}

/** Reads a PEM key file; throws `invalid_key` naming the file. */
export async function loadKey(path: string, kind: 'private' | 'public'): Promise<KeyObject> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new AuditError('invalid_key', `cannot read ${kind} key ${path}: ${(err as Error).message}`, { cause: err });
  }
  return toKey(text, kind, path);
}

/** Generates an Ed25519 key pair as PEM text (private: PKCS #8, public: SPKI). */
export function generateSigningKeys(): { privateKey: string; publicKey: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return {
    privateKey: privateKey.export({ format: 'pem', type: 'pkcs8' }).toString(),
    publicKey: publicKey.export({ format: 'pem', type: 'spki' }).toString(),
  };
}

/** The last well-formed checkpoint of the file (signed by `signedBy`, when given), read from its end (never the whole file). */
export async function latestCheckpoint(path: string, signedBy?: KeyObject): Promise<Checkpoint | undefined> {
  let fh: FileHandle;
  try {
    fh = await openRegular(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new AuditError('io_error', `cannot read checkpoints ${path}: ${describeCause(err)}`, { cause: err });
  }
  try {
    let end = (await fh.stat()).size;
    for (;;) {
      const l = await lastLine(fh, end);
      if (!l) return undefined;
      end = l.start;
      if (l.torn) continue; // an interrupted checkpoint write
      const cp = parseCheckpoint(l.line.toString('utf8', 0, l.line.length - 1));
      if (typeof cp !== 'string' && (!signedBy || verifyCheckpointSignature(cp, signedBy))) return cp;
    }
  } finally {
    await fh.close();
  }
}
