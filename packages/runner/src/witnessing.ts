/**
 * The witnesses' round after each scheduled checkpoint of the audit log forge opens itself: when
 * `<home>/witnesses.json` lists witnesses, the log's new tree checkpoint is sent to them
 * (audit-chain witnessLog) and, once the quorum cosigned, kept in `<home>/audit.witnessed`. The
 * file is read at each round, so an operator adds or removes witnesses without a restart. A
 * round that fails (a witness down, a refusal, a file that does not parse) is a warning: the log
 * is not held back, and `forge audit witness` and `forge audit verify --witness` say more.
 */
import { createPublicKey } from 'node:crypto';
import { noteVerifierKey, parseVerifierKey, readRegularFile, witnessLog } from '@forge/audit-chain';
import type { ForgePaths } from './paths.js';
import { AUDIT_KEY_NAME } from './receipts.js';

/** The checkpoint schedule's `after` for this home and key. */
export function witnessRound(
  paths: Pick<ForgePaths, 'auditLog' | 'witnesses' | 'auditWitnessed'>,
  signingKey: string,
): { after: () => Promise<void> } {
  const logVkey = noteVerifierKey(AUDIT_KEY_NAME, createPublicKey(signingKey));
  return {
    async after() {
      const raw = await readRegularFile(paths.witnesses).then(
        (b) => b.toString('utf8'),
        (err: NodeJS.ErrnoException) => {
          if (err.code === 'ENOENT') return undefined;
          throw err;
        },
      );
      if (raw === undefined) return;
      const config = JSON.parse(raw) as { quorum?: number; witnesses?: { url: string; vkey: string }[] };
      const witnesses = config.witnesses ?? [];
      if (witnesses.length === 0 || witnesses.some((w) => typeof w.url !== 'string' || typeof parseVerifierKey(w.vkey) === 'string'))
        throw new Error(`${paths.witnesses} does not list witnesses as {"url", "vkey"}: run forge audit witness to see what is wrong`);
      const quorum = config.quorum ?? witnesses.length;
      const r = await witnessLog(paths.auditLog, { logVkey, witnesses, quorum, keepFile: paths.auditWitnessed });
      if (!r.witnessed)
        throw new Error(
          `the checkpoint of ${r.size} entries is not witnessed (${r.cosigned.length} of quorum ${quorum}): ${r.refused.map((x) => `${x.vkey.split('+')[0]}: ${x.reason}`).join('; ')}`,
        );
    },
  };
}
