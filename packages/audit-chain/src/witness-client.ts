/**
 * A log asking witnesses to cosign its checkpoint (C2SP tlog-witness, the client side): to each
 * witness, `add-checkpoint` with a consistency proof from the size that witness last cosigned; a
 * 409 names that size, and the request is made once more from it. Each cosignature is checked
 * against the witness's verifier key before it is kept. A checkpoint is witnessed once `quorum`
 * witnesses cosigned it.
 */
import { join } from 'node:path';
import { AuditError } from './errors.js';
import { writeDurably } from './live-tree.js';
import { withDirLock } from './lock.js';
import { consistencyProof, type TreeHashes } from './merkle.js';
import { openNote, parseTreeCheckpoint } from './note.js';
import { readRegularFile } from './regular-file.js';
import { TileHashes, tileFiles } from './tiles.js';
import { addCheckpointBody } from './witness.js';

/** A witness: its submission prefix (`https://witness.example/w1`) and cosigner verifier key. */
export interface WitnessEndpoint {
  url: string;
  vkey: string;
}

/** What asking the witnesses gave. */
export interface CosignResult {
  /** The checkpoint with every cosignature received appended. */
  note: string;
  /** Whether at least `quorum` witnesses cosigned. */
  witnessed: boolean;
  /** The witnesses that cosigned, by verifier key, with the size each now holds. */
  cosigned: { vkey: string; size: number }[];
  /** Those that did not, and why (what they answered). */
  refused: { vkey: string; url: string; reason: string }[];
}

/**
 * Asks every witness to cosign `note` (a checkpoint signed by the log), proving consistency
 * from the size each is known to hold (`held`, by vkey; 0 when unknown) with `hashes`, the log's
 * tree at least as large as the checkpoint. Never throws for a witness's answer: a witness down
 * or refusing is reported in `refused`.
 */
export async function requestCosignatures(o: {
  note: string;
  hashes: TreeHashes;
  witnesses: readonly WitnessEndpoint[];
  quorum: number;
  held?: ReadonlyMap<string, number>;
  timeoutMs?: number;
}): Promise<CosignResult> {
  const split = o.note.lastIndexOf('\n\n');
  const text = o.note.slice(0, split + 1);
  const cp = parseTreeCheckpoint(text);
  if (typeof cp === 'string') throw new TypeError(`not a checkpoint: ${cp}`);
  const ask = async (w: WitnessEndpoint): Promise<{ line: string; size: number } | { reason: string }> => {
    let old = o.held?.get(w.vkey) ?? 0;
    for (let attempt = 0; attempt < 2; attempt++) {
      if (old > cp.size)
        return { reason: `it holds size ${old}, larger than this checkpoint's ${cp.size}: the log was cut, or this is an old checkpoint` };
      const proof = old > 0 && old < cp.size ? consistencyProof(o.hashes, old, cp.size) : [];
      let res: Response;
      try {
        res = await fetch(`${w.url.replace(/\/$/, '')}/add-checkpoint`, {
          method: 'POST',
          body: addCheckpointBody(old, proof, o.note),
          signal: AbortSignal.timeout(o.timeoutMs ?? 10_000),
        });
      } catch (err) {
        return { reason: `no answer: ${(err as Error).message}` };
      }
      const body = await res.text();
      if (res.status === 409 && res.headers.get('content-type')?.startsWith('text/x.tlog.size')) {
        const size = Number(body.trim());
        if (!Number.isSafeInteger(size) || size < 0)
          return { reason: `409 with a size that is not one: ${JSON.stringify(body.slice(0, 40))}` };
        if (size === old) return { reason: `409: it holds size ${size} with another tree head: a fork` };
        old = size;
        continue;
      }
      if (res.status !== 200) return { reason: `${res.status}: ${body.trim().slice(0, 300)}` };
      const line = body.split('\n').find((l) => {
        const opened = openNote(`${text}\n${l}\n`, [w.vkey]);
        return opened.ok;
      });
      if (!line) return { reason: 'its answer holds no cosignature by its key on this checkpoint' };
      return { line: `${line}\n`, size: cp.size };
    }
    return { reason: 'it named another size twice' };
  };
  const answers = await Promise.all(o.witnesses.map(ask));
  const cosigned: CosignResult['cosigned'] = [];
  const refused: CosignResult['refused'] = [];
  let note = o.note;
  for (const [i, a] of answers.entries()) {
    const w = o.witnesses[i] as WitnessEndpoint;
    if ('line' in a) {
      note += a.line;
      cosigned.push({ vkey: w.vkey, size: a.size });
    } else refused.push({ vkey: w.vkey, url: w.url, reason: a.reason });
  }
  return { note, witnessed: cosigned.length >= o.quorum, cosigned, refused };
}

