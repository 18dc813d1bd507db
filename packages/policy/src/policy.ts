import { createSnapshot, type PolicySnapshot } from './decisions.js';
import { type EffectivePolicy, mergePolicies, type PolicyDocument } from './document.js';
import { type PolicyEvent, type PolicyFile, policyFile, type RefreshContext, refreshFile } from './policy-file.js';
import type { AllowRules } from './rules.js';

export type { PolicyEvent } from './policy-file.js';

export interface PolicyOptions {
  /** The user's policy (`$FORGE_HOME/policy.json`); optional file. */
  userFile?: string;
  /** The workspace's policy (`<project>/.forge/policy.json`), merged over the user's; optional file. */
  workspaceFile?: string;
  /** Allow-rules (`<project>/.forge/policy.rules`); when the file exists, calls need a rule. */
  rulesFile?: string;
  /** Receives `policy.reloaded` and `policy.reload_failed` (the runner audits them). */
  onEvent?: (event: PolicyEvent) => void;
  /**
   * How long a changed file may settle before it is judged, in ms (default
   * {@link POLICY_SETTLE_MS}). Editors and shells that write in place truncate the file, then
   * write it: a read in between finds it empty or cut short. A file that is invalid while its
   * last change is younger than this keeps its last good version in force without a
   * `policy.reload_failed`, and is judged again at each call; once it is older and still invalid,
   * the failure is recorded, once per distinct content. An empty file, and a rules file whose
   * last line has no line feed, count as unsettled too while young. A file renamed over the old
   * one (written whole first) and every file at start are judged at once. 0 judges every change
   * at once.
   */
  settleMs?: number;
}

/** The default settle window: a file changed within the last second is not judged invalid yet. */
export const POLICY_SETTLE_MS = 1000;

/** The policy in force, or why there is none (a file that has never loaded: calls must be refused). */
export type PolicyState = { ok: true; snapshot: PolicySnapshot } | { ok: false; kind: 'policy_denied'; message: string };

/** Hot-reloaded policy: see {@link createPolicy}. */
export interface Policy {
  /**
   * The policy in force now. Checks each file's identity (inode, size, mtime, ctime) and rereads
   * only what changed; call it once at each call boundary and decide the whole call from the
   * returned snapshot.
   */
  current(): PolicyState;
}

/**
 * Loads the policy (bundle defaults ← user ← workspace, plus allow-rules) and keeps it current.
 * A file that becomes malformed or schema-invalid keeps its last good version in force and
 * emits `policy.reload_failed` with the file, line, column and reason; a file that is bad from
 * the start leaves no policy in force, and {@link Policy.current} says so (fail closed).
 */
export function createPolicy(options: PolicyOptions = {}): Policy {
  const emit = options.onEvent ?? (() => {});
  const settleNs = BigInt(Math.max(0, Math.floor(options.settleMs ?? POLICY_SETTLE_MS))) * 1_000_000n;
  const reread: RefreshContext = { settleNs, initial: true, emit };
  const docs: PolicyFile<PolicyDocument>[] = [];
  if (options.userFile) docs.push(policyFile(options.userFile, 'policy'));
  if (options.workspaceFile) docs.push(policyFile(options.workspaceFile, 'policy'));
  const rules = options.rulesFile ? policyFile<AllowRules>(options.rulesFile, 'rules') : undefined;
  const all: PolicyFile<unknown>[] = [...docs, ...(rules ? [rules] : [])];

  let snapshot: PolicySnapshot | undefined;
  let generation = 0;
  let state: PolicyState;

  const rebuild = (initial: boolean, read: PolicyFile<unknown>[]) => {
    const invalid = all.find((s) => s.status === 'invalid');
    if (invalid) {
      state = {
        ok: false,
        kind: 'policy_denied',
        message: `no policy is in force, so nothing runs: ${invalid.problem?.message ?? invalid.file}. Fix the file; it is reread at the next call`,
      };
      return;
    }
    const policy = mergePolicies(...docs.map((d) => d.good).filter((d): d is PolicyDocument => d !== undefined));
    const next = createSnapshot(
      policy,
      rules?.good ?? null,
      all.map((s) => ({ file: s.file, kind: s.kind, status: s.status })),
      ++generation,
    );
    const changed = snapshot ? changedKeys(snapshot, next) : Object.keys(policy);
    const previous = snapshot;
    snapshot = next;
    state = { ok: true, snapshot: next };
    if (initial || read.length > 0 || previous?.digest !== next.digest) {
      emit({
        type: 'policy.reloaded',
        generation: next.generation,
        digest: next.digest,
        files: read.filter((s) => s.status === 'loaded').map((s) => s.file),
        changed,
        initial,
      });
    }
  };

  for (const s of all) refreshFile(s, reread);
  reread.initial = false;
  rebuild(true, all);

  return {
    current() {
      let read: PolicyFile<unknown>[] | undefined;
      let failed = false;
      for (const s of all) {
        const r = refreshFile(s, reread);
        if (r === 'read') (read ??= []).push(s);
        else if (r === 'failed') failed = true;
      }
      if (read || failed) rebuild(false, read ?? []);
      return state;
    },
  };
}

function changedKeys(a: PolicySnapshot, b: PolicySnapshot): string[] {
  const out: string[] = [];
  for (const k of Object.keys(b.policy) as (keyof EffectivePolicy)[]) {
    if (JSON.stringify(a.policy[k]) !== JSON.stringify(b.policy[k])) out.push(k);
  }
  const keys = (r: AllowRules | null) => (r ? [...r.keys].sort().join('\n') : null);
  if (keys(a.rules) !== keys(b.rules)) out.push('rules');
  return out;
}
