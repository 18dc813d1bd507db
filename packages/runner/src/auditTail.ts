import { type AuditEntry, type KeyInput, tailLog, type VerifyResult, verifyLog } from '@forge/audit-chain';
import type { Refusal } from './refusal.js';

/** The last entries of the audit log, and the verdict of verifying the whole log first. */
export interface AuditTail {
  ok: true;
  /**
   * `verifyLog` over every segment and the checkpoints, just before the tail was read: `ok` false
   * names the first bad entry (`first_bad.reason`: `hash_mismatch`, `broken_link`, `truncated`, …).
   */
  verdict: VerifyResult;
  /** Oldest first; each line's hash and link to the one before were checked as it was read. */
  entries: AuditEntry[];
  /** `all`: every entry (an operator); `persona`: only those whose `data.persona` is the caller's. */
  shown: 'all' | 'persona';
  /** Why no entries could be read (the tail itself failed its checks), when that happened. */
  tail_error?: string;
}

/** Most entries one read returns. */
export const MAX_AUDIT_TAIL = 1000;
/** Entries a non-operator's read looks through (from the end) for its own. */
export const AUDIT_TAIL_WINDOW = 10_000;

/**
 * Verifies the log at `log`, then reads its last `last` entries (1..{@link MAX_AUDIT_TAIL}); with
 * `persona`, only the entries naming that persona among the last {@link AUDIT_TAIL_WINDOW}. A
 * damaged log is a verdict, not a refusal; a log that cannot be read is `internal`.
 */
export async function readAuditTail(options: {
  log: string;
  last: number;
  persona?: string;
  publicKey?: KeyInput;
}): Promise<AuditTail | Refusal> {
  const { log, last, persona } = options;
  if (!Number.isSafeInteger(last) || last < 1 || last > MAX_AUDIT_TAIL)
    return { ok: false, kind: 'validation_failed', message: `last must be an integer from 1 to ${MAX_AUDIT_TAIL} (got ${last})` };
  let verdict: VerifyResult;
  try {
    verdict = await verifyLog(log, options.publicKey !== undefined ? { publicKey: options.publicKey } : {});
  } catch (err) {
    return { ok: false, kind: 'internal', message: `the audit log ${log} could not be verified: ${(err as Error).message}` };
  }
  const entries: AuditEntry[] = [];
  let tailError: string | undefined;
  try {
    for await (const e of tailLog(log, { last: persona === undefined ? last : AUDIT_TAIL_WINDOW })) {
      if (persona !== undefined && (e.data as { persona?: unknown } | null)?.persona !== persona) continue;
      entries.push(e);
      if (entries.length > last) entries.shift();
    }
  } catch (err) {
    tailError = (err as Error).message;
    entries.length = 0;
  }
  return { ok: true, verdict, entries, shown: persona === undefined ? 'all' : 'persona', ...(tailError ? { tail_error: tailError } : {}) };
}
