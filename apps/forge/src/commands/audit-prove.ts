import { createPrivateKey } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { EnvironmentError, UsageError } from '../args.js';
import type { Command } from '../command.js';
import { storeUrl } from '../store.js';
import { auditSigningKey, AUDIT_KEY_NAME as KEY_NAME } from './audit.js';

/** The origin line of the log's tree checkpoints: this host and the log's path (as the log names itself). */
export function logOrigin(log: string): string {
  return `${hostname()}${resolve(log)}`;
}

/** A signed tree checkpoint read from a file: the note as written, its size and head. */
export interface SignedCheckpoint {
  note: string;
  size: number;
  root: Uint8Array;
  file: string;
}

/**
 * The tree checkpoint in `file` when it is signed by `vkey` and is of the log `origin`; else what
 * it is instead (`unreadable`: no such file or not readable; `rejected`: not such a checkpoint).
 */
export async function signedCheckpoint(
  file: string,
  vkey: string,
  origin: string,
): Promise<SignedCheckpoint | { problem: 'unreadable' | 'rejected'; message: string }> {
  const chain = await import('@forge/audit-chain');
  let note: string;
  try {
    // Only a regular file, opened without blocking: the log's own checkpoint is forge's state.
    note = (await chain.readRegularFile(file)).toString('utf8');
  } catch (err) {
    return { problem: 'unreadable', message: `cannot read ${file}: ${(err as Error).message}` };
  }
  const opened = chain.openNote(note, [vkey]);
  if (!opened.ok) return { problem: 'rejected', message: `${file} is not signed by ${vkey}: ${opened.message}` };
  const cp = chain.parseTreeCheckpoint(opened.text);
  if (typeof cp === 'string') return { problem: 'rejected', message: `${file} holds no tree checkpoint: ${cp}` };
  if (cp.origin !== origin) return { problem: 'rejected', message: `${file} is of the log ${cp.origin}, not ${origin}` };
  return { note, size: cp.size, root: cp.root, file };
}

/** The log's own tree checkpoint (`<log>.tlog/checkpoint`) when it is one {@link signedCheckpoint} accepts. */
export async function publishedCheckpoint(log: string, vkey: string, origin: string): Promise<SignedCheckpoint | undefined> {
  const cp = await signedCheckpoint(join(`${log}.tlog`, 'checkpoint'), vkey, origin);
  return 'problem' in cp ? undefined : cp;
}

/**
 * `forge audit prove ENTRY`: a receipt for one entry of the verified file log (SPEC.md section
 * 9): a tree checkpoint over the whole log signed with FORGE_AUDIT_KEY, and the inclusion proof
 * of that entry, which `forge-audit verify-proof` checks with the public key alone.
 */
