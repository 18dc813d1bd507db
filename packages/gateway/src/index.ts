/**
 * @forge/gateway — external MCP servers as forge tools: each upstream declared by the operator in
 * `gateway.json`, run inside forge's sandbox, its tools pinned when approved, and served through
 * the runner's call pipeline as a `ToolSource`.
 *
 * Public API. Everything exported here is a deliberate, documented decision.
 */
export {};
