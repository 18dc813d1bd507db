/**
 * @forge/registry — tool specs validated with JSON Schema, an atomic on-disk store with scopes
 * and shadowing, a static check, promote and watch.
 *
 * Public API. Everything exported here is a deliberate, documented decision.
 */

export type {
  CreateOptions,
  CreateResult,
  ListedTool,
  LoadReport,
  OwnerCheck,
  PathLock,
  PromoteOptions,
  PromoteOutcome,
  PromoteResult,
  RecoverResult,
  Registry,
  RegistryOptions,
  RemoveResult,
  ResolvedTool,
  SetStateResult,
  WriteOk,
} from './contract.js';
export { digestSpec, STAMP_FIELDS, type TamperedFailure, verifyToolDigest } from './digest.js';
export { REGISTRY_ERROR_CODES, RegistryError, type RegistryErrorCode } from './errors.js';
export { fileToolStore } from './fileToolStore.js';
/**
 * The durable-file steps the registry writes with, for packages that keep their own files the same
 * way (the toolsmith's proposals): a fsynced 0600 temp file, published by link (never replaces) or
 * rename (replaces), then the directory fsynced.
 */
export { linkNew, replaceWith, syncDir, writeTemp } from './fs-atomic.js';
export { describeCharacter, escapeCharacter, findUnsafeCharacter, inertJson, inertText, type UnsafeCharacter } from './inert.js';
export {
  type CompiledToolSchema,
  type CompileToolSchemaOptions,
  compileToolSchema,
  type SchemaDialect,
  TOOL_SCHEMA_AJV_OPTIONS,
  type ToolDataValidator,
  type ToolValidators,
  toolValidators,
  VALIDATION_BUDGET_MS,
} from './json-schema.js';
export { MAX_PATTERN_REPEAT } from './linear-pattern.js';
export { isValidToolName, MAX_NAME_BYTES, toolNameProblem, WIRE_NAME_PATTERN, wireKey, wireLockKey, wireName } from './name.js';
export { createRegistry } from './registry.js';
export { type ScopeRoots, type ScopeRootsInput, scopeIdProblem, scopeRoots } from './scopes.js';
export { DEFAULT_RUNTIMES, type SpecOk, TOOL_SPEC_SCHEMA, type ValidateSpecOptions, validateSpec } from './spec.js';
export {
  type RuntimeFamily,
  runtimeFamily,
  STATIC_RULES,
  type StaticCheckOptions,
  type StaticFinding,
  type StaticRule,
  staticCheck,
} from './static-check.js';
export { checkStoredRecord, type StoredRecordContext } from './storedRecord.js';
export type {
  Collisions,
  Decide,
  Decision,
  FileFailure,
  ReadResult,
  StoreFailure,
  StoreWatcher,
  StoreWatchOptions,
  ToolStore,
  ToolVersion,
} from './toolStore.js';
export {
  type CreatedBy,
  type DamagedTool,
  type Failure,
  type JsonSchema,
  type LoadFailedEvent,
  type RegistryEvent,
  type RegistryFailureKind,
  SCOPES,
  type Scope,
  type SpecProblem,
  type StoredTool,
  TOOL_STATES,
  type ToolExample,
  type ToolMeta,
  type ToolOrigin,
  type ToolSpec,
  type ToolState,
  type ValidationFailure,
} from './types.js';
export type { ScopeChange, WatchOptions } from './watch.js';
export { markWireConflicts, wireTaken } from './wire.js';
