import type { JsonSchema, ToolSpec } from '@forge/registry';

/**
 * The toolsmith's data: gaps, proposals and their validation records. Plain JSON, as stored
 * under `<project>/.forge/toolsmith/` (gaps.jsonl, proposals/<id>.json).
 */

/**
 * `missing_tool`: an agent asked for a tool that does not exist (an unknown tool name, or
 * `forge_request`): demand the toolsmith may author for. `service_absent`: a configured gateway
 * server that cannot run: an operator signal, never authored.
 */
export type GapKind = 'missing_tool' | 'service_absent';

/** Where a gap was seen. */
export type GapSource = 'unknown_tool' | 'forge_request' | 'gateway';

/** One observation of a gap (one line of gaps.jsonl). */
export interface GapRecord {
  kind: GapKind;
  /**
   * What is missing, normalised so that repeats match: the capability (lower case, as
   * `capabilitySlug` gives it), or for `service_absent` the gateway server's name.
   */
  signature: string;
  source: GapSource;
  /** ms since the epoch. */
  at: number;
  persona: string;
  session: string;
  /** What the agent said it needs (forge_request), at most 1,000 characters. */
  description?: string;
  /** forge_request's example inputs, at most 5, each at most 4 KiB as JSON. */
  example_inputs?: unknown[];
  /** The name the agent called (unknown_tool), as it asked. */
  asked?: string;
}

/** What recurrence analysis says of one (kind, signature) in the window. */
export interface GapSummary {
  kind: GapKind;
  signature: string;
  /** Observations inside the window. */
  count: number;
  /** Observations the store still holds, in and out of the window. */
  total: number;
  first_at: number;
  last_at: number;
  personas: string[];
  sources: GapSource[];
  /** The latest description given for it, if any. */
  description?: string;
  /** `count >= threshold` inside the window. */
  qualifies: boolean;
}

/** The lifecycle of a proposal (and of the tool it becomes). */
export type ProposalState = 'pending' | 'validated' | 'failed' | 'rejected' | 'active' | 'retired';

/** One step of validation and its verdict. */
export interface ValidationCheck {
  kind: 'static' | 'example' | 'probe_valid' | 'probe_invalid' | 'determinism' | 'regression';
  /** e.g. `example 2`, `probe: n at its minimum (0)`, `regression: example 1 of version 3`. */
  label: string;
  ok: boolean;
  /** Why it passed or failed, in words. */
  verdict: string;
  input?: unknown;
  /** What came back (the envelope, bounded to 4 KiB of JSON; longer is cut and marked). */
  output?: unknown;
  expect?: unknown;
  duration_ms?: number;
  run_id?: string;
}

/** The full record of one validation of a proposal. */
export interface ValidationRecord {
  ok: boolean;
  started_at: string;
  duration_ms: number;
  /** How many times the impl ran in the sandbox. */
  sandbox_runs: number;
  /** The policy digest and runtime the validation ran under (approval re-validates when they change). */
  policy_digest: string;
  /** `sha256:` over the canonical spec validated (approval re-validates a spec that changed since). */
  spec_digest: string;
  runtime: string;
  checks: ValidationCheck[];
  /** The first failing checks' verdicts, for the agent. */
  summary: string;
}

/** A state change of a proposal. */
export interface ProposalEvent {
  state: ProposalState;
  at: string;
  /** Persona (agent steps) or operator identity (approve, reject, retire, rollback). */
  by: string;
  reason?: string;
}

/** A proposal: a tool that may become live. */
export interface Proposal {
  /** `p-` and 16 hex digits. */
  id: string;
  state: ProposalState;
  /** The tool name forge derived (capability in the persona's namespace). */
  name: string;
  capability: string;
  persona: string;
  session: string;
  /** The gap it answers, when it names one. */
  gap?: { kind: GapKind; signature: string };
  /** What would be forged (sandbox, network and secrets come from policy, never from here). */
  spec: ToolSpec;
  created_at: string;
  updated_at: string;
  history: ProposalEvent[];
  validation?: ValidationRecord;
  /** The active tool it would replace, when one was live at proposal time. */
  replaces?: { version: number; digest: string; proposal?: string };
  /** Set when it went live. */
  activated?: { version: number; digest: string; at: string; by: string };
}

export type { JsonSchema, ToolSpec };
