import type { AuditLog } from '@forge/audit-chain';
import type { Breakers, Policy, PolicySnapshot } from '@forge/policy';
import type { DamagedTool, Registry, ResolvedTool, Scope, StoredTool } from '@forge/registry';
import type { RuntimeTable } from '@forge/sandbox';
import type { CallContext, ForgeEvent, ForgeOptions, ToolsChanged } from './api.js';
import type { AuditFailure, AuditGate } from './auditGate.js';
import type { ResultCache } from './cache.js';
import type { CallerDefaults, Ctx } from './caller.js';
import type { CheckpointSchedule } from './checkpoints.js';
import type { ForgePaths } from './paths.js';
import type { SecretList } from './redact.js';
import type { Refusal, RefusalKind } from './refusal.js';
import type { RunSlots } from './runSlots.js';
import type { RunStore } from './runStore.js';
import type { ToolSource } from './sources.js';
import type { WireClaims } from './wireNames.js';

/**
 * The engine's ports: small named parts that `createEngine` (engine.ts) builds once. Each step of
 * the pipelines takes the ports it uses (`AuditPort & Clock`, `Pick<Engine, …>`), so its
 * signature says what it touches. The members are flat (an engine is every port at once), so a
 * step written against one port is handed the whole engine unchanged.
 */

/** The clock (ms since the epoch) of breakers, the cache, stamps and durations. */
export interface Clock {
  now: () => number;
}

/** What the engine was made with: its options, environment and paths, and its name as a worker. */
export interface Setup {
  options: ForgeOptions;
  env: NodeJS.ProcessEnv;
  paths: ForgePaths;
  /** This process in the job queue. */
  workerName: string;
}

/** The audit log, its gate (fail closed), its checkpoints and the writes in flight. */
export interface AuditPort {
  audit: AuditLog;
  /** Whether `close()` closes the log (forge opened it). */
  ownsAudit: boolean;
  /** The file of the key that signs checkpoints, when there is one. */
  signingKey: string | undefined;
  auditGate: AuditGate;
  checkpoints: CheckpointSchedule;
  /** Background writes in flight (close() waits for them). */
  pendingAudit: Set<Promise<unknown>>;
  /**
   * Appends one entry; resolves once it is durable (to undefined), or to why it could not be
   * written. Never throws into a pipeline. `secrets` are the values of the call the entry belongs
   * to: redacted before any string is shortened.
   */
  record(type: string, raw: Record<string, unknown>, secrets?: SecretList): Promise<AuditFailure | undefined>;
  /**
   * The engine has opened: from now on an entry is written at once, after the entries recorded
   * while it opened (held until then, so an engine that writes nothing else appends nothing).
   */
  opened(): void;
  /** Closing: the entries still held are not written (nothing followed them); their records resolve. */
  dropHeld(): void;
  /** `message` for a refusal the log could not take: it still refuses, as `audit_unavailable`. */
  unaudited(f: AuditFailure, kind: RefusalKind, message: string): string;
  /** Keeps `p` until it settles, so close() can wait for it. */
  track<T>(p: Promise<T>): Promise<T | undefined>;
}

/** What changes while the engine runs. */
export interface EngineState {
  auditClosed: boolean;
  /** Settles once the hit records queued so far are written (batches are written in order). */
  hitsWritten: Promise<unknown>;
  /**
   * Sandboxes built ahead keep their per-run files' placeholders in a directory of their own
   * under the system's temporary directory (made at the first call that may use one): a tool's
   * mount table then shows nothing of the project's or the home's paths.
   */
  stageDir: string | undefined;
  /** Operations in flight, from their first step (close() waits for them). */
  active: number;
  closing: boolean;
  codeDirMade: boolean;
}

