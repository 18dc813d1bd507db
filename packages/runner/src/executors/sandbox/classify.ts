import type { RunResult } from '@forge/sandbox';
import type { Envelope, EnvelopeMeta } from '../../envelope.js';
import type { Execution } from '../../executor.js';
import { excerpt, redactText, type SecretList } from '../../redact.js';
import type { Answer, OutputProblem } from './answer.js';

/**
 * What a sandboxed run ended as, decided by a table of named rules over the run's facts: the
 * first rule that holds gives the verdict. Pure: no disk, no processes, no clock; the facts are
 * gathered by the stages before it (invoke.ts, keep.ts, answer.ts) and the verdict is carried out
 * by the ones after it (keep.ts for the stdout of an invalid answer, manifest.ts for the envelope).
 */

/** Why the sandbox never ran the tool: the host cannot sandbox, a bind it refused, or anything else. */
export interface SandboxFailure {
  kind: 'sandbox_unavailable' | 'bind_denied' | 'internal';
  /** Redacted already (the sandbox's message may quote the end of stderr). */
  message: string;
}

/** The facts of a run the sandbox never started. */
export interface NotRunFacts {
  ran: false;
  error: SandboxFailure;
}

/** The facts of a run the sandbox started, whatever became of it. */
export interface RanFacts {
  ran: true;
  /** Why the call's signal stopped the run, when it was aborted (refusal.ts `stopReason`). */
  cancelled: string | undefined;
  exit: { reason: RunResult['reason']; code: number | null; signal: string | null };
  stdout: {
    /** Over the output cap: `bytes` in all, only `cap` of them read. */
    truncated: boolean;
    bytes: number;
    cap: number;
    /** Where the whole stdout was kept, when the sandbox spilled it. */
    fullArtifact: string | undefined;
    /** Where stdout that is not an envelope is kept (keep.ts `keepInvalidStdout`). */
    keptAt: string;
  };
  timeoutMs: number;
  artifacts: { dir: string; cap: number; full: boolean };
  /** Policy's ceilings, named in the advice of a limit's message. */
  ceilings: { output_cap: number; artifacts_bytes: number };
  /** The end of stderr, redacted (keep.ts). */
  stderr: string;
  secrets: SecretList;
  answer: Answer;
}

export type RunFacts = NotRunFacts | RanFacts;

/** What a rule decides: the tool's own envelope passes, or forge answers with a failure of its own. */
export type Decision =
  | { outcome: Execution['outcome']; answer: Envelope }
  | {
      outcome: Execution['outcome'];
      error: { kind: string; message: string; extra?: Record<string, unknown> };
      /** Fields forge adds to the envelope's meta for this failure. */
      meta?: EnvelopeMeta;
      /** Keep the stdout that was not an envelope among the artifacts. */
      keepStdout?: true;
    };

/** A decision, with the rule that made it. */
export type Verdict = Decision & { rule: string };

/** One row of the table: its name, when it holds, what it decides. */
export interface Rule {
  name: string;
  when(facts: RunFacts): boolean;
  decide(facts: RunFacts): Decision;
}

/*
 * The outcome each rule gives feeds the tool's failure breaker: a failure when forge found the
 * tool broken (crash, limit, bad output). A tool's own ok:false is an answer; a host that cannot
 * sandbox, or a call cancelled from outside, is not the tool's doing.
 */

/** A rule over a run that never started. */
function notRun(name: string, when: (f: NotRunFacts) => boolean, decide: (f: NotRunFacts) => Decision): Rule {
  return { name, when: (f) => !f.ran && when(f), decide: (f) => decide(f as NotRunFacts) };
}

/** A rule over a run that did; `when` may narrow the facts `decide` gets. */
function ran<F extends RanFacts>(name: string, when: (f: RanFacts) => f is F, decide: (f: F) => Decision): Rule;
function ran(name: string, when: (f: RanFacts) => boolean, decide: (f: RanFacts) => Decision): Rule;
function ran(name: string, when: (f: RanFacts) => boolean, decide: (f: RanFacts) => Decision): Rule {
  return { name, when: (f) => f.ran && when(f), decide: (f) => decide(f as RanFacts) };
}

type InvalidOutput = RanFacts & { answer: Extract<Answer, { ok: false }> };
type Answered = RanFacts & { answer: Extract<Answer, { ok: true }> };
type FailedOutputSchema = RanFacts & { answer: Answered['answer'] & { outputProblem: OutputProblem } };

const PROCESS_LIMITS: readonly RunResult['reason'][] = ['cpu', 'memory', 'file_size', 'output_cap'];

