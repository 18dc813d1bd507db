import { excerpt, type SecretList } from './redact.js';

/** What a tool prints on stdout, and what a caller gets back (DESIGN "Envelope"). */
export type Envelope = OkEnvelope | ErrorEnvelope;

export interface OkEnvelope {
  ok: true;
  data: unknown;
  meta: EnvelopeMeta;
}

export interface ErrorEnvelope {
  ok: false;
  error: { kind: string; message: string; [extra: string]: unknown };
  meta: EnvelopeMeta;
}

/** The tool's own meta, plus what forge adds. */
export interface EnvelopeMeta {
  run_id?: string;
  duration_ms?: number;
  cache?: 'miss' | 'hit' | 'off';
  sandbox?: string;
  stdout_truncated?: boolean;
  stdout_truncated_at_bytes?: number;
  stdout_total_bytes?: number;
  stdout_full_artifact?: string;
  policy_clamped?: { field: string; requested: number; applied: number }[];
  [extra: string]: unknown;
}

export type ParsedOutput = { ok: true; envelope: Envelope } | { ok: false; reason: string };

/**
 * Reads a tool's stdout as one envelope: a JSON object with a boolean `ok`, then `data` (ok) or
 * `error: {kind, message}` (not ok), and an optional `meta` object. Anything else is refused with
 * the reason, for an `output_invalid` failure; a reason quoting the output is redacted by
 * `secrets` before it is cut.
 */
export function parseToolOutput(stdout: Buffer, secrets: SecretList = []): ParsedOutput {
  const text = stdout.toString('utf8');
  if (text.trim() === '') return { ok: false, reason: 'the tool printed nothing; it must print one JSON envelope on stdout' };
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    const head = excerpt(text.trim(), secrets, 80);
    return { ok: false, reason: `stdout is not one JSON value (it starts ${JSON.stringify(head)}); print exactly one JSON envelope` };
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v))
    return { ok: false, reason: 'stdout must be a JSON object {"ok": true, "data": …} or {"ok": false, "error": {…}}' };
  const o = v as Record<string, unknown>;
  const meta = o.meta ?? {};
  if (meta === null || typeof meta !== 'object' || Array.isArray(meta)) return { ok: false, reason: '"meta" must be an object' };
  if (o.ok === true) {
    if (!Object.hasOwn(o, 'data')) return { ok: false, reason: 'an ok envelope needs "data" (null when there is nothing)' };
    return { ok: true, envelope: { ok: true, data: o.data, meta: { ...(meta as EnvelopeMeta) } } };
  }
  if (o.ok === false) {
    const e = o.error as Record<string, unknown> | undefined;
    if (!e || typeof e !== 'object' || typeof e.kind !== 'string' || typeof e.message !== 'string')
      return { ok: false, reason: 'a failed envelope needs "error": {"kind": "…", "message": "…"}' };
    return { ok: true, envelope: { ok: false, error: { ...e, kind: e.kind, message: e.message }, meta: { ...(meta as EnvelopeMeta) } } };
  }
  return { ok: false, reason: '"ok" must be true or false' };
}

/** A forge-made failure envelope. */
export function failure(kind: string, message: string, meta: EnvelopeMeta = {}, extra: Record<string, unknown> = {}): ErrorEnvelope {
  return { ok: false, error: { kind, message, ...extra }, meta };
}
