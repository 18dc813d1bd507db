import type { AuditLog } from '@forge/audit-chain';
import type { PolicySnapshot } from '@forge/policy';
import type { JobQueue } from '@forge/queue';
import type { DamagedTool, ListedTool, Scope, StoredTool, ToolState, ToolStore } from '@forge/registry';
import type { Resolver, RuntimeTable } from '@forge/sandbox';
import type { AuditTail } from './auditTail.js';
import type { CacheLimits, CacheStore } from './cache.js';
import type { Envelope } from './envelope.js';
import type { ToolEvent } from './events.js';
import type { ForgePaths } from './paths.js';
import type { Refusal } from './refusal.js';
import type { RunStore } from './runStore.js';
import type { ArtifactContent, RunRecord } from './runs.js';
import type { SourcedTool, ToolSource } from './sources.js';
import type { ToolCard } from './toolCard.js';
import type { SandboxFacts, ToolAnnotations } from './toolHints.js';

/** The refusal type, for modules that name it here (refusal.ts is its one home). */
export type { Refusal } from './refusal.js';

/** The public API of the engine: what `createForge` takes and returns. */

/** The meta-tools an MCP server serves itself: never forged, always callable. */
export const META_TOOLS = Object.freeze([
  'forge_tool',
  'forge_call',
  'forge_list',
  'forge_promote',
  'forge_remove',
  'forge_request',
  'forge_propose',
] as const);

/** Who is asking: the persona and its ACL, and the session and task whose scopes apply. */
export interface CallContext {
  /** Default: `FORGE_PERSONA`, else `default`. */
  persona?: string;
  /** Default: `FORGE_SESSION_ID`, else one id per `createForge`. */
  session?: string;
  /** Default: `FORGE_TASK_ID`, else no task scope. */
  task?: string;
  /** `FORGE_ALLOWED_TOOLS` for this caller (comma list; unset: every tool). Default: the environment's. */
  allowedTools?: string;
  /** Aborting kills the call's sandbox. */
  signal?: AbortSignal;
  /**
   * Called with each event the tool writes to descriptor 3 while it runs, as it arrives:
   * validated, within the run's bounds, and redacted by its secret values. A cache hit (or a call
   * answered by another caller's run of the same input) gets none. Exceptions are ignored.
   */
  onEvent?: (event: ToolEvent) => void;
}

