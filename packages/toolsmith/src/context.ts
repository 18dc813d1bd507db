import type { StoredTool } from '@forge/registry';
import type { Forge, Refusal } from '@forge/runner';
import type { DamagedProposals } from './damagedProposals.js';
import type { PolicyGate } from './gate.js';
import type { GapStore, ProposalStore } from './stores.js';

/**
 * What a toolsmith is made of, built once by `createToolsmith`. Each step takes the few parts it
 * uses (a `Pick` of this), so its signature says what it touches.
 */
export interface ToolsmithContext {
  /** The engine: its policy, sandbox, registry and audit log. */
  readonly forge: Forge;
  readonly gaps: GapStore;
  readonly proposals: ProposalStore;
  /** Clock (ms since the epoch). */
  readonly now: () => number;
  /** Where best-effort failures go. */
  readonly warn: (message: string) => void;
  /** The policy gate every step passes (`toolsmith.enabled`, the `paused` kill switch). */
  readonly gate: PolicyGate;
  /** Proposal files that could not be read, so that a refusal of that id names the file. */
  readonly damaged: DamagedProposals;
  /** Proposals made per session by this process (the forge-count breaker's limit applies). */
  readonly proposedBy: Map<string, number>;
  /** Appends the `toolsmith.<type>` audit entry; a refusal when the log did not take it. */
  record(type: string, data: Record<string, unknown>): Promise<Refusal | undefined>;
  /** The live tool of `name` in the project scope (the toolsmith's tools live there). */
  activeTool(name: string): Promise<StoredTool | undefined>;
}
