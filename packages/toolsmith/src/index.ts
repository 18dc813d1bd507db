/**
 * @forge/toolsmith — governed forging: capability gaps become proposals, proposals are validated
 * in the sandbox, a human approves, and only then does a tool go live.
 *
 * Public API. Everything exported here is a deliberate, documented decision.
 */
export type {
  GapKind,
  GapRecord,
  GapSource,
  GapSummary,
  Proposal,
  ProposalEvent,
  ProposalState,
  ValidationCheck,
  ValidationRecord,
} from './types.js';
