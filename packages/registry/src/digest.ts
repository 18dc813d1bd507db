import { createHash } from 'node:crypto';
import stableStringify from 'fast-json-stable-stringify';
import type { Failure, StoredTool } from './types.js';

/** The fields the registry writes; they are not part of the digest. */
export const STAMP_FIELDS = ['version', 'digest', 'created_at', 'created_by', 'scope', 'state', 'origin'] as const;

const STAMPS = new Set<string>(STAMP_FIELDS);

/** A shallow copy of `spec` without its stamp fields. */
export function stripStamps<T extends object>(spec: T): Omit<T, (typeof STAMP_FIELDS)[number]> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(spec)) if (!STAMPS.has(k)) out[k] = v;
  return out as Omit<T, (typeof STAMP_FIELDS)[number]>;
}

/**
 * `sha256:<64 hex>` over the canonical JSON of `spec` (keys sorted at every depth, as
 * fast-json-stable-stringify writes it) without the stamp fields, so it is independent of key
 * order and of version, time, author, scope, state and promote origin.
 */
export function digestSpec(spec: object): string {
  return `sha256:${createHash('sha256')
    .update(stableStringify(stripStamps(spec)))
    .digest('hex')}`;
}

/** A tool whose content does not match its recorded digest (kind `tool_tampered`). */
export interface TamperedFailure extends Failure<'tool_tampered'> {
  expected: string;
  actual: string;
}

/**
 * Recomputes `tool`'s digest and compares it with the recorded one. Loading never does this (it
 * would cost a hash per file); the caller checks integrity when it is about to run a tool.
 */
export function verifyToolDigest(tool: StoredTool): { ok: true } | TamperedFailure {
  const actual = digestSpec(tool);
  if (actual === tool.digest) return { ok: true };
  return {
    ok: false,
    kind: 'tool_tampered',
    message: `tool "${tool.name}" (${tool.scope} scope, version ${tool.version}) does not match its digest: recorded ${tool.digest}, content ${actual}; its file was edited outside forge — forge it again or recover a previous version`,
    expected: tool.digest,
    actual,
  };
}
