import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { Breakers, createPolicy, type Policy, type PolicySnapshot, parseToolAcl, type ToolAcl } from '@forge/policy';
import {
  createRegistry,
  type DamagedTool,
  type Registry,
  type ResolvedTool,
  type Scope,
  type StoredTool,
  scopeIdProblem,
  scopeRoots,
  type ToolStore,
} from '@forge/registry';
import { runtimeNames as findRuntimeNames, type RuntimeTable, resolveRuntimes } from '@forge/sandbox';
import { type CallContext, type ForgeEvent, type ForgeOptions, META_TOOLS, type Refusal, type ToolsChanged } from './api.js';
import { auditSafe } from './auditData.js';
import { AUDIT_UNAVAILABLE, type AuditFailure, AuditGate } from './auditGate.js';
import { type EngineAudit, openEngineAudit } from './auditOpen.js';
import { fileCacheStore, ResultCache } from './cache.js';
import { CheckpointSchedule, readAuditKey } from './checkpoints.js';
import type { ToolEvent } from './events.js';
import { defaultForgeHome, type ForgePaths, findProject, forgePaths } from './paths.js';
import type { SecretList } from './redact.js';
import { stopReason } from './refusal.js';
import { defaultRunSlots, RunSlots } from './runSlots.js';
import { fileRunStore } from './runStore.js';
import { WireClaims } from './wireNames.js';

/**
 * The engine's shared state: paths, the audit log and its gate, the policy, the registries of
 * every scope, breakers, the cache and what is in flight. The pipelines (forgeTool.ts,
 * call/*.ts, manage.ts) are built over one engine; createForge (forge.ts) composes them.
 */

