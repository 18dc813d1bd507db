/**
 * @forge/runner — the forge engine: `createForge()` runs the forge and call pipelines over the
 * registry, the policy, the sandbox and the audit log.
 *
 * Public API. Everything exported here is a deliberate, documented decision.
 */
export { AUDIT_RECOVERED, AUDIT_UNAVAILABLE } from './auditGate.js';
export { type CacheLimits, DEFAULT_CACHE_LIMITS } from './cache.js';
export type { Envelope, EnvelopeMeta, ErrorEnvelope, OkEnvelope } from './envelope.js';
export {
  type CallContext,
  createForge,
  type Forge,
  type ForgeEvent,
  type ForgeOptions,
  type ForgeResult,
  type ForgeToolOptions,
  META_TOOLS,
  type Refusal,
  type ToolsChanged,
} from './forge.js';
export { defaultForgeHome, type ForgePaths, findProject } from './paths.js';
