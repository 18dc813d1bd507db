import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { Breakers, createPolicy, type Policy, type PolicyState, parseToolAcl } from '@forge/policy';
import type { RuntimeTable } from '@forge/sandbox';
import { isAnnouncement, lastAnnounced } from './announced.js';
import type { ForgeEvent, ForgeOptions, ToolsChanged } from './api.js';
import { auditSafe } from './auditData.js';
import { AUDIT_UNAVAILABLE, type AuditFailure, AuditGate } from './auditGate.js';
import { type EngineAudit, openEngineAudit } from './auditOpen.js';
import { fileCacheStore, ResultCache } from './cache.js';
import { type CallerDefaults, contextOf, contextProblem } from './caller.js';
import { CheckpointSchedule, readAuditKey } from './checkpoints.js';
import { defaultForgeHome, type ForgePaths, findProject, forgePaths } from './paths.js';
import type {
  AuditPort,
  BreakersPort,
  CachePort,
  Callers,
  Clock,
  EngineState,
  ExecutorsPort,
  Lifecycle,
  Listeners,
  PolicyPort,
  RunsPort,
  Setup,
  ToolLookup,
} from './ports.js';
import { AUDIT_KEY_NAME, activeReceipts } from './receipts.js';
import { stopReason } from './refusal.js';
import { defaultRunSlots, RunSlots } from './runSlots.js';
import { fileRunStore } from './runStore.js';
import { sandboxModule } from './sandboxModule.js';
import { activeCallTrace } from './telemetry.js';
import { createToolLookup } from './toolLookup.js';
import { witnessRound } from './witnessing.js';

export type { Ctx } from './caller.js';
export type { EngineState } from './ports.js';

/**
 * The engine: every port (ports.ts) built once over one set of options. The pipelines
 * (forgeTool.ts, call/*.ts, manage.ts) take the ports they use; createForge (forge.ts) composes
 * them over one engine.
 */
export interface Engine
  extends Setup,
    Clock,
    AuditPort,
    Lifecycle,
    Callers,
    Listeners,
    ToolLookup,
    PolicyPort,
    BreakersPort,
    CachePort,
    RunsPort,
    ExecutorsPort {}

/**
 * Builds the engine from `options`: the home and its paths, the audit log (fail closed), the
 * policy, the registries of every scope, breakers, the cache, the run store and what the
 * executors share. Throws only when the home or the audit log cannot be opened.
 */
export async function createEngine(options: ForgeOptions): Promise<Engine> {
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
  const setup: Setup = { options, env, paths: paths as ForgePaths, workerName: defaultWorkerName() };

  const listeners = createListeners();
  const audit = await openAuditPort(options, paths, env, now, state, listeners);
  const callers = createCallers(env);
  const policy = createPolicyPort(options, paths, audit);
  const breakers = createBreakersPort(now, audit);
  const executors = createExecutorsPort(options, paths);
  const lookup = await createToolLookup({
    options,
    paths,
    now,
    runtimeNames: () => executors.runtimeNames(),
    onEvent: (e) => void audit.record(e.type, { ...e }),
    onChange: listeners.notifyChanged,
    onRelease: breakers.forget,
  });
  const cache: CachePort = {
    cache:
      options.cache === false ? undefined : new ResultCache(options.cacheStore ?? fileCacheStore(paths.cacheDir, options.cache ?? {}, now)),
  };
  /** Run manifests, hit records and artifacts (cached.ts, record.ts, runs.ts). */
  const runs: RunsPort = { runs: options.runStore ?? fileRunStore(paths.runsDir), calls: new Map() };
  const lifecycle: Lifecycle = { state, admit: admitter(state, audit.auditGate) };
  return {
    ...setup,
    now,
    ...audit,
    ...lifecycle,
    ...callers,
    ...listeners,
    ...lookup,
    ...policy,
    breakersOf: breakers.breakersOf,
    ...cache,
    ...runs,
    ...executors,
  };
}

