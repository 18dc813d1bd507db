import { type StoredTool, toolValidators } from '@forge/registry';
import { type Envelope, type EnvelopeMeta, parseToolOutput } from '../../envelope.js';
import { redactValue, type SecretList } from '../../redact.js';

/** Why an ok envelope's `data` does not match the tool's `output_schema`. */
export interface OutputProblem {
  message: string;
  problems: unknown;
}

/**
 * A tool's stdout read as its answer: not an envelope (`reason` says why), or its envelope with
 * secret values redacted and the meta fields only forge sets dropped; an ok envelope whose data
 * fails the tool's output schema carries the problem.
 */
export type Answer = { ok: false; reason: string } | { ok: true; envelope: Envelope; outputProblem?: OutputProblem };

/** Reads `stdout` as the tool's {@link Answer} (no disk: the files it names are checked later, keep.ts). */
export function readAnswer(
  stdout: Buffer,
  secrets: SecretList,
  tool: Pick<StoredTool, 'digest' | 'input_schema' | 'output_schema'>,
): Answer {
  const parsed = parseToolOutput(stdout, secrets);
  if (!parsed.ok) return parsed;
  const e = parsed.envelope;
  const meta = redactValue(withoutKeys(e.meta, FORGE_META_KEYS), secrets) as EnvelopeMeta;
  const envelope: Envelope = e.ok
    ? { ok: true, data: redactValue(e.data, secrets), meta }
    : { ok: false, error: redactValue(e.error, secrets) as typeof e.error, meta };
  if (!envelope.ok || !tool.output_schema) return { ok: true, envelope };
  const validators = toolValidators(tool);
  const out = 'kind' in validators ? undefined : validators.output?.(envelope.data);
  if (!out || out.ok) return { ok: true, envelope };
  return { ok: true, envelope, outputProblem: { message: out.message, problems: out.problems } };
}

/** Fields of an envelope's meta that only forge sets: a tool's own values for them are dropped. */
const FORGE_META_KEYS = [
  'run_id',
  'duration_ms',
  'cache',
  'sandbox',
  'seed_run',
  'stdout_truncated',
  'stdout_truncated_at_bytes',
  'stdout_total_bytes',
  'stdout_full_artifact',
  'policy_clamped',
  'files_dropped',
  'audit',
];

function withoutKeys(o: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (!keys.includes(k)) out[k] = v;
  return out;
}
