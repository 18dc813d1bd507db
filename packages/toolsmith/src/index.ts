/**
 * @forge/toolsmith — governed forging: capability gaps become proposals, proposals are validated
 * in the sandbox, a human approves, and only then does a tool go live.
 *
 * Public API. Everything exported here is a deliberate, documented decision.
 */
export { type Blueprint, type RequestArgs, readBlueprint, readRequest } from './blueprint.js';
export { type ExpectEnvelope, matchExpect, sameData } from './expect.js';
export {
  type GapStore,
  GapStoreError,
  type GapStoreErrorCode,
  type GapStoreOptions,
  openGapStore,
  type SanitizeResult,
  sanitizeGapRecord,
} from './gaps.js';
export { capabilitySlug, deriveToolName } from './naming.js';
export { generateProbes, type Probe, type ProbeOptions } from './probes.js';
export {
  MAX_PROPOSAL_FILE_BYTES,
  openProposalStore,
  type ProposalStore,
  type ProposalStoreOptions,
  type UpdateResult,
} from './proposals.js';
export {
  type CycleReport,
  createToolsmith,
  lineDiff,
  type Operator,
  type ProposalReview,
  type ProposeAnswer,
  type RequestAnswer,
  type Toolsmith,
  type ToolsmithOptions,
  type ToolsmithStatus,
} from './service.js';
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
export { type ValidationJob, validateProposal } from './validate.js';