/** The listeners of audit entries and of changes of the visible tools. */
function createListeners(): Listeners {
  const auditListeners = new Set<(e: ForgeEvent) => void>();
  const changeListeners = new Set<(e: ToolsChanged) => void>();
  return {
    auditListeners,
    changeListeners,
    notifyChanged(scopes, names) {
      for (const l of changeListeners) l({ scopes, names });
    },
  };
}

/**
 * Opens the audit log (unless `options.audit` is one), its gate and its checkpoint schedule. With
 * a key, a log no signed checkpoint covers is refused (log_unanchored), and the newest signed
 * checkpoint is copied outside the log's directory (paths.auditAnchor). A broken chain does not
 * stop the engine: it starts refusing every call (auditOpen.ts).
 */
async function openAuditPort(
  options: ForgeOptions,
  paths: ForgePaths,
  env: NodeJS.ProcessEnv,
  now: () => number,
  state: EngineState,
  listeners: Pick<Listeners, 'auditListeners'>,
): Promise<AuditPort> {
  const signingKey = options.audit
    ? undefined
    : readAuditKey(options.auditKey ?? env.FORGE_AUDIT_KEY, options.auditKey ? 'ForgeOptions.auditKey' : 'FORGE_AUDIT_KEY');
  const opened: EngineAudit = options.audit
    ? { log: options.audit }
    : await openEngineAudit(paths.auditLog, {
        ...(signingKey ? { signingKey, anchorFile: paths.auditAnchor } : {}),
        // The log's tree checkpoints are signed under the name `forge audit prove` and
        // `forge-audit verify-proof` know (origin: this host and the log's path).
        tree: { keyName: AUDIT_KEY_NAME },
      });
  const audit = opened.log;
  // A signed log starts anchored: a checkpoint of its empty state, so a crash before the first
  // scheduled checkpoint never leaves entries that nothing signed covers.
  if (signingKey && opened.damage === undefined && (await audit.head()).seq === 0) await audit.checkpoint();
  const pendingAudit = new Set<Promise<unknown>>();
  // Fail closed: once an append fails, nothing is answered or changed until the log takes the
  // recovery entry (auditGate.ts).
  const auditGate = new AuditGate(audit, now, (f) => process.emitWarning(`forge: ${f.message}`));
  if (opened.damage !== undefined) auditGate.closeWith(opened.damage);
  function track<T>(p: Promise<T>): Promise<T | undefined> {
    const q = p.catch((err) => {
      process.emitWarning(`forge: background write failed: ${(err as Error).message}`);
      return undefined;
    });
    pendingAudit.add(q);
    void q.finally(() => pendingAudit.delete(q));
    return q;
  }
  // Checkpoints make truncating or rolling back the log detectable, not only edits.
  const checkpoints = new CheckpointSchedule(audit, {
    onError: (err) => process.emitWarning(`forge: audit checkpoint failed: ${err.message}`),
    track: (p) => void track(p),
    ...(signingKey && !options.audit ? witnessRound(paths, signingKey) : {}),
  });
  const write = (type: string, data: Record<string, unknown>) => {
    // An entry written under a call's span is named on it (telemetry.ts): a trace joins the log.
    // So is its receipt (receipts.ts): the answer names the call's own entry.
    const traced = activeCallTrace();
    const receipts = activeReceipts();
    const p = auditGate.append(
      type,
      data,
      traced || receipts
        ? (seq, leaf) => {
            traced?.entry(type, seq);
            receipts?.entry(type, seq, leaf);
          }
        : undefined,
    );
    checkpoints.appended();
    return track(p);
  };
  // What the engine learns while it opens (the policy it loaded, tool files it could not) is
  // written just before the first entry the engine writes after that, so a command that only
  // reads (tools list, status) appends nothing and waits on no disk flush, and every entry of an
  // action still follows the policy it was decided under.
  let opening = true;
  let held: { type: string; data: Record<string, unknown>; settle: (f: AuditFailure | undefined) => void }[] = [];
  let flushing: Promise<void> | undefined;
  const writeHeld = (): Promise<void> | undefined => {
    // While the log takes no appends they stay held (not counted as lost again and again): they
    // go out before the first entry written once it takes appends again.
    if (held.length === 0 || auditGate.unavailable) return undefined;
    flushing ??= (async () => {
      // What the log announced last is read when an announcement is about to be written (not once
      // per process: a gateway configuration is first loaded long after the policy, and another
      // process may have announced something else in between).
      // (Always awaited, so `flushing` is set before it is cleared here.)
      const digests = await (held.some((h) => isAnnouncement(h.type, h.data))
        ? lastAnnounced(audit).catch(() => new Map<string, string>())
        : undefined);
      flushing = undefined;
      if (auditGate.unavailable) return;
      const hs = held;
      held = [];
      for (const h of hs) {
        if (isAnnouncement(h.type, h.data) && digests?.get(h.type) === h.data.digest) {
          h.settle(undefined);
          continue;
        }
        void write(h.type, h.data).then((f) => {
          // Not written (the append failed, and the gate closed): held again, so that the policy an
          // action was decided under still comes before that action's entry in the log.
          if (f) held.push(h);
          else h.settle(undefined);
        });
      }
    })();
    return flushing;
  };
  return {
    audit,
    ownsAudit: !options.audit,
    signingKey,
    auditGate,
    checkpoints,
    pendingAudit,
    record(type, raw, secrets = []) {
      const data = auditSafe(raw, secrets) as Record<string, unknown>;
      for (const l of listeners.auditListeners) l({ type, data });
      if (state.auditClosed) return Promise.resolve(undefined);
      // An announcement (the first policy or gateway configuration a process loaded) waits for the
      // process's first entry of its own, as everything recorded while opening does.
      if (opening || isAnnouncement(type, data)) return new Promise((settle) => held.push({ type, data, settle }));
      // After what was held (in the order recorded), when something is.
      // Tracked from now, not from when it is appended: close() waits for it, so the log is never
      // closed while what was held is still being read and written.
      const before = writeHeld();
      return before ? track(before.then(() => write(type, data))) : write(type, data);
    },
    opened() {
      opening = false;
    },
    dropHeld() {
      opening = false;
      // Being written (an entry of this process asked for them): they go out before it.
      if (flushing) return;
      const hs = held;
      held = [];
      for (const h of hs) h.settle(undefined);
    },
    unaudited: (f, kind, message) => `${f.message} (refused first: ${kind}: ${message})`,
    track,
  };
}

