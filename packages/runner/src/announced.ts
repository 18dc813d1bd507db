import { existsSync } from 'node:fs';
import { type AuditEntry, type AuditLog, tailLog } from '@forge/audit-chain';

/** How many of the log's last entries are searched for what it announced last. */
export const ANNOUNCED_WINDOW = 256;

/** The entry types that announce what a process loaded: its policy and its gateway configuration. */
const ANNOUNCING = new Set(['policy.reloaded', 'gateway.reloaded']);

/**
 * Whether an entry announces what a process found when it first loaded a policy or gateway
 * configuration (`initial: true`), rather than a change it saw while running. Such an entry says
 * something only when the log does not already: the engine holds it until the process writes an
 * entry of its own (a command that only reads appends nothing) and leaves it out when the log
 * announced the same digest last ({@link lastAnnounced}).
 */
export function isAnnouncement(type: string, data: Record<string, unknown>): boolean {
  return ANNOUNCING.has(type) && data.initial === true && typeof data.digest === 'string';
}

/**
 * The digest each announcing type (`policy.reloaded`, `gateway.reloaded`) last named among the
 * log's last {@link ANNOUNCED_WINDOW} entries, read link by link; a type absent there is absent
 * from the map. Every CLI process would otherwise add one entry per type saying nothing new (each
 * call's entry names the policy digest it was decided under, and a gateway tool's pinned digest).
 */
export async function lastAnnounced(audit: AuditLog): Promise<Map<string, string>> {
  const last = new Map<string, string>();
  const take = (e: AuditEntry) => {
    if (!ANNOUNCING.has(e.type)) return;
    const d = (e.data as { digest?: unknown } | null)?.digest;
    if (typeof d === 'string') last.set(e.type, d);
    else last.delete(e.type);
  };
  if (existsSync(audit.path)) {
    for await (const e of tailLog(audit.path, { last: ANNOUNCED_WINDOW })) take(e);
    return last;
  }
  const head = (await audit.head()).seq;
  for await (const e of audit.entries({ from: Math.max(1, head - ANNOUNCED_WINDOW + 1) })) {
    if (e.seq > head) break;
    take(e);
  }
  return last;
}
