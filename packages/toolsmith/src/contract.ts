/**
 * The toolsmith's contract: the `Toolsmith` interface, its options and the answers its steps
 * give. Types only, so that every step module can name them without importing another.
 */
import type { StoredTool } from '@forge/registry';
import type { CallContext, Forge, Refusal } from '@forge/runner';
import type { FileGapStore } from './gaps.js';
import type { FileProposalStore } from './proposals.js';
import type { GapStore, ProposalStore } from './stores.js';
import type { GapSummary, Proposal, ProposalState } from './types.js';

/** Options of `createToolsmith`. */
export interface ToolsmithOptions<G extends GapStore = FileGapStore, P extends ProposalStore = FileProposalStore> {
  /** The engine the toolsmith validates in and activates through (its policy, sandbox and audit log). */
  forge: Forge;
  /** Where the file stores of the project live (default `forge.paths.toolsmithDir`); unused for a store given below. */
  dir?: string;
  /**
   * The gap store (default: the file store `openGapStore` in `dir`, bounded by policy
   * `toolsmith.gap_store_max`). A store given here stays the caller's: `close()` flushes it but
   * does not close it.
   */
  gapStore?: G;
  /** The proposal store (default: the file store `openProposalStore` in `dir`); the caller's, like `gapStore`. */
  proposalStore?: P;
  /** Clock (ms since the epoch). */
  now?: () => number;
  /** Where best-effort failures go (a gap the store could not take); default a process warning. */
  onWarning?: (message: string) => void;
}

/** An operator acting on proposals: an identity that policy `toolsmith.approvers` lists. */
export interface Operator {
  by: string;
  /**
   * Where the decision was made, for the audit entry: `cli` (default), `client` (confirmed by the
   * human at an MCP client) or `console` (the operator console's page).
   */
  via?: 'cli' | 'client' | 'console';
}

/** What `request` answers. */
export interface RequestAnswer {
  ok: true;
  capability: string;
  gap: GapSummary;
  /** May a proposal for it be authored under policy `toolsmith.capability_allow`? */
  authorable: boolean;
  message: string;
}

/** What `propose` answers: the proposal as stored, validated or failed. */
export interface ProposeAnswer {
  ok: true;
  proposal: Proposal;
  /** Blueprint fields forge did not take (a suggested name, sandbox or network settings, secrets). */
  ignored: string[];
  message: string;
}

/** A reviewable summary of one proposal (`forge toolsmith show`). */
export interface ProposalReview {
  ok: true;
  proposal: Proposal;
  /** The active tool of that name, if any. */
  active?: { version: number; digest: string; state: string; proposal?: string };
  /** A line diff of the impl against the active version (empty when there is none). */
  impl_diff: string;
  /** The gap's observations (newest last, at most 50). */
  gap_history: readonly { at: string; persona: string; source: string; description?: string }[];
}

/** What `cycle` reports. */
export interface CycleReport {
  ok: true;
  at: string;
  /** Qualifying `missing_tool` gaps with no proposal in flight or live: tools wanted. */
  wanted: GapSummary[];
  /** Qualifying `service_absent` gaps: operator signals (a gateway server that cannot run), never authored. */
  service_absent: GapSummary[];
  /** Proposals waiting for an approver. */
  awaiting_approval: number;
}

/** Where the toolsmith stands for one persona. */
export interface ToolsmithStatus {
  enabled: boolean;
  paused: boolean;
  pausedWhy?: string;
  mode: 'direct' | 'governed';
  /** May this persona approve through its MCP client (policy approve_in_client; an operator and an approver)? */
  approvesInClient: boolean;
}

/** The toolsmith of one project; `G` and `P` are the types of its stores (the file stores unless others were given). */
export interface Toolsmith<G extends GapStore = FileGapStore, P extends ProposalStore = FileProposalStore> {
  readonly gaps: G;
  readonly proposals: P;
  /** For `ForgeOptions.onUnknownTool`: records a `missing_tool` gap; the returned hint goes into the `unknown_tool` message. */
  unknownTool(name: string, ctx: { persona: string; session: string }): string | undefined;
  /** `forge_request {capability, description, example_inputs?}`: records the need explicitly. */
  request(args: unknown, ctx?: CallContext): Promise<RequestAnswer | Refusal>;
  /** `forge_propose {…}`: stores the blueprint as a proposal and validates it at once. */
  propose(args: unknown, ctx?: CallContext): Promise<ProposeAnswer | Refusal>;
  list(o?: { state?: ProposalState | ProposalState[]; name?: string }): Promise<Proposal[]>;
  get(id: string): Promise<Proposal | undefined>;
  show(id: string): Promise<ProposalReview | Refusal>;
  approve(id: string, op: Operator): Promise<{ ok: true; proposal: Proposal; tool: StoredTool; revalidated: boolean } | Refusal>;
  reject(id: string, op: Operator & { reason: string }): Promise<{ ok: true; proposal: Proposal } | Refusal>;
  retire(name: string, op: Operator & { reason?: string }): Promise<{ ok: true; tool: StoredTool; proposal?: Proposal } | Refusal>;
  rollback(name: string, op: Operator): Promise<{ ok: true; tool: StoredTool; proposal: Proposal; from?: Proposal } | Refusal>;
  /** Every gap held, judged by the policy's threshold and window now (`forge toolsmith gaps`); readable while off or paused. */
  gapSummary(): GapSummary[] | Refusal | Promise<GapSummary[] | Refusal>;
  /** Promotes qualifying gaps to wanted signals and reports; never authors or approves. */
  cycle(): Promise<CycleReport | Refusal>;
  status(persona?: string): ToolsmithStatus;
  close(): Promise<void>;
}