export const auditProve: Command = {
  words: 'audit prove',
  usage: 'forge audit prove ENTRY [--out DIR]',
  summary: 'prove one entry is in the audit log: a signed tree checkpoint and the inclusion proof, checkable offline',
  details: [
    'ENTRY    the entry: its seq, or the call_id or run_id a call entry names',
    'The proof is against the log’s own signed tree checkpoint when it covers the entry, else a new one.',
    '--out D  write D/checkpoint and D/proof.json (never over existing files); else they are printed',
    'The log is verified first; the checkpoint is signed with the key FORGE_AUDIT_KEY names.',
    'Check it anywhere with: forge-audit verify-proof checkpoint proof.json --vkey KEY (KEY is printed).',
  ],
  options: { out: { type: 'string' } },
  positionals: [1, 1],
  async run({ values, positionals }, { out, where }) {
    const asked = positionals[0];
    if (!asked) throw new UsageError('give the entry: its seq, or a call_id or run_id', this.usage);
    const w = await where();
    if (storeUrl(w.env)) throw new UsageError('proofs are made from the file log of this host for now', this.usage);
    const pem = await auditSigningKey(w.env);
    if (!pem)
      throw new EnvironmentError(
        'set FORGE_AUDIT_KEY to the private key forge signs checkpoints with: a proof is checked against a signed checkpoint',
      );
    const log = join(w.home, 'audit', 'forge.log');
    if (!existsSync(log)) throw new EnvironmentError(`no audit log at ${log}: forge has not run with this FORGE_HOME`);
    const chain = await import('@forge/audit-chain');
    const verdict = await out.progress('verifying the audit log', chain.verifyLog(log));
    if (!verdict.ok)
      throw new EnvironmentError(
        `${log} does not verify (${verdict.first_bad?.reason} at entry ${verdict.first_bad?.seq}): no proof is made over a damaged log; run forge audit verify`,
      );
    const dir = values.out as string | undefined;
    const files = dir ? [join(dir, 'checkpoint'), join(dir, 'proof.json')] : [];
    const taken = files.filter((f) => existsSync(f));
    if (taken.length > 0)
      throw new EnvironmentError(
        `${taken.join(' and ')} already exist${taken.length === 1 ? 's' : ''}: a receipt is never written over another; give --out a new directory`,
      );
    // One more pass over the verified log finds the entry: by its seq, or the call's own entry
    // (forge.called, gateway.called) over any other naming the id.
    const bySeq = /^[1-9][0-9]*$/.test(asked) ? Number(asked) : undefined;
    let found: { seq: number; line: string; called: boolean } | undefined;
    await chain.eachLogLine(log, verdict.entries, (index, bytes) => {
      if (bySeq !== undefined) {
        if (index === bySeq - 1) found = { seq: bySeq, line: bytes.toString('utf8'), called: true };
        return;
      }
      if (found?.called || !bytes.includes(asked)) return;
      const e = JSON.parse(bytes.toString('utf8')) as { type: string; data: unknown };
      const d = e.data as Record<string, unknown> | null;
      if (!d || typeof d !== 'object' || (d.call_id !== asked && d.run_id !== asked)) return;
      const called = e.type.endsWith('.called');
      if (!found || called) found = { seq: index + 1, line: bytes.toString('utf8'), called };
    });
    if (!found)
      throw new UsageError(
        `no entry ${asked} in ${log} (${verdict.entries} entries; a call_id or run_id names a call's entry)`,
        this.usage,
      );
    const { seq, line } = found;
    const key = createPrivateKey(pem);
    const vkey = chain.noteVerifierKey(KEY_NAME, key);
    const origin = logOrigin(log);
    // The log's own checkpoint when it covers the entry (the one witnesses and monitors see),
    // else a new one over the whole log. One that the log no longer matches is a changed history.
    const published = await publishedCheckpoint(log, vkey, origin);
    if (published && published.size <= verdict.entries) {
      const head = await out.progress('hashing the audit log', chain.logTreeHead(log, published.size, { threads: 2 }));
      if (!Buffer.from(head.root).equals(Buffer.from(published.root)))
        throw new EnvironmentError(
          `${log} does not match its own signed tree checkpoint of ${published.size} entries (${published.file}): its history changed after that checkpoint was published; run forge audit verify, and compare with what witnesses cosigned`,
        );
    }
    const leaf = chain.leafHash(Buffer.from(line, 'utf8'));
    let checkpoint: string;
    let size: number;
    let inclusion: Uint8Array[] | undefined;
    if (published && published.size >= seq && published.size <= verdict.entries) {
      checkpoint = published.note;
      size = published.size;
      // From the tiles beside the log, in bounded memory; taken only when it proves the entry
      // against the signed head (tiles changed on disk fall back to the entries themselves).
      try {
        const proof = chain.inclusionProof(new chain.TileHashes(chain.tileFiles(`${log}.tlog`), size), seq - 1, size);
        if (chain.verifyInclusion(seq - 1, size, leaf, proof, published.root)) inclusion = proof;
      } catch {
        inclusion = undefined;
      }
      inclusion ??= chain.inclusionProof(await chain.logTree(log, size), seq - 1, size);
    } else {
      const tree = await chain.logTree(log, verdict.entries);
      size = tree.size;
      checkpoint = chain.signNote(chain.formatTreeCheckpoint({ origin, size, root: chain.treeHead(tree, size) }), [
        { name: KEY_NAME, privateKey: key },
      ]);
      inclusion = chain.inclusionProof(tree, seq - 1, size);
    }
    const hex = (xs: Uint8Array[]) => xs.map((x) => Buffer.from(x).toString('hex'));
    const proof = { inclusion: { index: seq - 1, line, proof: hex(inclusion) } };
    if (dir) {
      mkdirSync(dir, { recursive: true });
      writeFileSync(files[0] as string, checkpoint, { flag: 'wx' });
      writeFileSync(files[1] as string, `${JSON.stringify(proof, null, 2)}\n`, { flag: 'wx' });
    }
    if (out.json) out.data({ seq, size, vkey, checkpoint, proof });
    else {
      if (!dir) out.line(`${checkpoint}\n${JSON.stringify(proof)}`);
      out.line(`entry ${seq} of ${size}: proven under a tree checkpoint signed by ${KEY_NAME}`);
      out.line(
        `check it: forge-audit verify-proof ${dir ? join(dir, 'checkpoint') : 'checkpoint'} ${dir ? join(dir, 'proof.json') : 'proof.json'} --vkey ${vkey}`,
      );
    }
    return 0;
  },
};
