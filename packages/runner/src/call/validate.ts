import { toolValidators, verifyToolDigest } from '@forge/registry';
import type { ToolLookup } from '../ports.js';
import type { Call } from './call.js';
import type { Denied } from './gates.js';
import type { Target } from './resolve.js';

/**
 * Step 3, validate: a forged tool's integrity (its file matches its digest: compiled validators
 * are cached by the recorded digest, so a tampered schema must never be compiled under it), then
 * the input against the tool's input schema, with JSON-pointer paths. A source's tool is checked
 * against the schema the upstream declared (the pinned definition), before anything is sent.
 */
export function validateInput(e: Pick<ToolLookup, 'verified'>, call: Pick<Call, 'name' | 'input'>, target: Target): { ok: true } | Denied {
  if (target.kind === 'forged') {
    const stored = target.stored;
    const integrity = e.verified.has(stored) ? { ok: true as const } : verifyToolDigest(stored);
    if (!integrity.ok) return { ok: false, kind: integrity.kind, message: integrity.message };
    e.verified.add(stored);
  }
  const spec = target.kind === 'forged' ? target.stored : target.tool;
  const validators = toolValidators(spec);
  if ('kind' in validators) {
    const whose = target.kind === 'forged' ? `tool "${call.name}"` : `upstream tool "${call.name}" (server ${target.tool.origin.server})`;
    return { ok: false, kind: 'internal', message: `${whose} has a schema that does not compile: ${validators.message}` };
  }
  const valid = validators.input(call.input);
  if (!valid.ok) return { ok: false, kind: 'validation_failed', message: valid.message, extra: { problems: valid.problems } };
  return { ok: true };
}