/** The environment's caller (FORGE_PERSONA, FORGE_SESSION_ID, FORGE_TASK_ID, FORGE_ALLOWED_TOOLS). */
function createCallers(env: NodeJS.ProcessEnv): Callers {
  const defaults: CallerDefaults = {
    persona: env.FORGE_PERSONA || 'default',
    session: env.FORGE_SESSION_ID || `s-${randomBytes(4).toString('hex')}`,
    task: env.FORGE_TASK_ID || undefined,
    acl: parseToolAcl(env.FORGE_ALLOWED_TOOLS),
  };
  return { defaults, context: (c) => contextOf(defaults, c), contextProblem };
}

/** The policy files, hot-reloaded, each event audited. */
function createPolicyPort(options: ForgeOptions, paths: ForgePaths, audit: Pick<AuditPort, 'record'>): PolicyPort {
  const onEvent = (e: { type: string }) => void audit.record(e.type, { ...e });
  const policy: Policy =
    options.policy === false
      ? createPolicy({ onEvent })
      : createPolicy({
          userFile: options.policy?.userFile ?? paths.userPolicy,
          workspaceFile: options.policy?.workspaceFile ?? paths.workspacePolicy,
          rulesFile: options.policy?.rulesFile ?? paths.rules,
          onEvent,
        });
  // Calls started in the same turn of the event loop (a burst of cache hits released by one audit
  // batch) share one look at the policy files; an edit is seen by every call started after it.
  let thisTurn: PolicyState | undefined;
  const forgetTurn = () => {
    thisTurn = undefined;
  };
  return {
    policy,
    policyNow() {
      let s = thisTurn;
      if (!s) {
        s = thisTurn = policy.current();
        setImmediate(forgetTurn).unref();
      }
      return s.ok ? { ok: true, snap: s.snapshot } : { ok: false, kind: s.kind, message: s.message };
    },
  };
}

