/**
 * @forge/toolsmith — governed forging: capability gaps become proposals, proposals are validated
 * in the sandbox, a human approves, and only then does a tool go live.
 *
 * Public API. Everything exported here is a deliberate, documented decision.
 */
export { type Blueprint, type RequestArgs, readBlueprint, readRequest } from './blueprint.js';
export type {
  CycleReport,
  Operator,
  ProposalReview,
  ProposeAnswer,
  RequestAnswer,
  Toolsmith,
  ToolsmithOptions,
  ToolsmithStatus,
} from './contract.js';
export { type ExpectEnvelope, matchExpect, sameData } from './expect.js';
export {
  type FileGapStore,
  GapStoreError,
  type GapStoreErrorCode,
  type GapStoreOptions,
  openGapStore,
  type SanitizeResult,
  sanitizeGapRecord,
  summarizeGaps,
} from './gaps.js';
export { checkGapQuery, type GapWriter, type GapWriterOptions, openGapWriter } from './gapWriter.js';
export { capabilitySlug, deriveToolName } from './naming.js';
export { generateProbes, type Probe, type ProbeOptions } from './probes.js';
export {
  applyTransition,
  byActivation,
  byNewest,
  checkTransition,
  type FileProposalStore,
  filterProposals,
  isProposalId,
  lineageOf,
  MAX_PROPOSAL_FILE_BYTES,
  newProposal,
  newProposalId,
  openProposalStore,
  type ProposalStoreOptions,
  proposalProblem,
  unknownProposal,
} from './proposals.js';
export { lineDiff } from './review.js';
export { createToolsmith } from './service.js';
export type {
  Awaitable,
  GapInput,
  GapQuery,
  GapStore,
  ProposalFilter,
  ProposalInput,
  ProposalStore,
  UpdateResult,
} from './stores.js';
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
