/**
 * @forge/runner — the forge engine: `createForge()` runs the forge and call pipelines over the
 * registry, the policy, the sandbox and the audit log.
 *
 * Public API. Everything exported here is a deliberate, documented decision.
 */

/** The name MCP clients see for a tool, and what every such name matches (from @forge/registry). */
/** Text an agent, a tool or an upstream wrote, made inert for a person's screen (from @forge/registry: the one rule). */
export { inertText, WIRE_NAME_PATTERN, wireName } from '@forge/registry';
export {
  type AgentTool,
  type AgentToolCallOptions,
  type AgentToolOrigin,
  type CallContext,
  type DispatchOptions,
  type Forge,
  type ForgeEvent,
  type ForgeOptions,
  type ForgeResult,
  type ForgeToolOptions,
  META_TOOLS,
  type RemoveToolResult,
  type ToolsChanged,
  type TrialOptions,
  type TrialResult,
  type WorkOptions,
} from './api.js';
export { MIME_HEAD_BYTES, mimeTypeOf } from './artifactFiles.js';
export { AUDIT_RECOVERED, AUDIT_UNAVAILABLE } from './auditGate.js';
export { AUDIT_TAIL_WINDOW, type AuditTail, MAX_AUDIT_TAIL } from './auditTail.js';
export { type CacheLimits, DEFAULT_CACHE_LIMITS } from './cache.js';
export { assertCacheKey, CACHE_KEY_PATTERN, type CacheEntry, type CacheStore, fileCacheStore, isCacheEntry } from './cacheStore.js';
export { readAuditKey } from './checkpoints.js';
export { defaultWorkerName } from './engine.js';
export type { Envelope, EnvelopeMeta, ErrorEnvelope, OkEnvelope } from './envelope.js';
export { DEFAULT_EVENT_LIMITS, type EventLimits, type EventSummary, LOG_LEVELS, type LogLevel, type ToolEvent } from './events.js';
export { createForge } from './forge.js';
/** The call hooks a call meets (see docs/architecture.md "Hooks"): for `forge doctor` and embedders that show them. */
export { type FoundHooks, findHooks, type HookFile, type HookStage, hookRoots } from './hooks/find.js';
export type { ArtifactInfo } from './manifest.js';
export { type DroppedFile, type FileRef, MAX_META_FILES } from './metaFiles.js';
export { defaultForgeHome, type ForgePaths, findProject } from './paths.js';
/** A call's receipt (`meta.audit`), and the key name the audit log's tree checkpoints are signed under. */
export { AUDIT_KEY_NAME, type AuditReceipt } from './receipts.js';
export type { Refusal } from './refusal.js';
export {
  artifactPathProblem,
  artifactUri,
  manifestUri,
  parseRunUri,
  RUN_ID_PATTERN,
  type RunUri,
  runIdProblem,
} from './runIds.js';
export { openFilesLimit } from './runSlots.js';
export { type ArtifactBytes, assertRunId, type FoundRun, fileRunStore, type RunStore, type StoredArtifact } from './runStore.js';
export { type ArtifactContent, DEFAULT_ARTIFACT_MAX_BYTES, type RunArtifact, type RunRecord } from './runs.js';
export type { SourceContext, SourcedTool, SourceHost, SourceJob, SourceResult, ToolOrigin, ToolSource } from './sources.js';
/** W3C trace context in and out of `_meta` and jobs (OpenTelemetry; empty when nothing records): for front-ends and sources. */
export { extractTrace, injectTrace, type TraceCarrier, telemetryApi } from './telemetry.js';
export type { ToolCap, ToolCard, ToolPolicyView } from './toolCard.js';
export { type AnnotatedSpec, bindModes, type SandboxFacts, type ToolAnnotations, toolAnnotations } from './toolHints.js';
/** A tool's schemas as clients outside forge get them (forge's `x-*` annotations stripped): for front-ends such as @forge/mcp. */
export { type BindAt, bindsNote, callerInputSchema, callerOutputSchema, stripAnnotations } from './toolSchemas.js';
