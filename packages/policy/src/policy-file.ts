import { statSync } from 'node:fs';
import type { PolicySource } from './decisions.js';
import { type PolicyProblem, parsePolicyDocument } from './document.js';
import { readFileAtMost } from './json-document.js';
import { bytesText, POLICY_LIMITS } from './limits.js';
import { parseRules } from './rules.js';

/** What a policy reports as it loads and reloads (the runner audits both). */
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

/**
 * One watched policy file (policy.json or policy.rules): what was last read from it, what of it
 * is in force, and the problem reported about it. The reload cycle of {@link refreshFile} keeps
 * it current; the policy merges what every file holds.
 */
export interface PolicyFile<T> {
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

/** A file not read yet. */
export function policyFile<T>(file: string, kind: 'policy' | 'rules'): PolicyFile<T> {
  return { file, kind, stamp: undefined, good: undefined, status: 'absent' };
}

/** What a reread needs besides the file: the settle window, whether this is the load at start, and the event sink. */
export interface RefreshContext {
  settleNs: bigint;
  initial: boolean;
  emit: (event: PolicyEvent) => void;
}

/** Rereads `s` if its file changed: `read` (new content in force, or the file went away), `failed`, or `same`. */
export function refreshFile(s: PolicyFile<unknown>, ctx: RefreshContext): 'read' | 'failed' | 'same' {
  const fail = (stamp: string | undefined, p: Partial<PolicyProblem> & { reason: string }, text?: string) =>
    failFile(s, ctx.emit, { stamp, problem: p, ...(text !== undefined ? { text } : {}) });
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
    if (!st.isFile()) return fail(stamp, { reason: 'is not a regular file; remove it or put a policy file there' });
    // Bounded before anything is read: a huge file costs this stat, not a parse at every command.
    const limit = s.kind === 'policy' ? POLICY_LIMITS.policyFileBytes : POLICY_LIMITS.rulesFileBytes;
    if (st.size > BigInt(limit)) return fail(stamp, { reason: tooLarge(s.kind, st.size, limit) });
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
    const inPlace = !ctx.initial && (s.status === 'absent' || previousIno === st.ino);
    const settling = inPlace && ctx.settleNs > 0n && age < ctx.settleNs;
    if (settling && s.pending?.text === text && s.pending.problem) return 'same'; // still settling, still invalid
    const parsed = parseFile(s.kind, text, s.file);
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
    if (!parsed.ok) return fail(trusted, parsed.problem, text);
    s.stamp = trusted;
    s.good = parsed.value;
    s.status = 'loaded';
    delete s.problem;
    return 'read';
  } catch (err) {
    return fail(undefined, { reason: `cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)}); fix its permissions` });
  }
}

function parseFile(
  kind: 'policy' | 'rules',
  text: string,
  file: string,
): { ok: true; value: unknown } | { ok: false; problem: PolicyProblem } {
  if (kind === 'policy') {
    const r = parsePolicyDocument(text, file);
    return r.ok ? { ok: true, value: r.value } : r;
  }
  const r = parseRules(text, file);
  return r.ok ? { ok: true, value: r.rules } : { ok: false, problem: r.problem };
}

/**
 * Records that `s` cannot be used as read (stamped `stamp`, so an unchanged file is not judged
 * again) and emits `policy.reload_failed`, once per distinct bad content.
 */
function failFile(
  s: PolicyFile<unknown>,
  emit: (event: PolicyEvent) => void,
  read: { stamp: string | undefined; problem: Partial<PolicyProblem> & { reason: string }; text?: string },
): 'failed' | 'same' {
  const { stamp, problem: p, text } = read;
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
}

function tooLarge(kind: 'policy' | 'rules', size: bigint, limit: number): string {
  const what = kind === 'policy' ? 'a policy file (real ones are a few kilobytes)' : 'a rules file';
  return `size ${size} bytes exceeds the limit of ${bytesText(limit)} for ${what}; check that this is the right file, or trim it`;
}
