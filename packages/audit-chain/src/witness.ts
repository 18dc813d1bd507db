/**
 * A witness (C2SP tlog-witness): it cosigns a log's checkpoint only when that checkpoint is
 * consistent with the last one it cosigned for the same log, so that a log cannot show one
 * history to some and another to others, or cut its history and sign again, without a witness
 * noticing. The witness keeps, per log origin, the size and head it last cosigned; checking the
 * old size and recording the new checkpoint happen under one lock, across processes.
 *
 * `add-checkpoint` answers as the specification says: 200 with the cosignature line; 400 for a
 * body that is not a request or an old size above the checkpoint's; 403 when no key the witness
 * trusts for that origin signed it; 404 for an origin it does not witness; 409 (with the size it
 * holds, `text/x.tlog.size`) when the old size is not the one it last cosigned, or the same size
 * with another head; 422 when the consistency proof does not verify.
 */
import { createHash, type KeyObject } from 'node:crypto';
import { constants as fsc } from 'node:fs';
import { mkdir, open, rename } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import { syncDir } from './active-segment.js';
import { withDirLock } from './lock.js';
import { EMPTY_ROOT, HASH_SIZE, verifyConsistency } from './merkle.js';
import { cosignerVerifierKey, cosignNote, openNote, parseTreeCheckpoint } from './note.js';
import { readRegularFile } from './regular-file.js';

/** A log the witness cosigns for: its origin line and the verifier keys that sign its checkpoints. */
export interface WitnessedLog {
  origin: string;
  vkeys: string[];
}

/** Options of {@link openWitness}. */
export interface WitnessOptions {
  /** The witness's key name (a schema-less URL, say `witness.example/w1`). */
  name: string;
  /** Its Ed25519 private key. */
  privateKey: KeyObject;
  /** The logs it witnesses. */
  logs: readonly WitnessedLog[];
  /** Where it keeps, per log, the last checkpoint it cosigned (created when missing). */
  dir: string;
  /** Seconds since the epoch for cosignatures (default the clock). */
  now?: () => number;
}

/** An HTTP answer: status, content type, body. */
export interface WitnessAnswer {
  status: number;
  contentType: string;
  body: string;
}

/** What the witness holds for one log: the size and head it last cosigned. */
export interface WitnessRecord {
  size: number;
  root: string;
}

/** A running witness: its verifier key, what it holds, and `add-checkpoint`. */
export interface Witness {
  /** The cosigner verifier key (`name+keyid+base64(0x04 ‖ key)`) clients and logs are given. */
  readonly vkey: string;
  /** What it last cosigned for `origin`, if anything. */
  record(origin: string): Promise<WitnessRecord | undefined>;
  /** Answers one `POST add-checkpoint` body. */
  addCheckpoint(body: string): Promise<WitnessAnswer>;
}

/** The most consistency proof lines a request may carry (C2SP tlog-witness). */
const MAX_PROOF = 63;
/** The largest request body taken (a checkpoint with a few dozen signatures and a full proof). */
export const MAX_WITNESS_REQUEST_BYTES = 64 * 1024;

const text = (status: number, body: string, contentType = 'text/plain; charset=utf-8'): WitnessAnswer => ({
  status,
  contentType,
  body: body.endsWith('\n') ? body : `${body}\n`,
});