/** The rules, in the order they are tried. */
export const RULES: readonly Rule[] = [
  notRun(
    'sandbox_unavailable',
    (f) => f.error.kind === 'sandbox_unavailable',
    (f) => ({ outcome: 'none', error: { kind: 'sandbox_unavailable', message: f.error.message } }),
  ),
  notRun(
    'bind_denied',
    (f) => f.error.kind === 'bind_denied',
    (f) => ({ outcome: 'none', error: { kind: 'bind_denied', message: f.error.message } }),
  ),
  notRun(
    'sandbox_failed',
    (f) => f.error.kind === 'internal',
    (f) => ({ outcome: 'failure', error: { kind: 'internal', message: f.error.message } }),
  ),
  ran(
    'cancelled',
    (f) => f.cancelled !== undefined && f.exit.reason === 'signal',
    (f) => ({ outcome: 'none', error: { kind: 'cancelled', message: `${f.cancelled}; the tool was killed` } }),
  ),
  ran(
    'stdout_over_cap',
    (f) => f.stdout.truncated,
    (f) => {
      const kept = f.stdout.fullArtifact ?? 'no file';
      return {
        outcome: 'failure',
        meta: {
          stdout_truncated: true,
          stdout_truncated_at_bytes: f.stdout.cap,
          stdout_total_bytes: f.stdout.bytes,
          ...(f.stdout.fullArtifact !== undefined ? { stdout_full_artifact: f.stdout.fullArtifact } : {}),
        },
        error: {
          kind: 'resource_limit',
          message: `the tool printed ${f.stdout.bytes} bytes, over its output cap of ${f.stdout.cap}; the whole output is kept in ${kept} — print less, or raise meta.output_cap (policy ceiling ${f.ceilings.output_cap})`,
        },
      };
    },
  ),
  ran(
    'timeout',
    (f) => f.exit.reason === 'timeout',
    (f) => ({
      outcome: 'failure',
      error: { kind: 'timeout', message: `the tool ran past its ${f.timeoutMs} ms wall-clock limit and was killed${tail(f)}` },
    }),
  ),
  ran(
    'process_limit',
    (f) => PROCESS_LIMITS.includes(f.exit.reason),
    (f) => ({
      outcome: 'failure',
      error: { kind: 'resource_limit', message: `the tool hit its ${f.exit.reason} limit${tail(f)}`, extra: { limit: f.exit.reason } },
    }),
  ),
  ran(
    'artifacts_full',
    (f) => f.artifacts.full,
    (f) => ({
      outcome: 'failure',
      error: {
        kind: 'resource_limit',
        message: `the tool filled its artifacts directory (${f.artifacts.cap} bytes, policy budget artifacts_bytes); what it wrote up to that is kept in ${f.artifacts.dir} — write less, or raise budgets.defaults.artifacts_bytes (ceiling ${f.ceilings.artifacts_bytes})${tail(f)}`,
        extra: { limit: 'artifacts_bytes' },
      },
    }),
  ),
  ran(
    'output_invalid',
    (f): f is InvalidOutput => !f.answer.ok,
    (f) => {
      const exit = f.exit.reason === 'signal' ? `was killed by ${f.exit.signal}` : `exited with code ${f.exit.code}`;
      return {
        outcome: 'failure',
        keepStdout: true,
        error: {
          kind: 'output_invalid',
          message: redactText(`${f.answer.reason}; the tool ${exit}; its stdout is kept in ${f.stdout.keptAt}${tail(f)}`, f.secrets),
        },
      };
    },
  ),
  ran(
    'output_schema_failed',
    (f): f is FailedOutputSchema => f.answer.ok && f.answer.outputProblem !== undefined,
    (f) => ({
      outcome: 'failure',
      error: {
        kind: 'output_schema_failed',
        message: f.answer.outputProblem.message,
        extra: { problems: f.answer.outputProblem.problems },
      },
    }),
  ),
  ran(
    'tool_answered',
    (f): f is Answered => f.answer.ok && f.answer.envelope.ok,
    (f) => ({ outcome: 'success', answer: f.answer.envelope }),
  ),
  ran(
    'tool_failed',
    (f): f is Answered => f.answer.ok && !f.answer.envelope.ok,
    (f) => ({ outcome: 'success', answer: f.answer.envelope }),
  ),
];

/**
 * The verdict of the first rule in {@link RULES} that holds for `facts`. Total: every run, started
 * or not, meets one (the table's test proves it over every combination of facts); throws only if
 * the table lost a row.
 */
export function classify(facts: RunFacts): Verdict {
  for (const rule of RULES) if (rule.when(facts)) return { rule: rule.name, ...rule.decide(facts) };
  throw new Error(`no rule of the sandbox run's table decides ${JSON.stringify({ ran: facts.ran })}`);
}

/** The end of the (redacted) stderr tail for a message, cut only after redacting. */
function tail(f: RanFacts): string {
  const t = f.stderr.trim();
  return t ? `; stderr ends: ${excerpt(t, f.secrets, 600, 'end')}` : '';
}
