/**
 * @forge/gateway — external MCP servers as forge tools: each upstream declared by the operator in
 * `gateway.json`, run inside forge's sandbox, its tools pinned when approved, and served through
 * the runner's call pipeline as a `ToolSource`.
 *
 * Public API. Everything exported here is a deliberate, documented decision.
 */
export {
  createGatewayConfig,
  GATEWAY_FILE_LIMIT,
  type GatewayConfigEvent,
  type GatewayConfigOptions,
  type GatewayConfigSource,
  type GatewayConfigState,
  type GatewaySourceDocument,
  type MergeResult,
  mergeGatewayDocuments,
  serverConfig,
} from './config.js';
export {
  GATEWAY_SCHEMA,
  type GatewayDocument,
  type GatewayLevel,
  type GatewayParseResult,
  type GatewayProblem,
  type GatewayServerEntry,
  type ParsedGatewayDocument,
  parseGatewayDocument,
} from './configDocument.js';
export { type AddServersResult, addGatewayServers } from './configFile.js';
export { fileDigest, type ServerDefinition, serverDefinition } from './definition.js';
export { type ImportResult, type ImportSkip, importMcpConfig, type VaultNeed } from './importConfig.js';
export {
  type DefinitionPin,
  type LastAudited,
  openPinStore,
  PINNED_FIELDS,
  type PinFailure,
  type PinStore,
  type PinStoreOptions,
  type Pins,
  type PinsRead,
  type PinWrite,
  type RecordAudit,
  toolDigest,
} from './pins.js';
export { createGateway, type GatewayOptions } from './source.js';
export { isForgeToolName } from './tool-names.js';
export { DEFAULT_MAX_MESSAGE_BYTES } from './transport.js';
export type {
  ApprovalVia,
  Gateway,
  GatewayConfig,
  Pin,
  PinStatus,
  ServerConfig,
  ServerReport,
  ToolDefinition,
  ToolDiff,
  ToolState,
} from './types.js';
export { ACCEPTED_PROTOCOL_VERSIONS, BREAKER, LIST_LIMITS, restartDelay } from './upstream.js';
