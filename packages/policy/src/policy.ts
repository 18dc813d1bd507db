import { statSync } from 'node:fs';
import { createSnapshot, type PolicySnapshot, type PolicySource } from './decisions.js';
import { type EffectivePolicy, mergePolicies, type PolicyDocument, type PolicyProblem, parsePolicyDocument } from './document.js';
import { readFileAtMost } from './json-text.js';
import { bytesText, POLICY_LIMITS } from './limits.js';
import { type AllowRules, parseRules } from './rules.js';

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

export type PolicyEvent =
  | {
      type: 'policy.reloaded';
      generation: number;
      digest: string;
      /** The files read this time. */
      files: string[];
      /** Top-level policy keys whose effective value changed, and `rules` when the rules did. */
      changed: string[];
      /** True for the load at start. */
      initial: boolean;
    }
  | ({
      type: 'policy.reload_failed';
      /** What stays in force: the file's last good version, or nothing (calls are refused). */
      kept: 'last_good' | 'nothing';
    } & PolicyProblem);

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

interface Source<T> {
  file: string;
  kind: 'policy' | 'rules';
  stamp: string | undefined;
  /** The text last read (to tell a real change from a rewrite with the same content). */
  text?: string;
  /** Last good content; undefined while the file is absent (or has never been good). */
  good: T | undefined;
  status: PolicySource['status'];
  problem?: PolicyProblem;
  /** The inode last read (an edit in place keeps it; a rename over the file changes it). */
  ino?: bigint;
  /** The text whose problem was last reported (a new content with the same message is a new edit). */
  reportedText?: string;
  /** A text read while the file was settling, with its verdict (so an unchanged file is not reparsed at each call). */
  pending?: { text: string; problem: PolicyProblem | undefined };
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
  let initial = true;
  const docs: Source<PolicyDocument>[] = [];
  if (options.userFile) docs.push({ file: options.userFile, kind: 'policy', stamp: undefined, good: undefined, status: 'absent' });
  if (options.workspaceFile)
    docs.push({ file: options.workspaceFile, kind: 'policy', stamp: undefined, good: undefined, status: 'absent' });
  const rules: Source<AllowRules> | undefined = options.rulesFile
    ? { file: options.rulesFile, kind: 'rules', stamp: undefined, good: undefined, status: 'absent' }
    : undefined;
  const all: Source<unknown>[] = [...docs, ...(rules ? [rules] : [])];

  let snapshot: PolicySnapshot | undefined;
  let generation = 0;
  let state: PolicyState;

