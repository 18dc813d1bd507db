import { createPrivateKey } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { EnvironmentError, UsageError } from '../args.js';
import type { Command } from '../command.js';
import { storeUrl } from '../store.js';
import { auditSigningKey, AUDIT_KEY_NAME as KEY_NAME } from './audit.js';
import { logOrigin, publishedCheckpoint, signedCheckpoint } from './audit-prove.js';

/**
 * `forge audit consistency OLD [NEW]`: that the log at an older signed tree checkpoint (a
 * receipt's, a witness's) is a prefix of it at a newer one (the log's own by default): the
 * consistency proof between them, made from the verified log, checked before it is given. A
 * history that changed in between is reported, exit 1, and no proof is given.
 */
export const auditConsistency: Command = {
  words: 'audit consistency',
  usage: 'forge audit consistency OLD [NEW] [--vkey KEY] [--out DIR]',
  summary: 'prove the audit log at an older signed checkpoint is a prefix of it at a newer one (exit 1 when it is not)',
  details: [
    'OLD, NEW  files holding signed tree checkpoints; NEW defaults to the log’s own (<log>.tlog/checkpoint)',
    '--vkey K  the verifier key the checkpoints must be signed by (default: the key FORGE_AUDIT_KEY names)',
    '--out D   write D/checkpoint (NEW) and D/consistency.json (never over existing files); else printed',
    'Check it anywhere with: forge-audit verify-proof NEW consistency.json --vkey KEY.',
  ],
  options: { vkey: { type: 'string' }, out: { type: 'string' } },
  positionals: [1, 2],
  async run({ values, positionals }, { out, where }) {
    const w = await where();
    if (storeUrl(w.env)) throw new UsageError('consistency proofs are made from the file log of this host for now', this.usage);
    const log = join(w.home, 'audit', 'forge.log');
    if (!existsSync(log)) throw new EnvironmentError(`no audit log at ${log}: forge has not run with this FORGE_HOME`);
    const chain = await import('@forge/audit-chain');
    let vkey = values.vkey as string | undefined;
    if (!vkey) {
      const pem = await auditSigningKey(w.env);
      if (!pem)
        throw new EnvironmentError('give --vkey, or set FORGE_AUDIT_KEY: checkpoints are trusted only with the key that signed them');
      vkey = chain.noteVerifierKey(KEY_NAME, createPrivateKey(pem));
    }
    if (typeof chain.parseVerifierKey(vkey) === 'string')
      throw new UsageError(`--vkey ${vkey} is not a verifier key (name+hash+key)`, this.usage);
    const origin = logOrigin(log);
    const signed = async (file: string, which: string) => {
      const cp = await signedCheckpoint(file, vkey as string, origin);
      if (!('problem' in cp)) return cp;
      if (cp.problem === 'unreadable') throw new UsageError(`${which} ${cp.message}`, this.usage);
      throw new EnvironmentError(`${which} ${cp.message}`);
    };
    const old = await signed(positionals[0] as string, 'OLD');
    let newer: { note: string; size: number; root: Uint8Array };
    if (positionals[1]) newer = await signed(positionals[1], 'NEW');
    else {
      const own = await publishedCheckpoint(log, vkey, origin);
      if (!own) throw new EnvironmentError(`the log has no tree checkpoint signed by ${vkey} (${log}.tlog/checkpoint): give NEW`);
      newer = own;
    }
    if (old.size > newer.size) throw new UsageError(`OLD (${old.size} entries) is newer than NEW (${newer.size}): swap them`, this.usage);
    const dir = values.out as string | undefined;
    const files = dir ? [join(dir, 'checkpoint'), join(dir, 'consistency.json')] : [];
    const taken = files.filter((f) => existsSync(f));
    if (taken.length > 0)
      throw new EnvironmentError(`${taken.join(' and ')} already exist: a proof is never written over another; give --out a new directory`);
    const verdict = await out.progress('verifying the audit log', chain.verifyLog(log));
    if (!verdict.ok)
      throw new EnvironmentError(
        `${log} does not verify (${verdict.first_bad?.reason} at entry ${verdict.first_bad?.seq}): no proof is made over a damaged log; run forge audit verify`,
      );
    if (verdict.entries < newer.size)
      throw new EnvironmentError(
        `${log} holds ${verdict.entries} entries, fewer than the ${newer.size} NEW was signed over: the log was cut`,
      );
    const tree = await chain.logTree(log, newer.size);
    if (!Buffer.from(chain.treeHead(tree, newer.size)).equals(Buffer.from(newer.root)))
      throw new EnvironmentError(`${log} does not match NEW at ${newer.size} entries: its history changed after NEW was signed`);
    const hex = (xs: Uint8Array[]) => xs.map((x) => Buffer.from(x).toString('hex'));
    const doc = { consistency: { checkpoint: old.note, proof: hex(chain.consistencyProof(tree, old.size, newer.size)) } };
    const checked = chain.checkProof(newer.note, doc, [vkey]);
    if (!checked.ok) {
      out.line(`NOT CONSISTENT: ${checked.reason}`);
      out.line(`the log at ${old.size} entries is not what OLD was signed over: a fork, or a history rewritten since`);
      return 1;
    }
    if (dir) {
      mkdirSync(dir, { recursive: true });
      writeFileSync(files[0] as string, newer.note, { flag: 'wx' });
      writeFileSync(files[1] as string, `${JSON.stringify(doc, null, 2)}\n`, { flag: 'wx' });
    }
    if (out.json) out.data({ old: old.size, new: newer.size, vkey, checkpoint: newer.note, proof: doc });
    else {
      if (!dir) out.line(`${newer.note}\n${JSON.stringify(doc)}`);
      out.line(`consistent: the log at ${old.size} entries is a prefix of it at ${newer.size}`);
      out.line(`check it: forge-audit verify-proof ${dir ? files[0] : 'checkpoint'} ${dir ? files[1] : 'consistency.json'} --vkey ${vkey}`);
    }
    return 0;
  },
};