/**
 * Whether `note` is a checkpoint signed by `logVkeys` and cosigned by at least `quorum` of
 * `witnessVkeys`; its size and head when it is, else why not.
 */
export function checkWitnessed(
  note: string,
  logVkeys: readonly string[],
  witnessVkeys: readonly string[],
  quorum: number,
): { ok: true; size: number; root: Uint8Array; origin: string; cosigners: string[] } | { ok: false; reason: string } {
  const byLog = openNote(note, logVkeys);
  if (!byLog.ok) return { ok: false, reason: `not signed by the log's key: ${byLog.message}` };
  const byWitnesses = openNote(note, witnessVkeys);
  const names = byWitnesses.ok ? byWitnesses.verified.filter((s) => s.time !== undefined).map((s) => s.name) : [];
  if (names.length < quorum)
    return {
      ok: false,
      reason: `cosigned by ${names.length} of the witnesses given (${names.join(', ') || 'none'}), fewer than the quorum of ${quorum}`,
    };
  const cp = parseTreeCheckpoint(byLog.text);
  if (typeof cp === 'string') return { ok: false, reason: cp };
  return { ok: true, size: cp.size, root: cp.root, origin: cp.origin, cosigners: names };
}

/**
 * Has the newest tree checkpoint beside the log at `path` (`<path>.tlog/checkpoint`, signed by
 * `logVkey`) cosigned by `witnesses`, with proofs from the log's tiles. Once the quorum cosigned,
 * the cosigned checkpoint is written to `keepFile` (when given) and replaces the log's own, when
 * that is still the one sent (a newer one written meanwhile is left alone). Throws when the log
 * has no such checkpoint.
 */
export async function witnessLog(
  path: string,
  o: { logVkey: string; witnesses: readonly WitnessEndpoint[]; quorum: number; keepFile?: string; timeoutMs?: number },
): Promise<CosignResult & { size: number }> {
  const noteFile = join(`${path}.tlog`, 'checkpoint');
  const note = await readRegularFile(noteFile).then(
    (b) => b.toString('utf8'),
    () => undefined,
  );
  const opened = note ? openNote(note, [o.logVkey]) : undefined;
  const cp = opened?.ok ? parseTreeCheckpoint(opened.text) : undefined;
  if (!note || !opened?.ok || typeof cp !== 'object')
    throw new AuditError(
      'log_unanchored',
      `no tree checkpoint signed by ${o.logVkey.split('+')[0]} at ${noteFile}: the log writes one at each checkpoint`,
    );
  // Only the log's own signatures are sent: cosignatures of an earlier round are the witnesses' to give again.
  const own = note
    .slice(note.lastIndexOf('\n\n') + 2)
    .split('\n')
    .filter((l) => l !== '' && openNote(`${opened.text}\n${l}\n`, [o.logVkey]).ok)
    .map((l) => `${l}\n`)
    .join('');
  const r = await requestCosignatures({
    note: `${opened.text}\n${own}`,
    hashes: new TileHashes(tileFiles(`${path}.tlog`), cp.size),
    witnesses: o.witnesses,
    quorum: o.quorum,
    ...(o.timeoutMs ? { timeoutMs: o.timeoutMs } : {}),
  });
  if (r.witnessed) {
    await withDirLock(`${path}.lock`, async () => {
      if (
        (await readRegularFile(noteFile).then(
          (b) => b.toString('utf8'),
          () => undefined,
        )) === note
      )
        await writeDurably(noteFile, r.note, 0o600);
    });
    if (o.keepFile) await writeDurably(o.keepFile, r.note, 0o600);
  }
  return { ...r, size: cp.size };
}