/** Each session's breakers, made at its first use; `forget` drops a session's (it ended). */
function createBreakersPort(now: () => number, audit: Pick<AuditPort, 'record'>): BreakersPort & { forget(session: string): void } {
  const bySession = new Map<string, Breakers>();
  return {
    breakersOf(session) {
      let b = bySession.get(session);
      if (!b) {
        b = new Breakers({ now, onEvent: (e) => void audit.record(e.type, { ...e, session }) });
        bySession.set(session, b);
      }
      return b;
    },
    forget: (session) => void bySession.delete(session),
  };
}

/** The runtimes and the bound on sandboxes running at once. */
function createExecutorsPort(options: ForgeOptions, paths: ForgePaths): ExecutorsPort {
  // The names (PATH) are found when a spec is first validated; each interpreter's version and
  // mounts when first needed (it means running them: a command that only lists tools never does),
  // and in the background from the start in a process that builds sandboxes ahead (a server).
  let asked: Promise<RuntimeTable> | undefined;
  const runtimes = () => {
    if (!asked) {
      asked = options.runtimes
        ? Promise.resolve(options.runtimes)
        : sandboxModule().then((s) => s.resolveRuntimes({ cacheFile: join(paths.cacheDir, 'runtimes.json') }));
      asked.catch(() => {}); // reported by the call that needs it
    }
    return asked;
  };
  let names: readonly string[] | undefined = options.runtimes?.list.map((r) => r.name);
  if (options.prebuild !== false) void runtimes();
  const maxRuns = options.maxConcurrentRuns ?? defaultRunSlots();
  if (!Number.isInteger(maxRuns) || maxRuns < 1)
    throw new Error(`maxConcurrentRuns must be a positive integer (got ${JSON.stringify(options.maxConcurrentRuns)})`);
  return {
    runtimes,
    runtimesAsked: () => asked,
    async lookUpRuntimeNames() {
      names ??= (await sandboxModule()).runtimeNames();
      return names;
    },
    runtimeNames() {
      if (!names) throw new Error('the runtime names were asked before they were looked up (lookUpRuntimeNames)');
      return names;
    },
    running: new Set(),
    runSlots: new RunSlots(maxRuns),
  };
}

/** The engine's {@link Lifecycle.admit} over its state and the audit log's gate. */
function admitter(state: EngineState, gate: AuditGate): Lifecycle['admit'] {
  return async (ctx, undone) => {
    if (state.closing) return { ok: false, kind: 'internal', message: 'forge is shutting down; try again after it restarts' };
    if (ctx.signal?.aborted) return { ok: false, kind: 'cancelled', message: `${stopReason(ctx.signal)}; ${undone}` };
    const down = await gate.ready();
    if (down) return { ok: false, kind: AUDIT_UNAVAILABLE, message: down.message };
    const bad = contextProblem(ctx);
    if (bad) return { ok: false, kind: 'validation_failed', message: bad };
    return undefined;
  };
}

/** This process's name in a job queue and in presence: `<host>-<pid>` (letters, digits, `_`, `-`). */
export function defaultWorkerName(): string {
  return `${hostname()
    .replace(/[^A-Za-z0-9_-]/g, '-')
    .slice(0, 80)}-${process.pid}`;
}
