import { createPrivateKey, createPublicKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { EnvironmentError, UsageError } from '../args.js';
import type { Command } from '../command.js';
import { storeUrl } from '../store.js';
import { AUDIT_KEY_NAME, auditSigningKey } from './audit.js';

/** `$FORGE_HOME/witnesses.json`: the witnesses forge asks, and how many must cosign. */
export interface WitnessConfig {
  quorum: number;
  witnesses: { url: string; vkey: string }[];
}

/** Reads and checks `$FORGE_HOME/witnesses.json`, naming what is wrong and where. */
export async function witnessConfig(home: string): Promise<WitnessConfig> {
  const file = join(home, 'witnesses.json');
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new EnvironmentError(
      `${file}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'missing' : (err as Error).message}; write {"quorum": 1, "witnesses": [{"url": "http://…", "vkey": "<the witness's verifier key>"}]}`,
    );
  }
  const chain = await import('@forge/audit-chain');
  const c = raw as Partial<WitnessConfig>;
  if (!Array.isArray(c.witnesses) || c.witnesses.length === 0) throw new EnvironmentError(`${file}: "witnesses" must be a non-empty list`);
  for (const [i, w] of c.witnesses.entries()) {
    if (typeof w?.url !== 'string' || !/^https?:\/\//.test(w.url))
      throw new EnvironmentError(`${file}: witnesses[${i}].url must be an http(s) URL`);
    const parsed = typeof w.vkey === 'string' ? chain.parseVerifierKey(w.vkey) : 'is missing';
    if (typeof parsed === 'string') throw new EnvironmentError(`${file}: witnesses[${i}].vkey ${parsed}`);
  }
  const quorum = c.quorum ?? c.witnesses.length;
  if (!Number.isInteger(quorum) || quorum < 1 || quorum > c.witnesses.length)
    throw new EnvironmentError(`${file}: "quorum" must be a whole number from 1 to ${c.witnesses.length} (the witnesses listed)`);
  return { quorum, witnesses: c.witnesses as WitnessConfig['witnesses'] };
}

/**
 * `forge audit witness`: the log's newest tree checkpoint sent to the configured witnesses with
 * consistency proofs from the tiles; once the quorum cosigned, the cosigned checkpoint replaces
 * the log's own (when that is still the one sent) and is kept in `$FORGE_HOME/audit.witnessed`,
 * outside the log's directory, for `forge audit verify --witness`.
 */
export const auditWitness: Command = {
  words: 'audit witness',
  usage: 'forge audit witness',
  summary:
    "have the audit log's newest tree checkpoint cosigned by the witnesses in $FORGE_HOME/witnesses.json (exit 1 short of the quorum)",
  details: [
    'witnesses.json: {"quorum": N, "witnesses": [{"url": "http://host:port", "vkey": "<verifier key>"}]}',
    'Each witness cosigns only a checkpoint consistent with the last it cosigned: a cut or forked log is refused, with its reason.',
  ],
  async run(_p, { out, where }) {
    const w = await where();
    if (storeUrl(w.env)) throw new UsageError('witnessing is of the file log of this host for now', this.usage);
    const config = await witnessConfig(w.home);
    const pem = await auditSigningKey(w.env);
    if (!pem) throw new EnvironmentError('set FORGE_AUDIT_KEY: witnesses cosign only checkpoints the log signed');
    const chain = await import('@forge/audit-chain');
    const log = join(w.home, 'audit', 'forge.log');
    const logVkey = chain.noteVerifierKey(AUDIT_KEY_NAME, createPublicKey(createPrivateKey(pem)));
    let r: Awaited<ReturnType<typeof chain.witnessLog>>;
    try {
      r = await out.progress(
        'asking the witnesses',
        chain.witnessLog(log, { logVkey, witnesses: config.witnesses, quorum: config.quorum, keepFile: join(w.home, 'audit.witnessed') }),
      );
    } catch (err) {
      if ((err as { code?: string }).code === 'log_unanchored') throw new EnvironmentError((err as Error).message);
      throw err;
    }
    const cp = { size: r.size };
    if (out.json) out.data({ size: cp.size, witnessed: r.witnessed, quorum: config.quorum, cosigned: r.cosigned, refused: r.refused });
    else {
      for (const c of r.cosigned) out.line(`${out.style.green('✓')} ${c.vkey.split('+')[0]} cosigned size ${c.size}`);
      for (const x of r.refused) out.line(`${out.style.red('✗')} ${x.vkey.split('+')[0]} (${x.url}): ${x.reason}`);
      out.line(
        r.witnessed
          ? `the checkpoint of ${cp.size} entries is witnessed (${r.cosigned.length} of ${config.witnesses.length}, quorum ${config.quorum}); kept in ${join(w.home, 'audit.witnessed')}`
          : `NOT witnessed: ${r.cosigned.length} cosignatures, quorum ${config.quorum}`,
      );
    }
    return r.witnessed ? 0 : 1;
  },
};
