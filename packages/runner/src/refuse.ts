import { AUDIT_UNAVAILABLE } from './auditGate.js';
import type { AuditPort } from './ports.js';
import type { SecretList } from './redact.js';
import type { Refusal } from './refusal.js';

/** The audit entry a refusal is recorded as. */
export interface RefusalEntry {
  /** The entry's type (`forge.called`, `forge.created`, `acl.persona_denied`, …). */
  type: string;
  /** Its facts (who, what); `ok: false`, `kind` and `message` are added. */
  facts: Record<string, unknown>;
  /** The values the entry is redacted by (a call's secrets). */
  secrets?: SecretList;
  /** Runs with the entry's data just before it is appended (a worker's durable note). */
  beforeAppend?: (data: Record<string, unknown>) => Promise<void>;
}

/**
 * Refuses: every refusal is audited before it is answered (DESIGN "The two pipelines"). Answers
 * `refusal` once its entry is durable; a refusal the log cannot take still refuses, as
 * `audit_unavailable` naming the first refusal (`refused`). A refusal that is itself
 * `audit_unavailable` (the log is down) is answered as it is: nothing can record it.
 */
export async function refuse(audit: Pick<AuditPort, 'record' | 'unaudited'>, refusal: Refusal, entry: RefusalEntry): Promise<Refusal> {
  if (refusal.kind === AUDIT_UNAVAILABLE) return refusal;
  const { kind, message } = refusal;
  const data = { ok: false, ...entry.facts, kind, message };
  await entry.beforeAppend?.(data);
  const f = await audit.record(entry.type, data, entry.secrets);
  return f ? { ok: false, kind: AUDIT_UNAVAILABLE, message: audit.unaudited(f, kind, message), refused: kind } : refusal;
}
