import { existsSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { type EffectivePolicy, mergePolicies, type PolicyDocument, parsePolicyDocument, parseRules } from '@forge/policy';

/** One policy file as checked. */
export interface CheckedFile {
  file: string;
  /** `user` and `workspace` are policy.json documents; `rules` is a policy.rules file. */
  role: 'user' | 'workspace' | 'rules' | 'given';
  kind: 'policy' | 'rules';
  status: 'ok' | 'absent' | 'invalid';
  /** For an invalid file. */
  problem?: { line?: number; column?: number; reason: string; message: string };
  /** A rules file: how many rules it holds. */
  rules?: number;
}

export interface PolicyReport {
  ok: boolean;
  files: CheckedFile[];
  /** The merged policy in force (bundle defaults ← user ← workspace), when every document is valid. */
  effective?: EffectivePolicy;
}

/** A path that is a rules file (by name), rather than a policy.json document. */
export function isRulesFile(file: string): boolean {
  return /\.rules$/.test(basename(file));
}

/**
 * Checks policy files: the given one, or the user's policy.json, the workspace's policy.json and
 * the workspace's policy.rules. Every problem names `file:line:column` (rules: `file:line`). The
 * effective policy merges the documents that were checked over the bundle defaults.
 */
export function checkPolicies(o: { home: string; project: string; file?: string }): PolicyReport {
  const targets: { file: string; role: CheckedFile['role'] }[] = o.file
    ? [{ file: o.file, role: 'given' }]
    : [
        { file: join(o.home, 'policy.json'), role: 'user' },
        { file: join(o.project, '.forge', 'policy.json'), role: 'workspace' },
        { file: join(o.project, '.forge', 'policy.rules'), role: 'rules' },
      ];
  const files: CheckedFile[] = [];
  const docs: PolicyDocument[] = [];
  for (const t of targets) {
    const kind = isRulesFile(t.file) ? 'rules' : 'policy';
    if (!existsSync(t.file)) {
      files.push({ file: t.file, role: t.role, kind, status: 'absent' });
      continue;
    }
    const text = readFileSync(t.file, 'utf8');
    if (kind === 'rules') {
      const r = parseRules(text, t.file);
      files.push(
        r.ok
          ? { file: t.file, role: t.role, kind, status: 'ok', rules: r.rules.size }
          : { file: t.file, role: t.role, kind, status: 'invalid', problem: pick(r.problem) },
      );
    } else {
      const r = parsePolicyDocument(text, t.file);
      if (r.ok) docs.push(r.value);
      files.push(
        r.ok
          ? { file: t.file, role: t.role, kind, status: 'ok' }
          : { file: t.file, role: t.role, kind, status: 'invalid', problem: pick(r.problem) },
      );
    }
  }
  const ok = files.every((f) => f.status !== 'invalid');
  return { ok, files, ...(ok ? { effective: mergePolicies(...docs) } : {}) };
}

function pick(p: { line?: number; column?: number; reason: string; message: string }): NonNullable<CheckedFile['problem']> {
  return {
    ...(p.line !== undefined ? { line: p.line } : {}),
    ...(p.column !== undefined ? { column: p.column } : {}),
    reason: p.reason,
    message: p.message,
  };
}