export interface ForgeOptions {
  /** Default: `$FORGE_HOME`, `$XDG_CONFIG_HOME/forge`, `~/.config/forge`. */
  home?: string;
  /** Default: the nearest ancestor of the working directory holding `.forge/` or `.git`. */
  project?: string;
  /** The policy files (defaults from the layout); `false` for the bundle defaults only. */
  policy?: { userFile?: string; workspaceFile?: string; rulesFile?: string } | false;
  /** Default: `FORGE_SECRET_VAULT`, else `<home>/secrets.json`. */
  vaultPath?: string;
  /** An open audit log to append to (not closed by `close()`); default: `<home>/audit/forge.log`. */
  audit?: AuditLog;
  /**
   * An Ed25519 private key file (PEM, mode 0600) that signs the audit log's checkpoints when forge
   * opens the log itself. Default: `FORGE_AUDIT_KEY`; neither: checkpoints are unsigned.
   */
  auditKey?: string;
  /** Default: `resolveRuntimes()` from @forge/sandbox. */
  runtimes?: RuntimeTable;
  /** Deterministic-result cache limits, or `false` to turn it off. */
  cache?: Partial<CacheLimits> | false;
  /**
   * Where cached results are kept (default: files under the home's cache directory, limited by
   * `cache`). A store shared by several front-ends (`postgresCacheStore`) keeps its own limits.
   */
  cacheStore?: CacheStore;
  /**
   * Where run manifests, cache hit records and artifact metadata are kept (default: files under
   * the project's `.forge/runs/`). Front-ends and workers sharing one (`postgresRunStore`) read
   * each other's runs.
   */
  runStore?: RunStore;
  /**
   * Called when a call names no known tool (the toolsmith records the gap here). A returned text
   * is added to the `unknown_tool` message (what the agent can do about it). Exceptions are ignored.
   */
  onUnknownTool?: (name: string, ctx: Required<Pick<CallContext, 'persona' | 'session'>>) => string | undefined;
  /** The environment read for FORGE_PERSONA, FORGE_ALLOWED_TOOLS, FORGE_SESSION_ID, FORGE_TASK_ID. */
  env?: NodeJS.ProcessEnv;
  /** Clock (ms since the epoch) for breakers, the cache and stamps. */
  now?: () => number;
  /** The bwrap to use (default: the one on PATH). */
  bwrapPath?: string;
  /**
   * Keep sandboxes built ahead of time for the next calls (default true). A call without `x-bind`
   * or network then starts in one that is already set up, which takes bwrap's own 2–3 ms off its
   * latency. As many wait per runtime as its recent calls want (at most four, eight in all; one
   * once idle for a minute, none after ten), each a few idle processes; they never keep the
   * process alive and are stopped by `close()`.
   */
  prebuild?: boolean;
  /**
   * Warm interpreters (default: on where sandboxes are built ahead). A Python or Node tool's call
   * then starts in a sandbox built ahead whose interpreter is already running, with
   * `pythonPreload` imported (default: json, sys, os, math, re, csv, statistics) or `nodePreload`
   * required (default: node:net): the call pays neither bwrap nor the interpreter's start. Its limits
   * count from the call (a Node tool's RLIMIT_CPU is one second above its budget, for the warm-up;
   * its cgroup still counts the budget from the call); the manifest says `sandbox.mode: "warm"`
   * and what the warm-up cost. A sandbox serves one call, warm or not. `poolBytes`: the memory the
   * waiting warm sandboxes may hold in all (default 128 MiB, never more than a quarter of the
   * host's available memory); past it calls start cold.
   */
  warm?: boolean | { pythonPreload?: readonly string[]; nodePreload?: readonly string[]; poolBytes?: number };
  /**
   * Sandboxes running at once in this process (default: four per core, fewer when the open-files
   * limit leaves room for fewer; at least 2). Calls past it wait for a free one, in order; a
   * caller that cancels while waiting leaves the line.
   */
  maxConcurrentRuns?: number;
  /** How the egress proxy resolves names (default: the system resolver); tests map names with it. */
  resolver?: Resolver;
  /**
   * Certificates (PEM) the egress proxy trusts, besides the system's roots, for the hosts of
   * secrets delivered by placeholder (policy `secret_delivery`): a private host's CA.
   */
  upstreamCa?: readonly string[];
  /**
   * Watch the scope directories, so tools that another process forges, promotes or removes are
   * seen at once and reported through `toolsChanged` (a server wants this; a one-shot CLI does not).
   */
  watch?: boolean;
  /**
   * Tools served by something other than the registry (the gateway's upstream MCP servers): each
   * is listed after the forged tools and called through the same gates, validation, breakers,
   * redaction, manifest and audit entry (see sources.ts). `close()` closes them.
   */
  sources?: readonly ToolSource[];
  /**
   * Hands the execute and record steps of forged tools' calls to workers through a job queue
   * (a front-end: `forge serve --workers N`, or many front-ends over one store): each call is
   * published as a job, run by a worker (`Forge.work`), recorded there once, and answered here.
   * Resolve, gates, input validation, breakers and the cache stay here. Tool events (progress,
   * logs) of a run on a worker do not reach the caller.
   */
  dispatch?: DispatchOptions;
  /**
   * Where each scope's tools are kept, instead of the scope directories (a database shared by
   * many front-ends and workers; see `ToolStore` of @forge/registry). Asked once per scope (and
   * per session and task id for those scopes); return undefined to keep a scope's directory.
   * Stores are opened with {@link META_TOOLS} as their built-in names.
   */
  toolStores?: (scope: Scope, ids: { session?: string; task?: string }) => ToolStore | undefined;
}