  /** Rereads `s` if its file changed: `read` (new content in force, or the file went away), `failed`, or `same`. */
  const refresh = (s: Source<unknown>): 'read' | 'failed' | 'same' => {
    let stamp: string;
    try {
      const st = statSync(s.file, { bigint: true, throwIfNoEntry: false });
      if (!st) {
        if (s.stamp === 'absent') return 'same';
        s.stamp = 'absent';
        s.good = undefined;
        s.status = 'absent';
        delete s.problem;
        return 'read';
      }
      stamp = `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}:${st.isFile()}`;
      if (stamp === s.stamp) return 'same';
      if (!st.isFile()) return fail(s, stamp, { reason: 'is not a regular file; remove it or put a policy file there' });
      // Bounded before anything is read: a huge file costs this stat, not a parse at every command.
      const limit = s.kind === 'policy' ? POLICY_LIMITS.policyFileBytes : POLICY_LIMITS.rulesFileBytes;
      if (st.size > BigInt(limit)) return fail(s, stamp, { reason: tooLarge(s.kind, st.size, limit) });
      const size = Number(st.size);
      const bytes = readFileAtMost(s.file, size + 1);
      // Grown since the stat: a writer is at work; the next call looks again.
      if (bytes.length > size) return 'same';
      const text = bytes.toString('utf8').replace(/^\uFEFF/, '');
      const after = statSync(s.file, { bigint: true, throwIfNoEntry: false });
      // A writer changed the file while it was read: the text may join two versions, so adopt
      // nothing and look again at the next call.
      if (!after || `${after.ino}:${after.size}:${after.mtimeNs}:${after.ctimeNs}:${after.isFile()}` !== stamp) return 'same';
      // A stamp taken within a second of the file's last change can miss an edit that follows in
      // the same clock tick with the same size ("racily clean"): keep comparing the text until
      // the change is older than that.
      const age = BigInt(Date.now()) * 1_000_000n - st.ctimeNs; // ctime moves with every write
      const racy = age < 1_000_000_000n;
      const trusted = racy ? undefined : stamp;
      if (text === s.text && s.status !== 'invalid' && s.status !== 'kept') {
        s.stamp = trusted;
        delete s.pending;
        return 'same';
      }
      // Settling is for a file changed in place (the same inode, or a file that was absent):
      // a file renamed over the old one was written whole before it got the name, and at start
      // there is nothing in force to keep, so both are judged at once.
      const previousIno = s.ino;
      s.ino = st.ino;
      const inPlace = !initial && (s.status === 'absent' || previousIno === st.ino);
      const settling = inPlace && settleNs > 0n && age < settleNs;
      if (settling && s.pending?.text === text && s.pending.problem) return 'same'; // still settling, still invalid
      const parsed =
        s.kind === 'policy'
          ? (() => {
              const r = parsePolicyDocument(text, s.file);
              return r.ok ? { ok: true as const, value: r.value as unknown } : r;
            })()
          : (() => {
              const r = parseRules(text, s.file);
              return r.ok ? { ok: true as const, value: r.rules as unknown } : { ok: false as const, problem: r.problem };
            })();
      // Written in place and caught between the truncation and the last write: an invalid text,
      // or one that may be a cut-short valid one (an empty file; a rules file whose last line has
      // no line feed yet, where "tool:fib" cut short is "tool:fi"). Keep what is in force and
      // judge it again at the next call, without recording anything until the file has settled.
      if (settling && (!parsed.ok || text === '' || (s.kind === 'rules' && !text.endsWith('\n')))) {
        s.pending = { text, problem: parsed.ok ? undefined : parsed.problem };
        return 'same';
      }
      delete s.pending;
      s.text = text;
      if (!parsed.ok) return fail(s, trusted, parsed.problem, text);
      s.stamp = trusted;
      s.good = parsed.value;
      s.status = 'loaded';
      delete s.problem;
      return 'read';
    } catch (err) {
      return fail(s, undefined, { reason: `cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)}); fix its permissions` });
    }
  };

  const fail = (
    s: Source<unknown>,
    stamp: string | undefined,
    p: Partial<PolicyProblem> & { reason: string },
    text?: string,
  ): 'failed' | 'same' => {
    if (stamp !== undefined && stamp === s.stamp) return 'same';
    s.stamp = stamp;
    delete s.pending;
    const problem: PolicyProblem = { ...p, file: s.file, message: p.message ?? `${s.file}: ${p.reason}` };
    // Reported once per distinct bad content: the same text reread (a touch, a racy stamp) is not a new edit.
    const reported = s.problem?.message === problem.message && s.reportedText === text && s.status !== 'absent';
    s.problem = problem;
    s.reportedText = text;
    s.status = s.good === undefined ? 'invalid' : 'kept';
    if (reported) return 'same'; // the same problem, already reported and already in force
    const { file, line, column, pointer, reason, message } = problem;
    emit({
      type: 'policy.reload_failed',
      file,
      ...(line !== undefined ? { line } : {}),
      ...(column !== undefined ? { column } : {}),
      ...(pointer !== undefined ? { pointer } : {}),
      reason,
      message,
      kept: s.good === undefined ? 'nothing' : 'last_good',
    });
    return 'failed';
  };

  const rebuild = (initial: boolean, read: Source<unknown>[]) => {
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

  for (const s of all) refresh(s);
  initial = false;
  rebuild(true, all);

  return {
    current() {
      let read: Source<unknown>[] | undefined;
      let failed = false;
      for (const s of all) {
        const r = refresh(s);
        if (r === 'read') (read ??= []).push(s);
        else if (r === 'failed') failed = true;
      }
      if (read || failed) rebuild(false, read ?? []);
      return state;
    },
  };
}

function tooLarge(kind: 'policy' | 'rules', size: bigint, limit: number): string {
  const what = kind === 'policy' ? 'a policy file (real ones are a few kilobytes)' : 'a rules file';
  return `size ${size} bytes exceeds the limit of ${bytesText(limit)} for ${what}; check that this is the right file, or trim it`;
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
