import type { Budget, ClampedField, PolicySnapshot } from '@forge/policy';
import type { Call } from './call/call.js';
import type { Target } from './call/resolve.js';
import type { Envelope } from './envelope.js';
import type { SecretList } from './redact.js';

/**
 * The execute step's seam (DESIGN "Executors"). The call pipeline is resolve → gates → validate →
 * execute → record, and only the execute step differs by where a tool lives: a local sandbox run
 * (forged tools, executors/sandbox.ts), an upstream MCP server (the gateway's tools,
 * executors/source.ts), later a job for a remote worker. Everything around it (gates, input
 * validation, breakers, secrets from the vault, the cache rules, the manifest and the audit
 * entry) is the pipeline's, the same for every executor.
 */
export interface Executor<T extends Target = Target> {
  /**
   * What the call needs before it runs: the secrets it names, its budget request, whether its
   * answer may be cached, what the manifest says of the tool. May refuse by throwing a
   * `RefusalError` (refusal.ts); runs nothing.
   */
  plan(call: Call, target: T, snap: PolicySnapshot): Promise<RunPlan>;
  /**
   * Runs the call. The envelope it gives is final but for the record step: redacted by
   * `job.secrets`, output validated, meta filled (`run_id`, `cache`, `sandbox`, `duration_ms`).
   * May refuse by throwing a `RefusalError` before anything ran.
   */
  run(job: RunJob<T>): Promise<Execution>;
}

export interface RunPlan {
  /** Vault names of the secrets the run gets (checked against the persona's allow-list, then read). */
  secretNames: string[];
  /** The input as the manifest keeps it (`x-redact` fields replaced). */
  redactedInput: unknown;
  /** The budget asked for (policy clamps it). */
  budget: Partial<Budget>;
  /** Set when the answer may be cached: the cache key. */
  cacheKey?: string;
  /** The manifest's `tool`: which tool ran, at which version or pin. */
  tool: Record<string, unknown>;
  /** The executor's own, from plan to run. */
  state?: unknown;
}

export interface RunJob<T extends Target = Target> {
  call: Call;
  target: T;
  snap: PolicySnapshot;
  plan: RunPlan;
  /** The policy's budget after clamping, and which fields it clamped. */
  budget: Budget;
  clamped: ClampedField[];
  /** Secret values the run got (name, value) for redaction, and by vault name for the run. */
  secrets: SecretList;
  secretValues: ReadonlyMap<string, string>;
  runId: string;
  /** The run's directory (`runs/<ts>_<id>`): created by the executor when it keeps anything there. */
  runDir: string;
  /** When the run started (ms since the epoch). */
  startedAt: number;
}

/** What one run gave. */
export interface Execution {
  envelope: Envelope;
  /** For the tool's failure breaker: a failure when forge found the tool broken. */
  outcome: 'success' | 'failure' | 'none';
  /** False when nothing ran (the host could not sandbox, the upstream never answered): no manifest is written. */
  ran: boolean;
  durationMs?: number;
  /** The executor's own fields of the run manifest (`sandbox`, `exit`, `stdout_bytes`, `upstream`, …). */
  manifest: Record<string, unknown>;
  /** The executor's own fields of the audit entry (`exit`, `duration_ms`, `network`, …). */
  audit: Record<string, unknown>;
}