/** How a front-end dispatches calls (see {@link ForgeOptions.dispatch}). */
export interface DispatchOptions {
  queue: JobQueue;
  /**
   * How long a call may wait for a worker to take it (ms, default 30 000), on top of its own time
   * budget; past it the call is withdrawn and refused as `timeout`, naming the queue.
   */
  startWithinMs?: number;
  /**
   * After a call's cancel reached the worker running it, how long this front-end waits for that
   * worker to stop the run and record it (ms, default 15 000). Past it the caller is answered
   * `cancelled` saying the worker has not finished yet, recorded as `dispatch.unanswered`; the
   * worker still records the call when it stops. A host whose disk is slow to sync can give more.
   */
  cancelGraceMs?: number;
}

/** How a worker takes jobs (see {@link Forge.work}). */
export interface WorkOptions {
  queue: JobQueue;
  /** Stops taking jobs; the jobs held are finished first. */
  signal: AbortSignal;
  /** This worker's name in leases and logs: letters, digits, `_` and `-` (default `<host>-<pid>`). */
  worker?: string;
  /** Jobs run at once (default 1). */
  concurrency?: number;
  /** Hears each job as it ends (for a worker's log). */
  onJob?: (job: {
    id: string;
    name?: string;
    ok: boolean;
    kind?: string;
    attempt: number;
    ms: number;
    from: 'run' | 'note' | 'lost' | 'invalid';
  }) => void;
}

export interface ForgeToolOptions extends CallContext {
  /** Where the tool goes (default `project`). */
  scope?: Scope;
  /** Replace a tool of that name in that scope (its previous version stays recoverable). */
  overwrite?: boolean;
  /**
   * The toolsmith's activation of an approved proposal: forged although the persona is in
   * governed mode (policy `toolsmith.mode`), and the audit entry names the proposal and approver.
   * Every other check of the forge pipeline still applies.
   */
  activation?: { proposal: string; approvedBy: string };
}

/** What {@link Forge.trialCall} runs: a spec that is not (or not yet) in the registry. */
export interface TrialOptions extends CallContext {
  /** Why it runs, for the audit entry (`toolsmith.trial_run`), e.g. a proposal id. */
  purpose?: string;
}

/** A trial run's answer: the envelope a call would have given, and whether the impl ran. */
export interface TrialResult {
  envelope: Envelope;
  /** False when forge refused before running anything (invalid input, policy, no sandbox). */
  ran: boolean;
  /** The runtime as resolved (`python3 3.11.2`). */
  runtime: string;
}

export type ForgeResult = { ok: true; tool: StoredTool; previous?: { version: number; digest: string } } | Refusal;

/**
 * What `removeTool` returns: the removed tool, or the damaged record that was removed (a tool
 * file that cannot be read: see `DamagedTool` of @forge/registry), or why nothing was removed.
 */
export type RemoveToolResult =
  | { ok: true; tool: StoredTool; damaged?: undefined }
  | { ok: true; damaged: DamagedTool; tool?: undefined }
  | Refusal;

/** Something forge did, as written to the audit log. */
export interface ForgeEvent {
  type: string;
  data: Record<string, unknown>;
}

/** Where an {@link AgentTool} comes from. */
export type AgentToolOrigin =
  | { kind: 'forged'; scope: string; version: number; digest: string; runtime: string }
  | { kind: string; server: string; tool: string; digest: string; sandboxed: boolean };

/** What {@link AgentTool.execute} takes besides the input. */
export interface AgentToolCallOptions {
  /** Cancels the call: its sandbox is stopped and the answer is a `cancelled` refusal. */
  signal?: AbortSignal;
  /** The caller, over the one the tools were listed for (a session or task of the host's own, say). */
  caller?: Omit<CallContext, 'signal'>;
}

/** A tool as an agent framework sees it (see {@link Forge.agentTools}). */
export interface AgentTool {
  /** The forge name (`code.csv_stats`). */
  name: string;
  /** The name function-calling APIs accept (`^[a-zA-Z0-9_-]{1,64}$`: `code__csv_stats`), as MCP lists it. */
  wireName: string;
  title?: string;
  /** The tool's description, with the host paths its input names and where it comes from. */
  description: string;
  /** JSON Schema of an object, forge's `x-*` annotations stripped. */
  inputSchema: Record<string, unknown>;
  /** JSON Schema of an object (`data` of an ok answer), when the tool declares one. */
  outputSchema?: Record<string, unknown>;
  /** MCP tool hints: for a forged tool derived from what the sandbox enforces; a source's are its own. */
  annotations: Partial<ToolAnnotations>;
  origin: AgentToolOrigin;
  /**
   * Calls the tool through forge (`Forge.callTool`: every gate, the sandbox, the audit entry).
   * Never throws for a refusal: `{ ok: false, error: { kind, message } }`, whose message says what
   * to do.
   */
  execute(input: unknown, options?: AgentToolCallOptions): Promise<Envelope>;
}

