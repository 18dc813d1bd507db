import type { InjectedSecret } from '@forge/policy';
import type { ToolEvent } from './events.js';

/**
 * Tool sources: tools that something other than forge's registry serves, such as an upstream MCP
 * server's tools projected by the gateway. A source lists its tools and runs one call; every
 * other step of the call pipeline (persona ACL, forbidden names, allow-rules, breakers, input and
 * output validation, secrets, redaction, the run manifest and the audit entry) is the runner's,
 * the same as for a forged tool. A source never reads the vault: the runner reads the secrets a
 * tool names (after the persona's allow-list) and hands their values to `execute`.
 */

/** One tool a source serves. */
export interface SourcedTool {
  /** The forge name, `<server>.<tool>` for the gateway (the tool-name grammar; wire-safe on the wire). */
  name: string;
  description: string;
  /** A JSON Schema of an object: the call's input is validated against it before `execute`. */
  input_schema: Record<string, unknown>;
  /** When present, an ok answer's `data` must validate against it. */
  output_schema?: Record<string, unknown>;
  /** `sha256:` of the definition as approved (the pin); it stands in for a forged tool's digest. */
  digest: string;
  /** Where the tool comes from, for listings, the manifest and the audit entry. */
  origin: ToolOrigin;
  /** The upstream's MCP tool annotations (hints; forge's own facts override them in listings). */
  annotations?: Record<string, unknown>;
  meta?: {
    /** Vault names of the secrets a call needs (checked against `persona_secret_allow`, then read). */
    secrets?: string[];
    /** The call's wall-clock budget request (clamped by policy like a forged tool's). */
    timeout_ms?: number;
  };
}

export interface ToolOrigin {
  /** What serves it: `gateway`. */
  kind: string;
  /** The configured server (the `<server>` part of the name). */
  server: string;
  /** The tool's name at the upstream. */
  tool: string;
  /** Whether the upstream runs inside forge's sandbox (`false` for an operator's `unsandboxed` server or a URL). */
  sandboxed: boolean;
  /** `stdio` or `http`. */
  transport: string;
}

/** Who asks: a source may serve each persona a different set of tools. */
export interface SourceContext {
  persona: string;
  session: string;
  task?: string;
  /**
   * For `list`: answer from what the source keeps (the gateway: the approved definitions, not
   * checked against the live upstream), starting and connecting nothing. A call still checks.
   */
  offline?: boolean;
}

/** One call for a source to run: gates passed, input valid, secrets read. */
export interface SourceJob extends SourceContext {
  tool: SourcedTool;
  input: unknown;
  /** The run's id (its manifest is `runs/<…>_<id>/run_manifest.json`). */
  runId: string;
  /** Vault name → value of the tool's `meta.secrets` (empty when it names none). */
  secrets: ReadonlyMap<string, string>;
  /**
   * The caller's authority (`sha256:` of the persona's effective grant; docs/security.md,
   * invariant 1). Whatever the source keeps between calls and shares among callers (an upstream
   * connection, and every notification it sends) is keyed by it.
   */
  authority: string;
  /** Aborted when the caller cancels, the budget's time runs out, or forge closes. */
  signal: AbortSignal;
  /** The wall-clock budget after policy clamped it; the source ends the call by then. */
  timeoutMs: number;
  /** Progress and log events from the upstream, as they come (the runner redacts and caps them first). */
  onEvent?: (event: ToolEvent) => void;
}

/**
 * What a call gave. `ok: false` with `outcome: 'failure'` counts against the tool's failure
 * breaker (the upstream crashed, timed out, broke the protocol); `'none'` does not (the caller
 * cancelled); a tool's own error answer (`kind: 'upstream_error'`) is an answer, `'success'`.
 * `facts` go into the run manifest (protocol version, upstream pid or url, restarts, timings);
 * they must hold no secret values and no large bodies.
 */
export type SourceResult =
  | { ok: true; data: unknown; content?: unknown[]; facts?: Record<string, unknown> }
  | {
      ok: false;
      kind: string;
      message: string;
      outcome: 'success' | 'failure' | 'none';
      content?: unknown[];
      facts?: Record<string, unknown>;
    };

/** What the runner gives a source when `createForge` takes it. */
export interface SourceHost {
  /** Appends one audit entry; resolves once it is durable, or to why it could not be written. */
  record(type: string, data: Record<string, unknown>): Promise<{ message: string } | undefined>;
  /**
   * The data of the last audit entry of `type` (read from the log, newest first), or undefined when
   * the log holds none: how a source checks that its own state is the state the log last recorded.
   */
  lastAudited(type: string): Promise<Record<string, unknown> | undefined>;
  /**
   * Where a project-level source may bind host paths: the policy's `bind_roots` now, expanded for
   * this project (none while the policy cannot be read: fail closed).
   */
  bindRoots(): string[];
  /**
   * How policy delivers each of these vault secrets now (`secret_delivery`): in the environment,
   * or by placeholder (the source's sandboxed processes then get a placeholder and their egress
   * proxy substitutes). All in the environment while the policy cannot be read (its calls are
   * refused then anyway).
   */
  secretDelivery?(names: readonly string[]): { env: string[]; inject: InjectedSecret[] };
  /** Certificates trusted for placeholder secrets' hosts besides the system's roots (`upstreamCa`). */
  readonly upstreamCa?: readonly string[];
  /** The forge home and project paths (state goes under `home`). */
  readonly home: string;
  readonly project: string;
}

export interface ToolSource {
  /** What it serves, e.g. `gateway`; also the audit entry's prefix (`gateway.called`). */
  readonly kind: string;
  /** Called once by `createForge` before any other method. */
  attach(host: SourceHost): void | Promise<void>;
  /** The tools `ctx` may be offered now (approved, unchanged, allowed by the source's own config). */
  list(ctx: SourceContext): Promise<readonly SourcedTool[]>;
  /** One tool by its forge name, under the same rules as `list`; undefined when it is not offered. */
  resolve(name: string, ctx: SourceContext): Promise<SourcedTool | undefined>;
  /** Runs one call. Rejects only on a bug; every upstream failure is a `SourceResult`. */
  execute(job: SourceJob): Promise<SourceResult>;
  /**
   * Whether `name` (a forge name, or a wire name) lies in a namespace the source serves, so that
   * forging it would shadow the source's tools: the reason to refuse, or undefined. The gateway
   * owns `<server>.*` (and `<server>__*`) of every configured server, approved tools or not.
   */
  owns?(name: string): string | undefined;
  /** Called with the names whose definition or availability changed (list them again). */
  onChange(listener: (names: string[]) => void): () => void;
  /** Stops everything the source started (upstream processes, connections, watchers). */
  close(): Promise<void>;
}
