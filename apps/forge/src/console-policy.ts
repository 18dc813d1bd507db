import { existsSync, readFileSync } from 'node:fs';
import type { PolicyView } from '@forge/console';
import { type PolicyDocument, parsePolicyDocument } from '@forge/policy';
import type { Forge } from '@forge/runner';
import { checkPolicies } from './policy-check.js';
import type { Where } from './where.js';

/** Keys whose entries are per persona (or per secret): each entry's origin is its own. */
const KEYED = new Set([
  'persona_namespaces',
  'persona_sandbox_overrides',
  'persona_secret_allow',
  'secret_delivery',
  'toolsmith',
  'budgets',
  'breakers',
  'hooks',
]);

/**
 * The policy page's view: the files as `forge policy check` checks them, the policy the engine
 * has in force, and for each rule the file that set it (the last of bundle defaults ← user ←
 * workspace that names it: the merge order), down to one persona's entry.
 */
export function policyView(w: Where, forge: Forge): PolicyView {
  const report = checkPolicies({ home: w.home, project: w.project });
  const origin: Record<string, string> = {};
  for (const f of report.files) {
    if (f.kind !== 'policy' || f.status !== 'ok' || !existsSync(f.file)) continue;
    const parsed = parsePolicyDocument(readFileSync(f.file, 'utf8'), f.file);
    if (!parsed.ok) continue;
    const doc = parsed.value as PolicyDocument & Record<string, unknown>;
    for (const [key, value] of Object.entries(doc)) {
      origin[key] = f.file;
      if (KEYED.has(key) && value && typeof value === 'object' && !Array.isArray(value))
        for (const entry of Object.keys(value)) origin[`${key}.${entry}`] = f.file;
    }
  }
  const pol = forge.policy();
  const effective = pol.ok ? (pol.snapshot.policy as unknown as Record<string, unknown>) : {};
  const personas = new Set<string>();
  for (const key of ['persona_namespaces', 'persona_sandbox_overrides', 'persona_secret_allow'])
    for (const p of Object.keys((effective[key] as Record<string, unknown> | undefined) ?? {})) personas.add(p);
  for (const p of (effective.operator_personas as string[] | undefined) ?? []) personas.add(p);
  const smith = (effective.toolsmith ?? {}) as { mode?: Record<string, unknown>; approvers?: string[] };
  for (const p of Object.keys(smith.mode ?? {})) personas.add(p);
  for (const key of Object.keys(effective)) origin[key] ??= 'bundle defaults';
  return {
    files: report.files.map((f) => ({
      file: f.file,
      role: f.role,
      kind: f.kind,
      status: f.status,
      ...(f.problem
        ? {
            problem: {
              ...(f.problem.line !== undefined ? { line: f.problem.line } : {}),
              ...(f.problem.column !== undefined ? { column: f.problem.column } : {}),
              message: f.problem.message,
            },
          }
        : {}),
    })),
    effective,
    origin,
    personas: [...personas].sort(),
  };
}
