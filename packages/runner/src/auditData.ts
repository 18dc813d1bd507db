import { createHash } from 'node:crypto';
import stableStringify from 'fast-json-stable-stringify';
import { redactValue, type SecretList } from './redact.js';

/** `sha256:` over the canonical JSON of a call's input (what the audit log and manifests record). */
export function inputDigest(input: unknown): string {
  return `sha256:${createHash('sha256')
    .update(stableStringify(input ?? null))
    .digest('hex')}`;
}

/**
 * `sha256:` over the canonical JSON of an answer (the envelope: `ok`, `data`, `meta`): what a
 * cacheable call's `forge.called` entry records as `output_digest`, and what a cache hit is
 * checked against. Key order and spacing do not change it; any other change of the answer does.
 */
export function outputDigest(envelope: unknown): string {
  return `sha256:${createHash('sha256')
    .update(stableStringify(withoutReceipt(envelope) ?? null))
    .digest('hex')}`;
}

/**
 * An answer without its receipt (`meta.audit`, receipts.ts): the receipt names the entry that
 * records the answer's digest, so it is never part of what that digest covers, nor of what the
 * cache keeps (a hit gets the receipt of its own entry).
 */
export function withoutReceipt<T>(envelope: T): T {
  const meta = (envelope as { meta?: Record<string, unknown> } | null)?.meta;
  if (!meta || typeof meta !== 'object' || !('audit' in meta)) return envelope;
  const { audit: _, ...rest } = meta;
  return { ...(envelope as object), meta: rest } as T;
}

const MAX_AUDIT_STRING = 2000;
const MAX_AUDIT_ITEMS = 20;

/**
 * Audit data made safe to append whatever a caller sent: secret values redacted first (so no cut
 * below can show part of one), strings well-formed (a lone surrogate in a tool name must not
 * cost the entry) and at most 2000 characters, arrays at most 20 items (plus a count of the
 * rest), nesting at most 8 levels.
 */
export function auditSafe(raw: unknown, secrets: SecretList): unknown {
  const v = secrets.length > 0 ? redactValue(raw, secrets) : raw;
  return isAuditSafe(v, 0) ? v : sanitize(v, 0);
}

/** Whether `v` is already within the bounds (the common case: nothing to copy). */
function isAuditSafe(v: unknown, depth: number): boolean {
  if (typeof v === 'string') return v.length <= MAX_AUDIT_STRING && v.isWellFormed();
  if (v === null || typeof v !== 'object') return typeof v !== 'number' || Number.isFinite(v);
  if (depth >= 8) return false;
  if (Array.isArray(v)) return v.length <= MAX_AUDIT_ITEMS && v.every((x) => isAuditSafe(x, depth + 1));
  for (const [k, x] of Object.entries(v)) if (x === undefined || !isAuditSafe(k, depth + 1) || !isAuditSafe(x, depth + 1)) return false;
  return true;
}

function sanitize(v: unknown, depth: number): unknown {
  if (typeof v === 'string') {
    const w = v.toWellFormed();
    return w.length > MAX_AUDIT_STRING ? `${w.slice(0, MAX_AUDIT_STRING)}… (${w.length - MAX_AUDIT_STRING} more characters)` : w;
  }
  if (v === null || typeof v !== 'object') return typeof v === 'number' && !Number.isFinite(v) ? null : v;
  if (depth >= 8) return '…';
  if (Array.isArray(v)) {
    const items = v.slice(0, MAX_AUDIT_ITEMS).map((x) => sanitize(x, depth + 1));
    if (v.length > MAX_AUDIT_ITEMS) items.push(`… ${v.length - MAX_AUDIT_ITEMS} more`);
    return items;
  }
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) if (x !== undefined) out[sanitize(k, depth + 1) as string] = sanitize(x, depth + 1);
  return out;
}
