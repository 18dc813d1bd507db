import { expect } from 'vitest';
import {
  createSnapshot,
  type Decision,
  type EffectivePolicy,
  mergePolicies,
  type PolicyDocument,
  type PolicySnapshot,
  parseRules,
} from '../src/index.js';

export { tempDir } from '@forge/test-utils';

/** The rules of `text`, failing the test when they do not parse. */
export function rulesOf(text: string, file = 'policy.rules') {
  const r = parseRules(text, file);
  if (!r.ok) throw new Error(`test rules do not parse: ${r.problem.message}`);
  return r.rules;
}

/** A snapshot of the documents merged over the defaults, with optional allow-rules text. */
export function snapshotOf(docs: PolicyDocument | PolicyDocument[] = [], rules?: string): PolicySnapshot {
  const list = Array.isArray(docs) ? docs : [docs];
  return createSnapshot(mergePolicies(...list), rules === undefined ? null : rulesOf(rules));
}

/** The effective policy of `docs` (merged over the defaults). */
export function effective(...docs: PolicyDocument[]): EffectivePolicy {
  return mergePolicies(...docs);
}

/** Asserts a denial of `kind` and returns its message (for an inline snapshot). */
export function denied(d: Decision, kind: string): string {
  expect(d).toEqual({ ok: false, kind, message: expect.any(String) });
  return d.ok ? '' : d.message;
}
