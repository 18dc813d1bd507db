/**
 * The gap record every gap store keeps: its sanitising, the store's error, and the summary of
 * recurrence, shared by the file store and any other implementation of the GapStore interface.
 */
import type { GapQuery } from './stores.js';
import type { GapKind, GapRecord, GapSource, GapSummary } from './types.js';

const KINDS: ReadonlySet<string> = new Set<GapKind>(['missing_tool', 'service_absent']);
const SOURCES: ReadonlySet<string> = new Set<GapSource>(['unknown_tool', 'forge_request', 'gateway']);
const MAX_SIGNATURE = 128;
const MAX_DESCRIPTION = 1_000;
const MAX_EXAMPLES = 5;
const MAX_EXAMPLE_BYTES = 4_096;
const MAX_IDENTITY = 64;
const MAX_ASKED = 256;

/** Why the gap store refused or failed: `invalid_record` (sanitising), `unusable` (the directory or file), `closed`. */
export type GapStoreErrorCode = 'invalid_record' | 'unusable' | 'closed';

/** An error of the gap store; `code` is stable, `field` names the refused field for `invalid_record`. */
export class GapStoreError extends Error {
  readonly code: GapStoreErrorCode;
  readonly field?: string;
  constructor(code: GapStoreErrorCode, message: string, options?: { cause?: unknown; field?: string }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'GapStoreError';
    this.code = code;
    if (options?.field !== undefined) this.field = options.field;
  }
}

/** What sanitising a record gave: the record as it will be stored, or which field was refused and why. */
export type SanitizeResult = { ok: true; record: GapRecord } | { ok: false; kind: 'invalid_record'; field: string; message: string };

/** Cuts `s` to at most `max` UTF-16 units without splitting a surrogate pair. */
function cut(s: string, max: number): string {
  if (s.length <= max) return s;
  const code = s.charCodeAt(max - 1);
  return s.slice(0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max);
}

function refuse(field: string, why: string): SanitizeResult {
  return { ok: false, kind: 'invalid_record', field, message: `gap record: "${field}" ${why}` };
}

/**
 * Sanitises one observation into the record the store keeps (fields in a fixed order, unknown
 * fields dropped): `kind` and `source` must be known values; `signature` is trimmed and must then
 * be 1–128 characters; `at` a finite number ≥ 0; `persona` and `session` strings of at most 64
 * characters; `description` is cut to 1,000 characters and `asked` to 256; `example_inputs` keeps
 * at most 5 entries, dropping any that is not JSON or is over 4 KiB as JSON. Never throws.
 */
export function sanitizeGapRecord(input: unknown): SanitizeResult {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) return refuse('(record)', 'must be an object');
  const r = input as Record<string, unknown>;
  if (typeof r.kind !== 'string' || !KINDS.has(r.kind))
    return refuse('kind', `must be one of ${[...KINDS].join(', ')} (got ${JSON.stringify(r.kind)})`);
  if (typeof r.source !== 'string' || !SOURCES.has(r.source)) {
    return refuse('source', `must be one of ${[...SOURCES].join(', ')} (got ${JSON.stringify(r.source)})`);
  }
  if (typeof r.signature !== 'string') return refuse('signature', 'must be a string');
  const signature = r.signature.trim();
  if (signature.length < 1 || signature.length > MAX_SIGNATURE) {
    return refuse('signature', `must be 1–${MAX_SIGNATURE} characters once trimmed (got ${signature.length})`);
  }
  if (typeof r.at !== 'number' || !Number.isFinite(r.at) || r.at < 0)
    return refuse('at', 'must be a finite number of ms since the epoch, at least 0');
  for (const field of ['persona', 'session'] as const) {
    const v = r[field];
    if (typeof v !== 'string') return refuse(field, 'must be a string');
    if (v.length > MAX_IDENTITY) return refuse(field, `must be at most ${MAX_IDENTITY} characters (got ${v.length})`);
  }
  const record: GapRecord = {
    kind: r.kind as GapKind,
    signature,
    source: r.source as GapSource,
    at: r.at,
    persona: r.persona as string,
    session: r.session as string,
  };
  if (r.description !== undefined) {
    if (typeof r.description !== 'string') return refuse('description', 'must be a string when given');
    record.description = cut(r.description, MAX_DESCRIPTION);
  }
  if (r.example_inputs !== undefined) {
    if (!Array.isArray(r.example_inputs)) return refuse('example_inputs', 'must be an array when given');
    const kept: unknown[] = [];
    for (const example of r.example_inputs) {
      if (kept.length === MAX_EXAMPLES) break;
      let json: string | undefined;
      try {
        json = JSON.stringify(example);
      } catch {
        continue; // circular or BigInt: not JSON, dropped
      }
      if (json === undefined || Buffer.byteLength(json) > MAX_EXAMPLE_BYTES) continue;
      kept.push(JSON.parse(json));
    }
    record.example_inputs = kept;
  }
  if (r.asked !== undefined) {
    if (typeof r.asked !== 'string') return refuse('asked', 'must be a string when given');
    record.asked = cut(r.asked, MAX_ASKED);
  }
  return { ok: true, record };
}

/**
 * Recurrence per (kind, signature) over `records` (oldest first), as {@link GapStoreContract.summary}
 * specifies it; `now` is the window's end when `q.now` is not given. Every gap store answers with
 * this function, so that they agree to the order. Throws a RangeError for a threshold below 1 or a
 * negative window.
 */
export function summarizeGaps(records: readonly GapRecord[], q: GapQuery, now: number): GapSummary[] {
  const { threshold, windowMs, only } = q;
  if (!(threshold >= 1)) throw new RangeError(`summary: threshold must be at least 1 (got ${threshold})`);
  if (!(windowMs >= 0)) throw new RangeError(`summary: windowMs must be at least 0 (got ${windowMs})`);
  const at = q.now ?? now;
  const from = at - windowMs;
  const groups = new Map<string, GapSummary & { personaSet: Set<string>; sourceSet: Set<GapSource>; descriptionAt: number }>();
  for (const r of records) {
    if (only && (r.kind !== only.kind || r.signature !== only.signature)) continue;
    const key = `${r.kind}\u0000${r.signature}`;
    let g = groups.get(key);
    if (g === undefined) {
      g = {
        kind: r.kind,
        signature: r.signature,
        count: 0,
        total: 0,
        first_at: r.at,
        last_at: r.at,
        personas: [],
        sources: [],
        qualifies: false,
        personaSet: new Set(),
        sourceSet: new Set(),
        descriptionAt: -1,
      };
      groups.set(key, g);
    }
    g.total++;
    if (r.at >= from && r.at <= at) g.count++;
    g.first_at = Math.min(g.first_at, r.at);
    g.last_at = Math.max(g.last_at, r.at);
    if (r.description !== undefined && r.at >= g.descriptionAt) {
      g.description = r.description;
      g.descriptionAt = r.at;
    }
    g.personaSet.add(r.persona);
    g.sourceSet.add(r.source);
  }
  const out: GapSummary[] = [];
  for (const { personaSet, sourceSet, descriptionAt: _, ...g } of groups.values()) {
    out.push({ ...g, personas: [...personaSet].sort(), sources: [...sourceSet].sort(), qualifies: g.count >= threshold });
  }
  return out.sort(
    (a, b) =>
      Number(b.qualifies) - Number(a.qualifies) ||
      b.count - a.count ||
      b.last_at - a.last_at ||
      (a.kind + a.signature < b.kind + b.signature ? -1 : 1),
  );
}
