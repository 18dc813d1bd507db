import { existsSync } from 'node:fs';
import { type AuditEntry, type AuditLog, tailLog } from '@forge/audit-chain';

/** How many of the log's last entries are searched for the policy it announced last. */
export const ANNOUNCED_WINDOW = 256;

/**
 * The digest of the policy the log announced last (the newest `policy.reloaded` among its last
 * {@link ANNOUNCED_WINDOW} entries, read link by link), or undefined when none is there. An engine
 * that loaded the same policy does not announce it again: every CLI process would otherwise add one
 * entry saying nothing new (each action's entry names the digest it was decided under anyway).
 */
export async function lastAnnounced(audit: AuditLog): Promise<string | undefined> {
  let digest: string | undefined;
  const take = (e: AuditEntry) => {
    if (e.type !== 'policy.reloaded') return;
    const d = (e.data as { digest?: unknown } | null)?.digest;
    digest = typeof d === 'string' ? d : undefined;
  };
  if (existsSync(audit.path)) {
    for await (const e of tailLog(audit.path, { last: ANNOUNCED_WINDOW })) take(e);
    return digest;
  }
  const head = (await audit.head()).seq;
  for await (const e of audit.entries({ from: Math.max(1, head - ANNOUNCED_WINDOW + 1) })) {
    if (e.seq > head) break;
    take(e);
  }
  return digest;
}