/** The visible tools changed (a forge, promote or remove, here or in another process; a source's tools). */
export interface ToolsChanged {
  scopes: Scope[];
  names: string[];
}

export interface Forge {
  readonly paths: Readonly<ForgePaths>;
  /** Runs the forge pipeline; the tool is callable at once. */
  forgeTool(spec: unknown, options?: ForgeToolOptions): Promise<ForgeResult>;
  /** Runs the call pipeline; every outcome, refusals included, is an envelope. */
  callTool(name: string, input: unknown, ctx?: CallContext): Promise<Envelope>;
  /**
   * The forged tools `ctx` can call (each name once, as it resolves; its ACL applied), or every
   * tool of one scope.
   */
  listTools(options?: { scope?: Scope } & CallContext): Promise<readonly ListedTool[]>;
  /**
   * The damaged tool records `ctx` sees (see `DamagedTool` of @forge/registry): each that a name
   * resolves to (its ACL applied), or every damaged record of one scope. They are no tools: a call
   * is refused `tool_damaged`, and `removeTool` removes one.
   */
  listDamaged(options?: { scope?: Scope } & CallContext): Promise<readonly DamagedTool[]>;
  /**
   * The tools of `ForgeOptions.sources` that `ctx` can call (its ACL applied), by name; a name a
   * forged tool or a meta-tool already has is left out (the forged tool wins a call by that name).
   * With `offline`, each source answers from what it keeps (the gateway: the approved
   * definitions), starting and connecting nothing: what a command that only looks asks for.
   */
  listSourced(options?: CallContext & { offline?: boolean }): Promise<readonly SourcedTool[]>;
  /**
   * Every tool `ctx` can see (forged, then the sources'), each as a card: schemas, origin, state,
   * what a run may touch (runtime, `x-bind` places, network grant, secret names, limits) and how
   * policy judges a call of it now, gate by gate, judged by the call pipeline's own gates. Empty
   * when the policy cannot be read. `forge tools export` writes them as files.
   */
  describeTools(options?: CallContext): Promise<readonly ToolCard[]>;
  /**
   * The tools `ctx`'s caller may use (forged, then the sources'), in one framework-neutral shape
   * whose `execute` calls {@link Forge.callTool}: what `@forge/adapters` turns into an agent
   * framework's tools. The list changes when {@link Forge.on} `toolsChanged` fires, or when the
   * policy changes what the caller may see: ask again then.
   */
  agentTools(ctx?: CallContext): Promise<AgentTool[]>;
  /** Copies a project tool to the user scope. */
  promoteTool(name: string, options?: { force?: boolean } & CallContext): Promise<ForgeResult & { outcome?: string }>;
  /**
   * Removes a tool from a scope (default: the scope it resolves to), or the damaged record the name
   * resolves to (`damaged` in the answer), under the same gates and ownership rules. A damaged
   * record no longer says who forged it: outside every namespace only an operator persona may
   * remove it.
   */
  removeTool(name: string, options?: { scope?: Scope } & CallContext): Promise<RemoveToolResult>;
  /**
   * Runs `spec` (not stored) on `input` as a call would: the spec checked as forging checks it,
   * then the call pipeline's gates (policy, forbidden names, runtime), input validation, the
   * sandbox with what policy grants `ctx`'s persona, output validation, a run manifest and an
   * audit entry (`toolsmith.trial_run`). Never cached, never counted by breakers. The toolsmith
   * validates proposals this way.
   */
  trialCall(spec: unknown, input: unknown, options?: TrialOptions): Promise<TrialResult | Refusal>;
  /**
   * Stamps a state on the live version of a forged tool (see `Registry.setState`): the toolsmith
   * retires (`retired`) and reactivates (`active`) tools. Listeners hear `toolsChanged`.
   */
  setToolState(
    name: string,
    state: ToolState,
    options: {
      scope?: Scope;
      from?: readonly ToolState[];
      digest?: string;
      /** A `toolsmith.*` entry written once the state is stamped (the write is taken back when the log refuses it). */
      event?: { type: string; data: Record<string, unknown> };
    } & CallContext,
  ): Promise<ForgeResult>;
  /**
   * The runtime `name` resolves to now, as `<name> <version>` (`python3 3.11.2`): the toolsmith
   * validates again when it changed. Rejects when the runtime is not installed.
   */
  runtimeOf(name: string): Promise<string>;
  /** The caller as the engine sees it: `ctx` with the environment's defaults filled (persona, session, task). */
  caller(ctx?: CallContext): { persona: string; session: string; task?: string };
  /**
   * The session ended (an MCP session closed or expired): its session and task registries are
   * closed (their watches stopped) and its breakers forgotten. Its tools stay in their store; a
   * later call in the same session opens them again.
   */
  releaseSession(session: string): Promise<void>;
  /** The policy in force now (one snapshot), or why there is none. */
  policy(): { ok: true; snapshot: PolicySnapshot } | Refusal;
  /**
   * Appends an entry of a package built over the engine (the toolsmith's `toolsmith.*`) to the
   * audit log, redacted like every entry. Resolves once durable, to a refusal when the log did
   * not take it. Types outside `toolsmith.` are refused (the engine's own are its to write).
   */
  recordEvent(type: string, data: Record<string, unknown>): Promise<Refusal | undefined>;
  /** How many times each tool was called since start (for `forge_list`). */
  callCount(name: string): number;
  /**
   * Run `runId`'s manifest (as written) and what its artifacts directory holds, for a caller
   * allowed to see the run: the persona that made the call, or an operator (policy
   * `operator_personas`). Anyone else, and a run that does not exist, get the same `not_found`.
   * A cache hit's id reads as its hit record, with the seed run's artifacts. A malformed id is
   * `validation_failed`. Refusals are audited (`run.read_refused`).
   */
  readRun(runId: string, ctx?: CallContext): Promise<RunRecord | Refusal>;
  /**
   * The bytes of one file among run `runId`'s artifacts (the spill `full_stdout.bin` and
   * `stdout.bin` included), under the same access rule as {@link Forge.readRun}. `path` is
   * relative and normalized; links anywhere on the way are refused (`policy_denied`), never
   * followed; a file over `maxBytes` (default 16 MiB) is `resource_limit`.
   */
  readArtifact(runId: string, path: string, ctx?: CallContext & { maxBytes?: number }): Promise<ArtifactContent | Refusal>;
  /**
   * Verifies the whole audit log, then returns its last `last` entries (default 50, at most
   * 1000) with the verdict: every entry for an operator persona, else only the entries naming
   * the caller's persona among the last 10,000.
   */
  auditTail(options?: CallContext & { last?: number }): Promise<AuditTail | Refusal>;
  /**
   * What the sandbox grants `ctx`'s runs now, for `toolAnnotations`: network per policy and
   * allow-rules. When the policy cannot be read, the answer is the least safe one (network true).
   */
  sandboxFacts(ctx?: CallContext): SandboxFacts;
  on(event: 'audit', listener: (e: ForgeEvent) => void): () => void;
  on(event: 'toolsChanged', listener: (e: ToolsChanged) => void): () => void;
  /**
   * Runs as a worker until `signal` aborts: takes call jobs that front-ends published to
   * `queue`, runs each through this engine's own gates, input validation, sandbox and record
   * step (the tool pinned to the digest the front-end resolved), and finishes the job with the
   * answer. A job delivered again after its worker was lost is finished from what that worker
   * noted, so the log holds one `forge.called` per call. Resolves once the jobs held are done.
   */
  work(options: WorkOptions): Promise<void>;
  /** Waits for calls in flight (aborting them after `graceMs`, default 10 s), flushes and closes. */
  close(options?: { graceMs?: number }): Promise<void>;
}