/** Opens (creating its directory) a witness. */
export async function openWitness(o: WitnessOptions): Promise<Witness> {
  await mkdir(o.dir, { recursive: true, mode: 0o700 });
  const vkey = cosignerVerifierKey(o.name, o.privateKey);
  const logs = new Map(o.logs.map((l) => [l.origin, l.vkeys]));
  const now = o.now ?? (() => Math.floor(Date.now() / 1000));
  const fileOf = (origin: string) => join(o.dir, `${createHash('sha256').update(origin).digest('hex')}.json`);
  const read = async (origin: string): Promise<WitnessRecord | undefined> => {
    const raw = await readRegularFile(fileOf(origin)).then(
      (b) => b.toString('utf8'),
      (err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') return undefined;
        throw err;
      },
    );
    if (raw === undefined) return undefined;
    const r = JSON.parse(raw) as { origin?: unknown; size?: unknown; root?: unknown };
    if (r.origin !== origin || !Number.isSafeInteger(r.size) || typeof r.root !== 'string')
      throw new Error(`the witness's record ${fileOf(origin)} is damaged: it cosigns nothing for ${origin} until it is restored`);
    return { size: r.size as number, root: r.root };
  };
  const write = async (origin: string, rec: WitnessRecord): Promise<void> => {
    const file = fileOf(origin);
    const tmp = `${file}.tmp-${process.pid}`;
    const fh = await open(tmp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_TRUNC, 0o600);
    try {
      await fh.writeFile(`${JSON.stringify({ origin, ...rec })}\n`);
      await fh.datasync();
    } finally {
      await fh.close();
    }
    await rename(tmp, file);
    await syncDir(o.dir);
  };
  // One request at a time in this process; the directory's lock for every process.
  let chain: Promise<unknown> = Promise.resolve();
  const serial = <T>(fn: () => Promise<T>): Promise<T> => {
    const p = chain.then(() => withDirLock(join(o.dir, 'lock'), fn, { timeoutMs: 30_000 }));
    chain = p.catch(() => {});
    return p;
  };

  return {
    vkey,
    record: read,
    async addCheckpoint(body) {
      const req = parseRequest(body);
      if (typeof req === 'string') return text(400, `not an add-checkpoint request: ${req}`);
      const origin = req.note.slice(0, req.note.indexOf('\n'));
      const vkeys = logs.get(origin);
      if (!vkeys) return text(404, `this witness does not witness ${JSON.stringify(origin)}`);
      const opened = openNote(req.note, vkeys);
      if (!opened.ok) return text(403, `the checkpoint is not signed by a key this witness trusts for ${origin}: ${opened.message}`);
      const cp = parseTreeCheckpoint(opened.text);
      if (typeof cp === 'string') return text(400, `the note is not a checkpoint: ${cp}`);
      if (req.old > cp.size) return text(400, `old size ${req.old} is larger than the checkpoint's ${cp.size}`);
      return serial(async () => {
        const held = await read(origin);
        const size = held?.size ?? 0;
        if (req.old !== size) return text(409, `${size}`, 'text/x.tlog.size');
        const root = Buffer.from(cp.root);
        const heldRoot = held ? Buffer.from(held.root, 'base64') : EMPTY_ROOT;
        if (req.old === cp.size) {
          if (held && !heldRoot.equals(root)) return text(409, `${size}`, 'text/x.tlog.size');
        } else if (req.old === 0) {
          if (req.proof.length > 0) return text(422, 'a consistency proof from size 0 is empty');
        } else if (!verifyConsistency(req.old, cp.size, heldRoot, root, req.proof)) {
          return text(422, `the consistency proof from size ${req.old} to ${cp.size} does not verify: a fork, or a rewritten history`);
        }
        await write(origin, { size: cp.size, root: root.toString('base64') });
        return text(200, cosignNote(opened.text, { name: o.name, privateKey: o.privateKey }, now()), 'text/plain; charset=utf-8');
      });
    },
  };
}

/** The parts of an add-checkpoint body, or why it is not one. */
function parseRequest(body: string): { old: number; proof: Buffer[]; note: string } | string {
  const blank = body.indexOf('\n\n');
  if (blank < 0) return 'no empty line before the checkpoint';
  const head = body.slice(0, blank).split('\n');
  const note = body.slice(blank + 2);
  const m = /^old (0|[1-9][0-9]*)$/.exec(head[0] ?? '');
  if (!m || !Number.isSafeInteger(Number(m[1]))) return 'the first line is not "old <size>"';
  const lines = head.slice(1);
  if (lines.length > MAX_PROOF) return `more than ${MAX_PROOF} consistency proof lines`;
  const proof: Buffer[] = [];
  for (const l of lines) {
    const h = Buffer.from(l, 'base64');
    if (h.length !== HASH_SIZE || h.toString('base64') !== l)
      return `a proof line is not one base64 hash: ${JSON.stringify(l.slice(0, 60))}`;
    proof.push(h);
  }
  if (note === '') return 'no checkpoint after the empty line';
  return { old: Number(m[1]), proof, note };
}

/**
 * A Node HTTP request listener serving `witness`: `POST /add-checkpoint` (bodies up to
 * {@link MAX_WITNESS_REQUEST_BYTES}, 413 past it); 404 for another path, 405 for another method.
 */
export function witnessHttpHandler(witness: Witness): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const send = (a: WitnessAnswer) => void res.writeHead(a.status, { 'content-type': a.contentType }).end(a.body);
    if ((req.url ?? '/').split('?')[0] !== '/add-checkpoint') return send(text(404, 'not found: the endpoint is POST /add-checkpoint'));
    if (req.method !== 'POST') return send(text(405, 'POST a checkpoint to /add-checkpoint'));
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= MAX_WITNESS_REQUEST_BYTES) chunks.push(c);
      else if (!res.headersSent) {
        send(text(413, `a request is at most ${MAX_WITNESS_REQUEST_BYTES} bytes`));
        req.destroy();
      }
    });
    req.on('end', () => {
      if (res.headersSent) return;
      witness
        .addCheckpoint(Buffer.concat(chunks).toString('utf8'))
        .then(send, (err: unknown) => send(text(500, `the witness could not decide: ${(err as Error).message}`)));
    });
  };
}

/** The body of an add-checkpoint request: `old <size>`, the proof lines, an empty line, the signed checkpoint. */
export function addCheckpointBody(old: number, proof: readonly Uint8Array[], note: string): string {
  return `old ${old}\n${proof.map((p) => `${Buffer.from(p).toString('base64')}\n`).join('')}\n${note}`;
}
