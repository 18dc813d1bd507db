/**
 * Checking a proof offline (SPEC.md section 9.3): a signed tree checkpoint, a proof document, and
 * the verifier keys whose signature counts. Nothing but those is read: no log, no tiles.
 */
import { leafHash, verifyConsistency, verifyInclusion } from './merkle.js';
import { openNote, parseTreeCheckpoint, type TreeCheckpoint } from './note.js';

/** That entry `index` (its line, or its leaf hash) is in the checkpoint's tree. */
export interface InclusionProofDoc {
  index: number;
  /** The entry's line without its newline; or give `leaf_hash`. */
  line?: string;
  leaf_hash?: string;
  proof: string[];
}

/** That an older signed checkpoint's tree is a prefix of this one's. */
export interface ConsistencyProofDoc {
  checkpoint: string;
  proof: string[];
}

/** A proof document: one of the two. */
export type ProofDoc = { inclusion: InclusionProofDoc } | { consistency: ConsistencyProofDoc };

/** What checking a proof found. */
export type ProofVerdict = { ok: true; origin: string; size: number; proves: string } | { ok: false; reason: string };

function hashes(list: unknown, what: string): Buffer[] | string {
  if (!Array.isArray(list) || list.length > 64) return `${what} is not a list of at most 64 hashes`;
  const out: Buffer[] = [];
  for (const h of list) {
    if (typeof h !== 'string' || !/^[0-9a-f]{64}$/.test(h)) return `${what} holds ${JSON.stringify(h)}, not 64 lowercase hex digits`;
    out.push(Buffer.from(h, 'hex'));
  }
  return out;
}

/** The tree checkpoint a signed note holds, signed by one of `verifierKeys`, or why not. */
function signedTree(note: string, verifierKeys: readonly string[], which: string): TreeCheckpoint | string {
  const opened = openNote(note, verifierKeys);
  if (!opened.ok) return `${which}: ${opened.message}`;
  const cp = parseTreeCheckpoint(opened.text);
  return typeof cp === 'string' ? `${which}: ${cp}` : cp;
}

/** Checks `doc` against the signed checkpoint `checkpoint`, trusting only `verifierKeys`. */
export function checkProof(checkpoint: string, doc: unknown, verifierKeys: readonly string[]): ProofVerdict {
  const cp = signedTree(checkpoint, verifierKeys, 'the checkpoint');
  if (typeof cp === 'string') return { ok: false, reason: cp };
  const d = (doc ?? {}) as Record<string, unknown>;
  if (d.inclusion && typeof d.inclusion === 'object') {
    const p = d.inclusion as Record<string, unknown>;
    if (!Number.isSafeInteger(p.index) || (p.index as number) < 0)
      return { ok: false, reason: 'inclusion.index is not a whole number ≥ 0' };
    const index = p.index as number;
    let leaf: Buffer;
    if (typeof p.line === 'string') leaf = leafHash(Buffer.from(p.line, 'utf8'));
    else if (typeof p.leaf_hash === 'string' && /^[0-9a-f]{64}$/.test(p.leaf_hash)) leaf = Buffer.from(p.leaf_hash, 'hex');
    else return { ok: false, reason: 'inclusion needs the entry\'s "line" or its "leaf_hash" (64 lowercase hex digits)' };
    const proof = hashes(p.proof, 'inclusion.proof');
    if (typeof proof === 'string') return { ok: false, reason: proof };
    if (index >= cp.size) return { ok: false, reason: `entry ${index + 1} is past the checkpoint's ${cp.size} entries` };
    if (!verifyInclusion(index, cp.size, leaf, proof, cp.root))
      return { ok: false, reason: `the proof does not place that entry at index ${index} under the checkpoint's tree head` };
    return {
      ok: true,
      origin: cp.origin,
      size: cp.size,
      proves: `entry ${index + 1} (index ${index}) is in ${cp.origin} at size ${cp.size}`,
    };
  }
  if (d.consistency && typeof d.consistency === 'object') {
    const p = d.consistency as Record<string, unknown>;
    if (typeof p.checkpoint !== 'string') return { ok: false, reason: 'consistency.checkpoint is not the older signed checkpoint' };
    const old = signedTree(p.checkpoint, verifierKeys, 'the older checkpoint');
    if (typeof old === 'string') return { ok: false, reason: old };
    if (old.origin !== cp.origin) return { ok: false, reason: `the checkpoints are of two logs (${old.origin} and ${cp.origin})` };
    const proof = hashes(p.proof, 'consistency.proof');
    if (typeof proof === 'string') return { ok: false, reason: proof };
    if (old.size > cp.size)
      return { ok: false, reason: `the older checkpoint (${old.size} entries) is larger than the newer (${cp.size})` };
    if (!verifyConsistency(old.size, cp.size, old.root, cp.root, proof))
      return {
        ok: false,
        reason: `the history at size ${old.size} is not a prefix of the one at size ${cp.size} (a fork, or a wrong proof)`,
      };
    return { ok: true, origin: cp.origin, size: cp.size, proves: `${cp.origin} at size ${old.size} is a prefix of it at size ${cp.size}` };
  }
  return { ok: false, reason: 'the proof document holds neither "inclusion" nor "consistency"' };
}