/** A caller, with the defaults of the environment filled in. */
export interface Ctx {
  persona: string;
  session: string;
  task: string | undefined;
  acl: ToolAcl;
  signal: AbortSignal | undefined;
  onEvent: ((event: ToolEvent) => void) | undefined;
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

/** Why the engine cannot take an operation now: closing, the log takes no appends, or the caller's ids are unusable. */
export interface NotAdmitted {
  kind: string;
  message: string;
  /** False when the refusal itself cannot be audited (the log is down). */
  audited: boolean;
}

export type Engine = Awaited<ReturnType<typeof createEngine>>;

/**
 * Session and task registries kept open at once. Each holds memory and, when watched, a watch (a
 * directory watch, or a share of the database's one listening connection): the bound keeps a
 * process that serves sessions it never hears end (a worker) from growing without end.
 */
const MAX_SCOPE_REGISTRIES = 256;

export async function createEngine(options: ForgeOptions) {
  const state: EngineState = {
    auditClosed: false,
    hitsWritten: Promise.resolve(),
    stageDir: undefined,
    active: 0,
    closing: false,
    codeDirMade: false,
  };
  const env = options.env ?? process.env;
  const now = options.now ?? Date.now;
  const paths = forgePaths(options.home ?? defaultForgeHome(env), options.project ?? findProject(), env);
  if (options.vaultPath) paths.vault = options.vaultPath;
  // Only what every use needs: the project's .forge/, runs/ and the code copies are made by the
  // first write that needs them, so listing or checking from any directory leaves nothing there.
  for (const d of [paths.home, paths.auditDir]) mkdirSync(d, { recursive: true, mode: 0o700 });

  const defaults = {
    persona: env.FORGE_PERSONA || 'default',
    session: env.FORGE_SESSION_ID || `s-${randomBytes(4).toString('hex')}`,
    task: env.FORGE_TASK_ID || undefined,
    acl: parseToolAcl(env.FORGE_ALLOWED_TOOLS),
  };

  const signingKey = options.audit
    ? undefined
    : readAuditKey(options.auditKey ?? env.FORGE_AUDIT_KEY, options.auditKey ? 'ForgeOptions.auditKey' : 'FORGE_AUDIT_KEY');
  // With a key, a log no signed checkpoint covers is refused (log_unanchored), and the newest
  // signed checkpoint is copied outside the log's directory (paths.auditAnchor).
  // A broken chain does not stop the engine: it starts refusing every call (auditOpen.ts).
  const opened: EngineAudit = options.audit
    ? { log: options.audit }
    : await openEngineAudit(paths.auditLog, signingKey ? { signingKey, anchorFile: paths.auditAnchor } : {});
  const audit = opened.log;
  const ownsAudit = !options.audit;
  // A signed log starts anchored: a checkpoint of its empty state, so a crash before the first
  // scheduled checkpoint never leaves entries that nothing signed covers.
  if (signingKey && opened.damage === undefined && (await audit.head()).seq === 0) await audit.checkpoint();
  const auditListeners = new Set<(e: ForgeEvent) => void>();
  const changeListeners = new Set<(e: ToolsChanged) => void>();
  const pendingAudit = new Set<Promise<unknown>>();
  // Fail closed: once an append fails, nothing is answered or changed until the log takes the
  // recovery entry (auditGate.ts).
  const auditGate = new AuditGate(audit, now, (f) => process.emitWarning(`forge: ${f.message}`));
  if (opened.damage !== undefined) auditGate.closeWith(opened.damage);
  /**
   * Appends one entry; resolves once it is durable (to undefined), or to why it could not be
   * written. Never throws into a pipeline. `secrets` are the values of the call the entry belongs
   * to: redacted before any string is shortened.
   */
  const record = (type: string, raw: Record<string, unknown>, secrets: SecretList = []): Promise<AuditFailure | undefined> => {
    const data = auditSafe(raw, secrets) as Record<string, unknown>;
    for (const l of auditListeners) l({ type, data });
    if (state.auditClosed) return Promise.resolve(undefined);
    const p = auditGate.append(type, data);
    checkpoints.appended();
    return track(p);
  };
  /** `message` for a refusal the log could not take: it still refuses, as `audit_unavailable`. */
  const unaudited = (f: AuditFailure, kind: string, message: string) => `${f.message} (refused first: ${kind}: ${message})`;
  // Checkpoints make truncating or rolling back the log detectable, not only edits.
  const checkpoints = new CheckpointSchedule(audit, {
    onError: (err) => process.emitWarning(`forge: audit checkpoint failed: ${err.message}`),
    track: (p) => void track(p),
  });
  /** Keeps `p` until it settles, so close() can wait for it. */
  function track<T>(p: Promise<T>): Promise<T | undefined> {
    const q = p.catch((err) => {
      process.emitWarning(`forge: background write failed: ${(err as Error).message}`);
      return undefined;
    });
    pendingAudit.add(q);
    void q.finally(() => pendingAudit.delete(q));
    return q;
  }

  const policy: Policy =
    options.policy === false
      ? createPolicy({ onEvent: (e) => void record(e.type, { ...e }) })
      : createPolicy({
          userFile: options.policy?.userFile ?? paths.userPolicy,
          workspaceFile: options.policy?.workspaceFile ?? paths.workspacePolicy,
          rulesFile: options.policy?.rulesFile ?? paths.rules,
          onEvent: (e) => void record(e.type, { ...e }),
        });

  // The names are known at once (PATH); each interpreter's version and mounts are found in the
  // background (it means running them), and the first call waits for that.
  const runtimesReady: Promise<RuntimeTable> = options.runtimes
    ? Promise.resolve(options.runtimes)
    : resolveRuntimes({ cacheFile: join(paths.cacheDir, 'runtimes.json') });
  runtimesReady.catch(() => {}); // reported by the call that needs it
  const runtimeNames = options.runtimes ? options.runtimes.list.map((r) => r.name) : findRuntimeNames();
  const registryEvent = (e: { type: string }) => void record(e.type, { ...e });
  /** The stores `ForgeOptions.toolStores` gives for `scopes` (none: their directories). */
  const storesFor = (scopes: Scope[], ids: { session?: string; task?: string } = {}) => {
    const out: Partial<Record<Scope, ToolStore>> = {};
    for (const s of scopes) {
      const store = options.toolStores?.(s, ids);
      if (store) out[s] = store;
    }
    return out;
  };
  const base = createRegistry({
    roots: scopeRoots({ forgeHome: paths.home, project: paths.project }),
    stores: storesFor(['user', 'project']),
    builtins: META_TOOLS,
    runtimes: runtimeNames,
    onEvent: registryEvent,
    now: () => new Date(now()),
  });
  await base.load();
  const watchErrors = (err: unknown) => process.emitWarning(`forge: registry watcher: ${(err as Error).message}`);
  /** Another process changed tools in a watched scope. */
  const onScopeChange = (changes: { scope: Scope; names: string[] }[]) => {
    const names = [...new Set(changes.flatMap((c) => c.names))];
    if (names.length > 0) notifyChanged([...new Set(changes.map((c) => c.scope))], names);
  };
  if (options.watch) await base.watch(onScopeChange, { onError: watchErrors });
  /**
   * Session and task scope registries, by scope and ids; each created and loaded on first use,
   * most recently used last. A session's are closed when it ends ({@link releaseSession}); past
   * {@link MAX_SCOPE_REGISTRIES} the least recently used is closed too (a worker serves calls of
   * sessions it never hears end), and made again if it is needed again.
   */
  const scoped = new Map<string, Promise<Registry>>();
  const closeScoped = (r: Promise<Registry>) => void r.then((reg) => reg.close()).catch((err: unknown) => watchErrors(err));
  const scopeRegistry = (scope: 'session' | 'task', session: string, task?: string): Promise<Registry> => {
    const ids = `${scope}\0${session}\0${scope === 'task' ? (task ?? '') : ''}`;
    let r = scoped.get(ids);
    if (r) {
      scoped.delete(ids);
      scoped.set(ids, r);
      return r;
    }
    const roots = scopeRoots({ forgeHome: paths.home, project: paths.project, session, ...(task ? { task } : {}) });
    const dir = roots[scope] as string;
    r = (async () => {
      const stores = storesFor([scope], { session, ...(task ? { task } : {}) });
      const reg = createRegistry({
        roots: { [scope]: dir },
        stores,
        builtins: META_TOOLS,
        runtimes: runtimeNames,
        onEvent: registryEvent,
        now: () => new Date(now()),
      });
      await reg.load();
      // Watching would create the directory: a session that forged nothing leaves none behind.
      if (options.watch && (stores[scope] || existsSync(dir))) await reg.watch(onScopeChange, { onError: watchErrors });
      return reg;
    })();
    scoped.set(ids, r);
    // A registry that failed to load is not kept: the next use tries again.
    r.catch(() => {
      if (scoped.get(ids) === r) scoped.delete(ids);
    });
    for (const [k, old] of scoped) {
      if (scoped.size <= MAX_SCOPE_REGISTRIES) break;
      scoped.delete(k);
      closeScoped(old);
    }
    return r;
  };
  /** Closes the registries of `session` and of its tasks, and forgets its breakers: the session ended. */
  const releaseSession = async (session: string): Promise<void> => {
    const gone: Promise<Registry>[] = [];
    for (const [k, r] of scoped) {
      if (k.startsWith(`session\0${session}\0`) || k.startsWith(`task\0${session}\0`)) {
        scoped.delete(k);
        gone.push(r);
      }
    }
    breakersBySession.delete(session);
    for (const r of gone) await r.then((reg) => reg.close()).catch((err: unknown) => watchErrors(err));
  };

  const context = (c: CallContext = {}): Ctx => ({
    persona: c.persona || defaults.persona,
    session: c.session || defaults.session,
    task: c.task || defaults.task,
    acl: c.allowedTools !== undefined ? parseToolAcl(c.allowedTools) : defaults.acl,
    signal: c.signal,
    onEvent: c.onEvent,
  });
  /** Why `ctx` cannot be served (ids that could leave their directory, a persona that is no name), or undefined. */
  const contextProblem = (ctx: Ctx): string | undefined => {
    const sp = scopeIdProblem(ctx.session);
    if (sp) return `session id ${JSON.stringify(ctx.session)} ${sp}`;
    const tp = ctx.task === undefined ? undefined : scopeIdProblem(ctx.task);
    if (tp) return `task id ${JSON.stringify(ctx.task)} ${tp}`;
    if (!/^[A-Za-z][A-Za-z0-9_-]{0,63}$/.test(ctx.persona))
      return `persona ${JSON.stringify(ctx.persona)} must be a letter, then letters, digits, _ or - (at most 64)`;
    return undefined;
  };

  /** The registries `ctx` sees, most specific first. */
  const layers = async (ctx: Ctx): Promise<Registry[]> => {
    const out: Registry[] = [];
    if (ctx.task) out.push(await scopeRegistry('task', ctx.session, ctx.task));
    out.push(await scopeRegistry('session', ctx.session));
    out.push(base);
    return out;
  };
  /**
   * Reads the tool stores `ctx` sees again (a worker asked for a tool its watcher has not
   * reported yet). At most one reload at a time; a caller during one waits for it.
   */
  let reloading: Promise<void> | undefined;
  const reloadTools = (ctx: Ctx): Promise<void> => {
    reloading ??= (async () => {
      try {
        for (const r of await layers(ctx)) await r.load();
      } finally {
        reloading = undefined;
      }
    })();
    return reloading;
  };
  /**
   * The tool `name` (a forge name) resolves to in `regs`, most specific first, with every scope it
   * hides; undefined when none does, or when a damaged record comes first (see `damagedIn`).
   */
  const resolveIn = (regs: Registry[], name: string): ResolvedTool | undefined => {
    let found: ResolvedTool | undefined;
    const shadows: Scope[] = [];
    for (const r of regs) {
      const hit = r.resolve(name);
      // A damaged record hides what is below it (fail closed), in its own registry and in the next.
      if (!found && !hit && r.damaged(name)) return undefined;
      if (!hit) continue;
      if (!found) found = { ...hit, shadows: [] };
      else shadows.push(hit.scope);
      shadows.push(...hit.shadows.filter((s) => s !== found?.scope));
    }
    return found ? { ...found, shadows } : undefined;
  };
  /**
   * The damaged record `name` (a forge name) resolves to in `regs`: the first layer that holds the
   * name holds a damaged record of it, in a scope no usable tool of that name comes before.
   */
  const damagedIn = (regs: Registry[], name: string): DamagedTool | undefined => {
    for (const r of regs) {
      if (r.resolve(name)) return undefined;
      const d = r.damaged(name);
      if (d) return d;
    }
    return undefined;
  };
  const registryFor = async (scope: Scope, ctx: Ctx): Promise<Registry> => {
    if (scope === 'session') return scopeRegistry('session', ctx.session);
    if (scope === 'task') {
      if (!ctx.task) throw new Error('no task');
      return scopeRegistry('task', ctx.session, ctx.task);
    }
    return base;
  };

  /** What every `forge.called` entry says of the tool, the caller and the input. */
  const calledFacts = (stored: StoredTool, ctx: Ctx, inputDigest: string) => ({
    name: stored.name,
    version: stored.version,
    digest: stored.digest,
    scope: stored.scope,
    persona: ctx.persona,
    session: ctx.session,
    ...(ctx.task ? { task: ctx.task } : {}),
    input_digest: inputDigest,
  });
  /** Tool objects whose digest was checked (a registry reload brings new objects, checked again). */
  const verified = new WeakSet<StoredTool>();
  const breakersBySession = new Map<string, Breakers>();
  const breakersOf = (session: string): Breakers => {
    let b = breakersBySession.get(session);
    if (!b) {
      b = new Breakers({ now, onEvent: (e) => void record(e.type, { ...e, session }) });
      breakersBySession.set(session, b);
    }
    return b;
  };

  const cache =
    options.cache === false ? undefined : new ResultCache(options.cacheStore ?? fileCacheStore(paths.cacheDir, options.cache ?? {}, now));
  /** Run manifests, hit records and artifacts (cached.ts, record.ts, runs.ts). */
  const runs = options.runStore ?? fileRunStore(paths.runsDir);
  // Sandboxes built ahead keep their per-run files' placeholders in a directory of their own under
  // the system's temporary directory (made at the first call that may use one): a tool's mount
  // table then shows nothing of the project's or the home's paths.
  const calls = new Map<string, number>();
  /** Sandboxes running now (aborted by close() after its grace period). */
  const running = new Set<AbortController>();
  const maxRuns = options.maxConcurrentRuns ?? defaultRunSlots();
  if (!Number.isInteger(maxRuns) || maxRuns < 1)
    throw new Error(`maxConcurrentRuns must be a positive integer (got ${JSON.stringify(options.maxConcurrentRuns)})`);
  /** The bound on sandboxes running at once (runSlots.ts). */
  const runSlots = new RunSlots(maxRuns);

  // Calls started in the same turn of the event loop (a burst of cache hits released by one audit
  // batch) share one look at the policy files; an edit is seen by every call started after it.
  let policyThisTurn: ReturnType<Policy['current']> | undefined;
  const forgetPolicyTurn = () => {
    policyThisTurn = undefined;
  };
  const policyNow = (): { ok: true; snap: PolicySnapshot } | Refusal => {
    let s = policyThisTurn;
    if (!s) {
      s = policyThisTurn = policy.current();
      setImmediate(forgetPolicyTurn).unref();
    }
    return s.ok ? { ok: true, snap: s.snapshot } : { ok: false, kind: s.kind, message: s.message };
  };
  const notifyChanged = (scopes: Scope[], names: string[]) => {
    for (const l of changeListeners) l({ scopes, names });
  };

  /** Forges and promotes in flight, by wire name (see wireNames.ts). */
  const wireClaims = new WireClaims();

  /**
   * Whether an operation may start: forge is not closing, the caller did not cancel (`undone` says
   * what did not happen), the log takes appends (a real append of the recovery entry when it was
   * down), the caller's ids are usable. The first refusal, or undefined.
   */
  const admit = async (ctx: Ctx, undone: string): Promise<NotAdmitted | undefined> => {
    if (state.closing) return { kind: 'internal', message: 'forge is shutting down; try again after it restarts', audited: true };
    if (ctx.signal?.aborted) return { kind: 'cancelled', message: `${stopReason(ctx.signal)}; ${undone}`, audited: true };
    const down = await auditGate.ready();
    if (down) return { kind: AUDIT_UNAVAILABLE, message: down.message, audited: false };
    const bad = contextProblem(ctx);
    if (bad) return { kind: 'validation_failed', message: bad, audited: true };
    return undefined;
  };

  return {
    options,
    env,
    now,
    paths: paths as ForgePaths,
    defaults,
    signingKey,
    audit,
    ownsAudit,
    auditListeners,
    changeListeners,
    pendingAudit,
    auditGate,
    record,
    unaudited,
    checkpoints,
    track,
    policy,
    policyNow,
    runtimesReady,
    runtimeNames,
    base,
    scoped,
    releaseSession,
    context,
    contextProblem,
    admit,
    layers,
    reloadTools,
    resolveIn,
    damagedIn,
    registryFor,
    calledFacts,
    verified,
    breakersOf,
    cache,
    runs,
    calls,
    running,
    runSlots,
    notifyChanged,
    wireClaims,
    sources: options.sources ?? [],
    /** This process in the job queue. */
    workerName: defaultWorkerName(),
    state,
  };
}

/** This process's name in a job queue and in presence: `<host>-<pid>` (letters, digits, `_`, `-`). */
export function defaultWorkerName(): string {
  return `${hostname()
    .replace(/[^A-Za-z0-9_-]/g, '-')
    .slice(0, 80)}-${process.pid}`;
}