/** Whether an operation may start, and the state that decides it. */
export interface Lifecycle {
  state: EngineState;
  /**
   * Whether an operation may start: forge is not closing, the caller did not cancel (`undone` says
   * what did not happen), the log takes appends (a real append of the recovery entry when it was
   * down), the caller's ids are usable. The first refusal, or undefined; an `audit_unavailable`
   * one cannot itself be audited.
   */
  admit(ctx: Ctx, undone: string): Promise<Refusal | undefined>;
}

/** Who calls: the environment's defaults, filled into each {@link CallContext}. */
export interface Callers {
  defaults: CallerDefaults;
  context(c?: CallContext): Ctx;
  contextProblem(ctx: Ctx): string | undefined;
}

/** Who hears what forge does: audit entries as written, and changes of the visible tools. */
export interface Listeners {
  auditListeners: Set<(e: ForgeEvent) => void>;
  changeListeners: Set<(e: ToolsChanged) => void>;
  notifyChanged(scopes: Scope[], names: string[]): void;
}

/** The registries of every scope, and what a name resolves to in them. */
export interface ToolLookup {
  /** The user and project scopes. */
  base: Registry;
  /** Session and task scope registries, by scope and ids, most recently used last. */
  scoped: Map<string, Promise<Registry>>;
  /** The registries `ctx` sees, most specific first. */
  layers(ctx: Ctx): Promise<Registry[]>;
  /** Reads the tool stores `ctx` sees again (at most one reload at a time). */
  reloadTools(ctx: Ctx): Promise<void>;
  /** The tool `name` resolves to in `regs`, with every scope it hides (a damaged record first: none). */
  resolveIn(regs: Registry[], name: string): ResolvedTool | undefined;
  /** The damaged record `name` resolves to in `regs`, when one comes before every usable tool. */
  damagedIn(regs: Registry[], name: string): DamagedTool | undefined;
  /** The registry of `scope` for `ctx`. */
  registryFor(scope: Scope, ctx: Ctx): Promise<Registry>;
  /** Closes the registries of `session` and of its tasks, and forgets its breakers. */
  releaseSession(session: string): Promise<void>;
  /** Tool objects whose digest was checked (a registry reload brings new objects, checked again). */
  verified: WeakSet<StoredTool>;
  /** Forges and promotes in flight, by wire name (see wireNames.ts). */
  wireClaims: WireClaims;
  /** Tools served by something other than the registry (the gateway's). */
  sources: readonly ToolSource[];
}

/** The hot-reloaded policy, and one look at it per turn of the event loop. */
export interface PolicyPort {
  policy: Policy;
  policyNow(): { ok: true; snap: PolicySnapshot } | Refusal;
}

/** The breakers of each session. */
export interface BreakersPort {
  breakersOf(session: string): Breakers;
}

/** The deterministic-result cache (none when turned off). */
export interface CachePort {
  cache: ResultCache | undefined;
}

/** Run manifests, hit records and artifacts, and how many times each tool was called. */
export interface RunsPort {
  runs: RunStore;
  calls: Map<string, number>;
}

/** What the executors share: the runtimes, the bound on sandboxes at once, and the runs going. */
export interface ExecutorsPort {
  /**
   * The runtime table: looked up on first use (it means running interpreters, which a command
   * that only lists tools does not need), or at once in a server (see createExecutorsPort).
   */
  runtimes(): Promise<RuntimeTable>;
  /** The lookup, once something asked for it: what close() waits for. */
  runtimesAsked(): Promise<RuntimeTable> | undefined;
  /**
   * The runtime names on PATH (`python3`, `python3.N`, `node`, …), found on first use: a forge
   * or a trial awaits it before its spec is validated (the registry asks `runtimeNames()` then).
   */
  lookUpRuntimeNames(): Promise<readonly string[]>;
  /** The names {@link lookUpRuntimeNames} found; throws when asked before they were looked up. */
  runtimeNames(): readonly string[];
  /** Sandboxes running now (aborted by close() after its grace period). */
  running: Set<AbortController>;
  /** The bound on sandboxes running at once (runSlots.ts). */
  runSlots: RunSlots;
}
