import type { ToolSource } from '@forge/runner';

/**
 * The contract between the gateway's parts (config.ts and pins.ts by one author, upstream.ts and
 * source.ts by another) and the CLI. Change it only together.
 */

/** One upstream MCP server as the operator declared it in gateway.json (merged, validated). */
export interface ServerConfig {
  /** The `<server>` part of tool names: the tool-name grammar without dots. */
  name: string;
  transport: 'stdio' | 'http';
  /** stdio: the program (a path, or a name found on PATH) and its arguments. */
  command?: string;
  args: string[];
  /** stdio: the working directory inside the sandbox (default `/tmp`). */
  cwd?: string;
  /** Plain (non-secret) environment for the upstream. */
  env: Record<string, string>;
  /** http: the Streamable HTTP endpoint. */
  url?: string;
  /** Environment variable name → vault name (stdio); `Authorization` → vault name sends `Bearer <value>` (http). */
  secrets: Record<string, string>;
  /** Host paths the sandboxed upstream sees (the same path inside), checked like x-bind. */
  binds: { path: string; mode: 'ro' | 'rw' }[];
  /** No network (false), or egress through forge's proxy under these domain rules. */
  network: false | { allow_domains: string[]; deny_domains: string[]; allow_ports: number[]; private_networks: boolean };
  /** Only these upstream tools may be projected (undefined: any, still subject to approval). */
  tools?: string[];
  /** Run the stdio upstream on the host without the sandbox (user-level gateway.json only; audited; doctor warns). */
  unsandboxed: boolean;
  /** Per-call wall-clock default (ms); policy budgets still clamp it. */
  timeout_ms?: number;
  /** Sandbox limits of the long-lived upstream process. */
  limits: { memory_mb?: number; processes?: number };
  /** Which file declared it. */
  from: 'user' | 'project';
  file: string;
}

export interface GatewayConfig {
  servers: ReadonlyMap<string, ServerConfig>;
  /** `sha256:` over the merged document. */
  digest: string;
}

/** An upstream tool's definition as listed (what a pin covers). */
export interface ToolDefinition {
  name: string;
  title?: string;
  description?: string;
  inputSchema: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
  annotations?: Record<string, unknown>;
}

export interface Pin {
  digest: string;
  definition: ToolDefinition;
  approved_at: string;
  approved_by: string;
}

/** How an upstream tool stands against its pin. */
export type PinStatus = 'approved' | 'new' | 'changed' | 'removed' | 'not_allowed';

export interface ToolState {
  server: string;
  tool: string;
  /** `<server>.<tool>` */
  name: string;
  status: PinStatus;
  digest?: string;
  pinned?: string;
  definition?: ToolDefinition;
}

export interface ToolDiff {
  tool: string;
  status: 'new' | 'changed' | 'removed';
  old?: { digest: string; definition: ToolDefinition };
  new?: { digest: string; definition: ToolDefinition };
  /** The fields that differ (`description`, `inputSchema`, …) for a changed tool. */
  fields: string[];
}

/** Where an approval or unpin was made: the CLI (the default) or the operator console; recorded as `via`. */
export type ApprovalVia = 'cli' | 'console';

/** What `forge doctor` and `forge gateway list` say of one server. */
export interface ServerReport {
  name: string;
  transport: 'stdio' | 'http';
  sandboxed: boolean;
  from: 'user' | 'project';
  /** running, stopped (never started), failed (last start failed; see error), open breaker. */
  state: 'running' | 'stopped' | 'failed' | 'breaker_open';
  protocolVersion?: string;
  serverInfo?: { name: string; version: string };
  /**
   * Its approved tools: with a probe, those it lists now as pinned, and those it lists withheld
   * (new or changed); without one (nothing started), the tools pinned for it (no `withheld`).
   */
  tools: { approved: number; withheld?: number };
  /**
   * The digest of the server's definition as declared now (command, arguments, environment,
   * secrets' vault names, binds, network, limits, the files of its executable and absolute
   * arguments): what an approval covers besides the tools.
   */
  definition: string;
  restarts: number;
  error?: string;
}

/** The gateway: a ToolSource for the runner, plus what the operator's CLI needs. */
export interface Gateway extends ToolSource {
  /** Why forging `name` is refused: it lies in a configured server's namespace (`<server>.*`, `<server>__*`, any case). */
  owns(name: string): string | undefined;
  /** The configuration now (reloaded when its files changed), or why it cannot be read. */
  config(): { ok: true; config: GatewayConfig } | { ok: false; kind: string; message: string };
  /** Each configured server, without starting any (`probe: true` starts each and lists its tools). */
  servers(options?: { probe?: boolean }): Promise<ServerReport[]>;
  /** Every tool the server lists now (it is started), with its pin status. */
  tools(server: string): Promise<ToolState[] | { ok: false; kind: string; message: string }>;
  /**
   * Pins the named tools' current definitions (all listed ones when `tools` is empty); audited.
   * Over a pins.json that cannot be trusted (changed or damaged outside forge) it sets that file
   * aside (`pins.json.untrusted-<time>`, kept) and starts a new one with only these pins. With
   * `expect` (tool → the digest the approver reviewed), every tool to be pinned must be listed
   * there with the digest it has now, else nothing is pinned (`state_conflict`): an approval
   * covers what was shown, not what the server lists a moment later. With `definition` (the
   * {@link ServerReport.definition} reviewed), the server's definition must still have it.
   * `via` (`cli` unless said) is recorded in the audit entry with `by`.
   */
  approve(
    server: string,
    tools: string[],
    by: string,
    options?: { expect?: Readonly<Record<string, string>>; definition?: string; via?: ApprovalVia },
  ): Promise<{ ok: true; approved: ToolState[] } | { ok: false; kind: string; message: string }>;
  /** What changed against the pins. */
  diff(server: string): Promise<ToolDiff[] | { ok: false; kind: string; message: string }>;
  /** Drops the pins of a server (or some of its tools); audited, with `by` and `via` (`cli` unless said). */
  unpin(
    server: string,
    tools: string[],
    by: string,
    options?: { via?: ApprovalVia },
  ): Promise<{ ok: true; removed: string[] } | { ok: false; kind: string; message: string }>;
}
