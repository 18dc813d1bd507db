/**
 * @forge/mcp — forge's MCP server: the meta-tools to forge and call tools at runtime, every
 * forged tool as a dynamic MCP tool, `notifications/tools/list_changed`, and the stdio and
 * Streamable HTTP transports.
 *
 * Public API. Everything exported here is a deliberate, documented decision.
 */
export { APPROVE_TOOL_DEFINITION } from './approveTool.js';
export { FORGE_MCP_ERROR_CODES, ForgeMcpError, type ForgeMcpErrorCode } from './errors.js';
export { type HttpServerHandle, type ServeHttpOptions, serveHttp } from './http.js';
export { type HttpTokenGrant, isLoopback } from './httpAccess.js';
export type { AuditTreeSource } from './httpTlog.js';
export { META_TOOL_DEFINITIONS } from './metaTools.js';
export { createForgeMcpServer, type ForgeMcpServerOptions } from './server.js';
export { type ServeStdioOptions, type StdioServerHandle, serveStdio } from './stdio.js';
export {
  TOOLSMITH_TOOL_DEFINITIONS,
  type ToolsmithApproveAnswer,
  type ToolsmithProposeAnswer,
  type ToolsmithRequestAnswer,
  type ToolsmithSurface,
  type ToolsmithSurfaceCheck,
  type ToolsmithSurfaceReview,
  type ToolsmithSurfaceStatus,
} from './toolsmithTools.js';
