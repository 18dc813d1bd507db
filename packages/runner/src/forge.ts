import { createHash, createPublicKey, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type AuditLog, openAuditLog } from '@forge/audit-chain';
import {
  Breakers,
  bindAllow,
  bindRoots,
  checkAllowRule,
  checkNamespace,
  checkPersonaAcl,
  checkRuntime,
  checkSecrets,
  checkToolName,
  clampBudget,
  createPolicy,
  type Decision,
  isOperator,
  networkFor,
  type Policy,
  type PolicySnapshot,
  parseToolAcl,
  type ToolAcl,
} from '@forge/policy';
import {
  createRegistry,
  type ListedTool,
  type Registry,
  type ResolvedTool,
  type Scope,
  type StoredTool,
  scopeIdProblem,
  scopeRoots,
  staticCheck,
  toolValidators,
  verifyToolDigest,
} from '@forge/registry';
import {
  type CheckedBind,
  checkBind,
  closeBinds,
  defaultDenyList,
  discardPrebuilt,
  EVENTS_FD,
  runtimeNames as findRuntimeNames,
  type Mount,
  makeStageDir,
  type NetworkEvent,
  type Resolver,
  type RunResult,
  type RuntimeTable,
  resolveRuntimes,
  runSandboxed,
} from '@forge/sandbox';
import stableStringify from 'fast-json-stable-stringify';
import { readAnnotations } from './annotations.js';
import { AUDIT_UNAVAILABLE, type AuditFailure, AuditGate } from './auditGate.js';
import { type AuditTail, readAuditTail } from './auditTail.js';
import { type CacheLimits, cacheKey, ResultCache } from './cache.js';
import { CheckpointSchedule, readAuditKey } from './checkpoints.js';
import { type Envelope, type EnvelopeMeta, failure, parseToolOutput } from './envelope.js';
import { EventReader, type EventSummary, type ToolEvent } from './events.js';
import { caseVariantIn, checkManage, eventTypeOf, ownerCheck } from './gates.js';
import { HitLog, listArtifacts, newId, newRunId, writeJsonAtomic } from './manifest.js';
import { checkMetaFiles, rebaseFiles } from './metaFiles.js';
import { defaultForgeHome, type ForgePaths, findProject, forgePaths } from './paths.js';
import {
  excerpt,
  redactBytes,
  redactCutEnd,
  redactFileInPlace,
  redactTail,
  redactText,
  redactTextFolded,
  redactValue,
  redactWithFragments,
  type SecretList,
  secretList,
} from './redact.js';
import { type ArtifactContent, type RunReadDeps, type RunRecord, readArtifact, readRun } from './runs.js';
import { type ScrubReport, scrubArtifacts } from './scrub.js';
import type { SandboxFacts } from './toolHints.js';
import { readSecrets } from './vault.js';
import { findTool, WireClaims, withWireConflicts } from './wireNames.js';

/** The meta-tools an MCP server serves itself: never forged, always callable. */
export const META_TOOLS = Object.freeze(['forge_tool', 'forge_call', 'forge_list', 'forge_promote', 'forge_remove'] as const);

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
  /** Called when a call names no known tool (the toolsmith listens here later). */
  onUnknownTool?: (name: string, ctx: Required<Pick<CallContext, 'persona' | 'session'>>) => void;
  /** The environment read for FORGE_PERSONA, FORGE_ALLOWED_TOOLS, FORGE_SESSION_ID, FORGE_TASK_ID. */
  env?: NodeJS.ProcessEnv;
  /** Clock (ms since the epoch) for breakers, the cache and stamps. */
  now?: () => number;
  /** The bwrap to use (default: the one on PATH). */
  bwrapPath?: string;
  /**
   * Keep sandboxes built ahead of time for the next calls (default true). A call without `x-bind`
   * or network then starts in one that is already set up, which takes bwrap's own 2–3 ms off its
   * latency. At most four wait per runtime and eight in all, each a few idle processes; they never
   * keep the process alive and are stopped by `close()`.
   */
  prebuild?: boolean;
  /** How the egress proxy resolves names (default: the system resolver); tests map names with it. */
  resolver?: Resolver;
  /**
   * Watch the scope directories, so tools that another process forges, promotes or removes are
   * seen at once and reported through `toolsChanged` (a server wants this; a one-shot CLI does not).
   */
  watch?: boolean;
}

export interface ForgeToolOptions extends CallContext {
  /** Where the tool goes (default `project`). */
  scope?: Scope;
  /** Replace a tool of that name in that scope (its previous version stays recoverable). */
  overwrite?: boolean;
}

/** An expected refusal: the error kind, and a message naming the field or rule. */
export interface Refusal {
  ok: false;
  kind: string;
  message: string;
  [detail: string]: unknown;
}

export type ForgeResult = { ok: true; tool: StoredTool; previous?: { version: number; digest: string } } | Refusal;

/** Something forge did, as written to the audit log. */
export interface ForgeEvent {
  type: string;
  data: Record<string, unknown>;
}

/** The visible tools changed (a forge, promote or remove, here or in another process). */
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
  /** Copies a project tool to the user scope. */
  promoteTool(name: string, options?: { force?: boolean } & CallContext): Promise<ForgeResult & { outcome?: string }>;
  /** Removes a tool from a scope (default: the scope it resolves to). */
  removeTool(name: string, options?: { scope?: Scope } & CallContext): Promise<ForgeResult>;
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
  /** Waits for calls in flight (aborting them after `graceMs`, default 10 s), flushes and closes. */
  close(options?: { graceMs?: number }): Promise<void>;
}

const EXTENSIONS: Record<string, string> = { python: 'py', node: 'js', bash: 'sh', sh: 'sh' };

/**
 * Creates the engine: the registry over forge's scopes, the hot-reloaded policy, the audit log,
 * the result cache and the sandbox. Fails (throws) only when the home or the audit log cannot be
 * opened; a host that cannot sandbox is reported per call (`sandbox_unavailable`).
 */
export async function createForge(options: ForgeOptions = {}): Promise<Forge> {
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
  const audit = options.audit ?? (await openAuditLog(paths.auditLog, signingKey ? { signingKey } : {}));
  const ownsAudit = !options.audit;
  const auditListeners = new Set<(e: ForgeEvent) => void>();
  const changeListeners = new Set<(e: ToolsChanged) => void>();
  const pendingAudit = new Set<Promise<unknown>>();
  let auditClosed = false;
  // Fail closed: once an append fails, nothing is answered or changed until the log takes the
  // recovery entry (auditGate.ts).
  const auditGate = new AuditGate(audit, now, (f) => process.emitWarning(`forge: ${f.message}`));
  /**
   * Appends one entry; resolves once it is durable (to undefined), or to why it could not be
   * written. Never throws into a pipeline. `secrets` are the values of the call the entry belongs
   * to: redacted before any string is shortened.
   */
  const record = (type: string, raw: Record<string, unknown>, secrets: SecretList = []): Promise<AuditFailure | undefined> => {
    const data = auditSafe(raw, secrets) as Record<string, unknown>;
    for (const l of auditListeners) l({ type, data });
    if (auditClosed) return Promise.resolve(undefined);
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
  const base = createRegistry({
    roots: scopeRoots({ forgeHome: paths.home, project: paths.project }),
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
  /** Session and task scope registries, by scope and ids; each created and loaded on first use. */
  const scoped = new Map<string, Promise<Registry>>();
  const scopeRegistry = (scope: 'session' | 'task', session: string, task?: string): Promise<Registry> => {
    const ids = `${scope}\0${session}\0${scope === 'task' ? (task ?? '') : ''}`;
    let r = scoped.get(ids);
    if (r) return r;
    const roots = scopeRoots({ forgeHome: paths.home, project: paths.project, session, ...(task ? { task } : {}) });
    const dir = roots[scope] as string;
    r = (async () => {
      const reg = createRegistry({
        roots: { [scope]: dir },
        builtins: META_TOOLS,
        runtimes: runtimeNames,
        onEvent: registryEvent,
        now: () => new Date(now()),
      });
      await reg.load();
      // Watching would create the directory: a session that forged nothing leaves none behind.
      if (options.watch && existsSync(dir)) await reg.watch(onScopeChange, { onError: watchErrors });
      return reg;
    })();
    scoped.set(ids, r);
    return r;
  };

  interface Ctx {
    persona: string;
    session: string;
    task: string | undefined;
    acl: ToolAcl;
    signal: AbortSignal | undefined;
    onEvent: ((event: ToolEvent) => void) | undefined;
  }
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
  const resolveIn = (regs: Registry[], name: string): ResolvedTool | undefined => {
    let found: ResolvedTool | undefined;
    const shadows: Scope[] = [];
    for (const r of regs) {
      const hit = r.resolve(name);
      if (!hit) continue;
      if (!found) found = { ...hit, shadows: [] };
      else shadows.push(hit.scope);
      shadows.push(...hit.shadows.filter((s) => s !== found?.scope));
    }
    return found ? { ...found, shadows } : undefined;
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

  const cache = options.cache === false ? undefined : new ResultCache(paths.cacheDir, options.cache ?? {}, now);
  const hits = new HitLog(join(paths.runsDir, 'hits.jsonl'));
  /** Settles once the hit records queued so far are written (batches are written in order). */
  let hitsWritten: Promise<unknown> = Promise.resolve();
  // Sandboxes built ahead keep their per-run files' placeholders in a directory of their own under
  // the system's temporary directory (made at the first call that may use one): a tool's mount
  // table then shows nothing of the project's or the home's paths.
  let stageDir: string | undefined;
  const calls = new Map<string, number>();
  /** Sandboxes running now (aborted by close() after its grace period). */
  const running = new Set<AbortController>();
  /** Operations in flight, from their first step (close() waits for them). */
  let active = 0;
  let closing = false;

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

  // ---------------------------------------------------------------- forge pipeline
  const forgeTool = async (spec: unknown, o: ForgeToolOptions = {}): Promise<ForgeResult> => {
    const ctx = context(o);
    const scope = o.scope ?? 'project';
    const who = { persona: ctx.persona, session: ctx.session };
    const name = typeof (spec as { name?: unknown })?.name === 'string' ? (spec as { name: string }).name : undefined;
    const refuse = async (r: Refusal, eventType = 'forge.created'): Promise<Refusal> => {
      const { ok: _ok, ...detail } = r;
      const f = await record(eventType, { ok: false, ...who, scope, ...(name ? { name } : {}), ...detail });
      return f ? { ok: false, kind: AUDIT_UNAVAILABLE, message: unaudited(f, r.kind, r.message), refused: r.kind } : r;
    };
    if (closing) return refuse({ ok: false, kind: 'internal', message: 'forge is shutting down; try again after it restarts' });
    if (o.signal?.aborted) return refuse({ ok: false, kind: 'cancelled', message: `${stopReason(o.signal)}; nothing was forged` });
    // Refused before anything is written while the log takes no appends (the check is a real append).
    const down = await auditGate.ready();
    if (down) return { ok: false, kind: AUDIT_UNAVAILABLE, message: down.message };
    const bad = contextProblem(ctx);
    if (bad) return refuse({ ok: false, kind: 'validation_failed', message: bad });
    if (scope === 'task' && !ctx.task)
      return refuse({ ok: false, kind: 'validation_failed', message: 'scope "task" needs a task id (FORGE_TASK_ID or ctx.task)' });
    const pol = policyNow();
    if (!pol.ok) return refuse(pol);
    const snap = pol.snap;
    const checked = base.validate(spec);
    if (!checked.ok) return refuse(checked as Refusal);
    const tool = checked.spec;
    const grant = networkFor(snap, ctx.persona);
    const findings = staticCheck(tool, { network: grant.network === 'allow' });
    if (findings.length > 0) {
      return refuse({
        ok: false,
        kind: 'static_check_failed',
        message: `impl: ${findings.map((f) => `line ${f.line}: ${f.message} (${f.rule})`).join('; ')}`,
        findings,
      });
    }
    const decisions: Decision[] = [checkToolName(snap, tool.name)];
    for (const d of decisions) if (!d.ok) return refuse(d as Refusal);
    const ns = checkNamespace(snap, ctx.persona, tool.name);
    if (!ns.ok) return refuse(ns as Refusal, 'tool.namespace_denied');
    // Taken too: a name that differs only by case from a visible tool (the registry checks its own
    // scopes; the session and task scopes are registries of their own).
    const visible = await layers(ctx);
    const variant = o.overwrite === true && resolveIn(visible, tool.name) ? undefined : caseVariantIn(visible, tool.name);
    if (variant) return refuse(variant);
    const rt = checkRuntime(snap, tool.runtime);
    if (!rt.ok) return refuse(rt as Refusal);
    // On PATH is not enough (a version manager's shim for a version it has not installed): the
    // interpreter must have answered, or the tool could be forged and never run.
    try {
      await (await runtimesReady).resolve(tool.runtime);
    } catch (err) {
      return refuse({ ok: false, kind: 'validation_failed', message: `runtime: ${(err as Error).message}` });
    }
    const secrets = checkSecrets(snap, ctx.persona, tool.meta?.secrets ?? []);
    if (!secrets.ok) return refuse(secrets as Refusal, 'acl.persona_secret_denied');
    const count = breakersOf(ctx.session).checkForge(ctx.session, snap.policy.breakers);
    if (!count.ok) return refuse({ ok: false, kind: count.kind, message: count.message });
    const reg = await registryFor(scope, ctx);
    // A replace needs the replaced tool to be the persona's (asked under the name's lock).
    // Two tools may not share a wire name in any visible scope, racing forges included.
    const replacing = o.overwrite === true && resolveIn(visible, tool.name) !== undefined;
    const written = await wireClaims.hold(visible, tool.name, scope, { kind: 'name_taken', existing: replacing }, () =>
      reg.create(tool, {
        scope,
        createdBy: who,
        overwrite: o.overwrite === true,
        authorize: ownerCheck(snap, ctx.persona, tool.name, 'forge'),
      }),
    );
    if (!written.ok) return refuse(written as Refusal, eventTypeOf(written.kind, 'forge.created'));
    const unrecorded = await record('forge.created', {
      ok: true,
      ...who,
      scope,
      name: written.tool.name,
      version: written.tool.version,
      digest: written.tool.digest,
      runtime: written.tool.runtime,
      ...(written.previous ? { replaced: written.previous } : {}),
      policy: snap.digest,
    });
    if (unrecorded) {
      // A forge the log does not show did not happen: the write is taken back.
      const undone = await undoCreate(reg, scope, written.tool.name, written.previous);
      return { ok: false, kind: AUDIT_UNAVAILABLE, message: `${unrecorded.message}; "${written.tool.name}" was not forged: ${undone}` };
    }
    notifyChanged([scope], [written.tool.name]);
    return { ok: true, tool: written.tool, ...(written.previous ? { previous: written.previous } : {}) };
  };

  // ---------------------------------------------------------------- call pipeline
  const callTool = async (asked: string, input: unknown, c: CallContext = {}): Promise<Envelope> => {
    /** The name asked for; the forge name once resolved (a client may call by the wire name). */
    let name = asked;
    const ctx = context(c);
    const started = now();
    const who = { persona: ctx.persona, session: ctx.session, ...(ctx.task ? { task: ctx.task } : {}) };
    const digestOfInput = inputDigest(input); // one canonical serialisation per call
    /** The secret values this call read (once read): every refusal's text is redacted by them. */
    let callSecrets: SecretList = [];
    const refuse = async (
      kind: string,
      message: string,
      eventType = 'forge.called',
      extra: Record<string, unknown> = {},
    ): Promise<Envelope> => {
      const text = redactText(message, callSecrets);
      const f = await record(
        eventType,
        { ok: false, name, ...who, kind, message: text, input_digest: digestOfInput, ...extra },
        callSecrets,
      );
      if (f) return failure(AUDIT_UNAVAILABLE, unaudited(f, kind, text), { duration_ms: now() - started, cache: 'off' }, { refused: kind });
      return failure(kind, text, { duration_ms: now() - started, cache: 'off' }, extra);
    };
    if (closing) return refuse('internal', 'forge is shutting down; try again after it restarts');
    if (ctx.signal?.aborted) return refuse('cancelled', `${stopReason(ctx.signal)}; the tool did not run`);
    // Nothing runs while the log takes no appends (the check is a real append of the recovery entry).
    const down = await auditGate.ready();
    if (down) return failure(AUDIT_UNAVAILABLE, down.message, { duration_ms: now() - started, cache: 'off' });
    const bad = contextProblem(ctx);
    if (bad) return refuse('validation_failed', bad);

    const regs = await layers(ctx);
    const found = findTool(regs, name, (n) => resolveIn(regs, n), META_TOOLS);
    if (!found.ok) {
      options.onUnknownTool?.(name, { persona: ctx.persona, session: ctx.session });
      return refuse('unknown_tool', found.message);
    }
    const resolved = found.resolved;
    // Every gate, the audit entry and the manifest name the tool by its forge name.
    name = resolved.tool.name;
    const stored = resolved.tool;
    const acl = checkPersonaAcl(ctx.acl, ctx.persona, name, META_TOOLS);
    if (!acl.ok) return refuse(acl.kind, acl.message, 'acl.persona_denied');
    const pol = policyNow();
    if (!pol.ok) return refuse(pol.kind, pol.message);
    const snap = pol.snap;
    for (const d of [
      checkToolName(snap, name),
      checkAllowRule(snap, ctx.persona, 'tool', name, 'execute'),
      checkRuntime(snap, stored.runtime),
    ]) {
      if (!d.ok) return refuse(d.kind, d.message);
    }
    const breakers = breakersOf(ctx.session);
    const settings = snap.policy.breakers;
    const gate = breakers.checkCall(name, settings);
    if (!gate.ok) return refuse(gate.kind, gate.message, 'forge.called', { retry_after_ms: gate.retryAfterMs });
    // From here the breaker expects an outcome.
    let outcome: 'success' | 'failure' | 'none' = 'none';
    try {
      // Integrity before input validation: compiled validators are cached by the recorded
      // digest, so a tampered schema must never be compiled under it.
      const integrity = verified.has(stored) ? { ok: true as const } : verifyToolDigest(stored);
      if (!integrity.ok) return await refuse(integrity.kind, integrity.message);
      verified.add(stored);
      const validators = toolValidators(stored);
      if ('kind' in validators) return await refuse('internal', `tool "${name}" has a schema that does not compile: ${validators.message}`);
      const valid = validators.input(input);
      if (!valid.ok) return await refuse('validation_failed', valid.message, 'forge.called', { problems: valid.problems });

      let runtime: ReturnType<RuntimeTable['get']>;
      try {
        runtime = await (await runtimesReady).resolve(stored.runtime);
      } catch (err) {
        return await refuse('policy_denied', (err as Error).message);
      }
      const secretNames = stored.meta?.secrets ?? [];
      const { redacted: redactedInput, binds: bindRequests } = readAnnotations(stored.input_schema, input);
      // Cached: deterministic tools whose answer depends on the input alone. Not with secrets
      // (their answer may depend on a secret's value) nor with bound paths (on the files' content).
      const cacheable = stored.meta?.deterministic === true && secretNames.length === 0 && bindRequests.length === 0 && cache !== undefined;
      const key = cacheable ? cacheKey(stored.digest, `${runtime.name}@${runtime.version}`, digestOfInput) : undefined;

      const execute = async (): Promise<RunOutcome> => {
        // The network grant: closed unless policy opens it (and allow-rules agree); when open,
        // the run gets forge's egress proxy, never the host network.
        const grant = networkFor(snap, ctx.persona);
        // Secrets: the persona's allow-list first (fail closed), then the vault.
        const allowed = checkSecrets(snap, ctx.persona, secretNames);
        if (!allowed.ok) throw new RefusalError(allowed.kind, allowed.message, 'acl.persona_secret_denied');
        let secrets: SecretList = [];
        let secretEnv: Record<string, string> = {};
        if (secretNames.length > 0) {
          const read = readSecrets(paths.vault, secretNames);
          if (!read.ok) throw new RefusalError(read.kind, read.message, read.event ?? 'forge.called');
          secrets = secretList(read.values);
          callSecrets = secrets;
          secretEnv = Object.fromEntries(read.values);
        }
        // Binds from x-bind: hostile paths, checked and held by descriptor.
        const roots = bindRoots(snap, { project: paths.project });
        const deny = [...defaultDenyList(), paths.home, paths.projectForge, paths.vault];
        const allow = bindAllow(snap, { project: paths.project });
        const binds: CheckedBind[] = [];
        try {
          for (const b of bindRequests) {
            const c = checkBind({ path: b.path, mode: b.mode, create: b.mode === 'rw' }, { roots, deny, allow });
            if (!c.ok)
              throw new RefusalError('bind_denied', `input${b.pointer}: ${c.message} (policy bind_roots: ${roots.join(', ') || 'none'})`);
            binds.push(c.bind);
          }
          return await runOnce({
            stored,
            runtime,
            input,
            inputDigest: digestOfInput,
            redactedInput,
            binds,
            secrets,
            secretEnv,
            snap,
            ctx,
            key,
            secretNames,
            grant,
          });
        } finally {
          closeBinds(binds);
        }
      };

      if (key && cache) {
        const hitOf = (seed: Envelope, seedRun: string) => ({
          seed,
          seedRun,
          stored,
          redactedInput,
          inputDigest: digestOfInput,
          snap,
          ctx,
          started,
          key,
        });
        const hit = cache.get(key);
        if (hit) {
          outcome = 'success';
          return await cacheHit({ ...hitOf(hit.envelope, hit.seed_run), shared: false });
        }
        const flight = cache.once(key, execute);
        const r = await flight.result;
        outcome = r.outcome;
        if (!flight.shared) return r.envelope;
        // Another caller ran it: its answer, recorded for this call too.
        if (r.envelope.ok) return await cacheHit({ ...hitOf(r.envelope, r.runId), shared: true });
        const unrecorded = await record('forge.called', {
          ok: false,
          ...calledFacts(stored, ctx, digestOfInput),
          kind: r.envelope.error.kind,
          cache: 'miss',
          shared_flight: true,
          seed_run: r.runId,
          policy: snap.digest,
        });
        if (unrecorded) return failure(AUDIT_UNAVAILABLE, unrecorded.message, r.envelope.meta);
        return r.envelope;
      }
      const r = await execute();
      outcome = r.outcome;
      return r.envelope;
    } catch (err) {
      if (err instanceof RefusalError) return await refuse(err.kind, err.message, err.eventType);
      outcome = 'failure';
      return await refuse('internal', `forge failed while calling "${name}": ${(err as Error).message}`);
    } finally {
      breakers.recordOutcome(name, outcome, settings, gate.trial);
    }
  };

  /** What one run gave: the envelope, the run id, and the outcome for the tool's breaker. */
  interface RunOutcome {
    envelope: Envelope;
    runId: string;
    outcome: 'success' | 'failure' | 'none';
  }

  interface RunInput {
    stored: StoredTool;
    runtime: ReturnType<RuntimeTable['get']>;
    input: unknown;
    inputDigest: string;
    redactedInput: unknown;
    binds: CheckedBind[];
    secrets: SecretList;
    secretEnv: Record<string, string>;
    secretNames: string[];
    snap: PolicySnapshot;
    ctx: Ctx;
    key: string | undefined;
    grant: ReturnType<typeof networkFor>;
  }

  /** One sandboxed run, its manifest, cache store and audit entry. */
  const runOnce = async (r: RunInput): Promise<RunOutcome> => {
    const { stored, runtime, snap, ctx } = r;
    const t0 = now();
    const { id: runId, dirName } = newRunId(new Date(t0));
    const runDir = join(paths.runsDir, dirName);
    const artifacts = join(runDir, 'artifacts');
    mkdirSync(artifacts, { recursive: true, mode: 0o700 });
    const family = runtime.name.startsWith('python') ? 'python' : runtime.name;
    const ext = EXTENSIONS[family] ?? 'txt';
    const code = codeFile(stored, ext);
    const target = `/forge/tool/main.${ext}`;
    const { budget, clamped } = clampBudget(snap, {
      ...(stored.meta?.timeout_ms !== undefined ? { timeout_ms: stored.meta.timeout_ms } : {}),
      ...(stored.meta?.cpu_s !== undefined ? { cpu_s: stored.meta.cpu_s } : {}),
      ...(stored.meta?.output_cap !== undefined ? { output_cap: stored.meta.output_cap } : {}),
    });
    const command = family === 'python' ? [runtime.interpreter, '-I', '-B', target] : [runtime.interpreter, target];
    const mounts: Mount[] = [
      ...runtime.mounts.map((source) => ({ source, mode: 'ro' as const })),
      { source: code, target, mode: 'ro', perRun: true },
      { source: artifacts, target: '/forge/artifacts', mode: 'rw', perRun: true },
    ];
    const spill = join(runDir, 'stdout.partial');
    const net = r.grant.network === 'allow';
    const sandboxLabel = net ? (r.grant.loopback === 'allow' ? 'bwrap+net+loopback' : 'bwrap+net') : 'bwrap';
    const ac = new AbortController();
    running.add(ac);
    const onAbort = () => ac.abort(ctx.signal?.reason);
    ctx.signal?.addEventListener('abort', onAbort);
    if (ctx.signal?.aborted) ac.abort(ctx.signal.reason);
    let result: RunResult | undefined;
    let sandboxError: Refusal | undefined;
    let manifest: Record<string, unknown> | undefined;
    // The tool's events (descriptor 3): handed to the caller as they come, summed up in the manifest.
    const events = new EventReader({ secrets: r.secrets, ...(ctx.onEvent ? { onEvent: ctx.onEvent } : {}) });
    let eventSummary: EventSummary | undefined;
    try {
      result = await runSandboxed(
        {
          command,
          env: {
            ...runtime.env,
            FORGE_ARTIFACTS: '/forge/artifacts',
            FORGE_RUN_ID: runId,
            FORGE_EVENTS_FD: String(EVENTS_FD),
            ...r.secretEnv,
          },
          mounts,
          binds: r.binds,
          limits: {
            timeoutMs: budget.timeout_ms,
            cpuSeconds: budget.cpu_s,
            outputBytes: budget.output_cap,
            outputDirBytes: budget.artifacts_bytes,
          },
          cwd: '/tmp',
          ...(net
            ? {
                network: {
                  grant: {
                    network: 'allow' as const,
                    loopback: r.grant.loopback,
                    private_networks: r.grant.private_networks,
                    allow_domains: r.grant.allow_domains,
                    deny_domains: r.grant.deny_domains,
                    allow_ports: r.grant.allow_ports,
                  },
                  // Every decision of the proxy is audited, with the run it belongs to.
                  // Host names reach the proxy case-folded: a secret in one is matched in any case.
                  onEvent: (e: NetworkEvent) =>
                    void record(
                      e.type,
                      { ...foldRedacted(e, r.secrets), run_id: runId, name: stored.name, persona: ctx.persona },
                      r.secrets,
                    ),
                  ...(options.resolver ? { resolver: options.resolver } : {}),
                },
              }
            : {}),
        },
        {
          stdin: JSON.stringify(r.input ?? {}),
          stdoutFile: spill,
          signal: ac.signal,
          events: (chunk) => events.push(chunk),
          ...(options.prebuild === false ? {} : { prebuild: { stageDir: (stageDir ??= makeStageDir()) } }),
          ...(options.bwrapPath ? { bwrapPath: options.bwrapPath } : {}),
        },
      );
    } catch (err) {
      const code = (err as { code?: string }).code;
      // The sandbox's message may quote the end of stderr, cut before forge could redact it.
      const message = redactWithFragments((err as Error).message, r.secrets);
      sandboxError = {
        ok: false,
        kind: code === 'sandbox_unavailable' ? 'sandbox_unavailable' : code === 'bind_denied' ? 'bind_denied' : 'internal',
        message,
      };
      if (code === 'sandbox_unavailable') await record('sandbox.unavailable', { name: stored.name, message }, r.secrets);
    } finally {
      running.delete(ac);
      ctx.signal?.removeEventListener('abort', onAbort);
      eventSummary = events.end();
    }

    const meta: EnvelopeMeta = { run_id: runId, cache: r.key ? 'miss' : 'off', sandbox: sandboxLabel };
    if (clamped.length > 0) meta.policy_clamped = clamped;
    let envelope: Envelope;
    // The outcome for the tool's breaker: a failure when forge found the tool broken (crash,
    // limit, bad output). A tool's own ok:false is an answer; a host that cannot sandbox, or a
    // call cancelled from outside, is not the tool's doing.
    let outcome: RunOutcome['outcome'] = 'success';
    const secrets = r.secrets;
    const clean = (text: string) => redactText(text, secrets);
    /** Secret values written into artifact files, replaced on disk after the run. */
    let scrubbed: ScrubReport | undefined;
    if (!result) {
      envelope = failure(sandboxError?.kind ?? 'internal', sandboxError?.message ?? 'the sandbox did not run', meta);
      outcome = sandboxError?.kind === 'internal' ? 'failure' : 'none';
      rmSync(runDir, { recursive: true, force: true }); // nothing ran: no run to record
    } else {
      // What the tool wrote among its artifacts, searched before forge adds its own files there.
      if (secrets.length > 0) scrubbed = await scrubOrClear(artifacts, secrets, scrubLimits(budget));
      // Killed by forge (a limit, a timeout, a cancel): stdout may end in the middle of a secret.
      const killed = result.reason !== 'exit';
      if (result.stdoutFile) {
        // The whole stdout, moved among the artifacts only now (the tool cannot have placed
        // anything there under that name), with secret values removed first.
        const full = join(artifacts, 'full_stdout.bin');
        if (secrets.length > 0) redactFileInPlace(result.stdoutFile, secrets, { cutEnd: killed });
        rmSync(full, { recursive: true, force: true });
        renameSync(result.stdoutFile, full);
      }
      // The sandbox keeps only the last bytes of stderr: a secret may straddle where it cut.
      const stderr = redactTail(result.stderrTail, secrets, Buffer.byteLength(result.stderrTail) >= result.limits.stderrTailBytes);
      if (ac.signal.aborted && result.reason === 'signal') {
        outcome = 'none';
        envelope = failure('cancelled', `${stopReason(ac.signal)}; the tool was killed`, meta);
      } else if (result.stdoutTruncated) {
        outcome = 'failure';
        meta.stdout_truncated = true;
        meta.stdout_truncated_at_bytes = result.limits.outputBytes;
        meta.stdout_total_bytes = result.stdoutBytes;
        if (result.stdoutFile) meta.stdout_full_artifact = join(artifacts, 'full_stdout.bin');
        envelope = failure(
          'resource_limit',
          `the tool printed ${result.stdoutBytes} bytes, over its output cap of ${result.limits.outputBytes}; the whole output is kept in ${meta.stdout_full_artifact ?? 'no file'} — print less, or raise meta.output_cap (policy ceiling ${snap.policy.budgets.ceilings.output_cap})`,
          meta,
        );
      } else if (result.reason === 'timeout') {
        outcome = 'failure';
        envelope = failure(
          'timeout',
          `the tool ran past its ${result.limits.timeoutMs} ms wall-clock limit and was killed${tail(stderr, secrets)}`,
          meta,
        );
      } else if (result.reason === 'cpu' || result.reason === 'memory' || result.reason === 'file_size' || result.reason === 'output_cap') {
        outcome = 'failure';
        envelope = failure('resource_limit', `the tool hit its ${result.reason} limit${tail(stderr, secrets)}`, meta, {
          limit: result.reason,
        });
      } else if (result.outputs?.some((o) => o.lost === undefined && o.full)) {
        outcome = 'failure';
        envelope = failure(
          'resource_limit',
          `the tool filled its artifacts directory (${result.limits.outputDirBytes} bytes, policy budget artifacts_bytes); what it wrote up to that is kept in ${artifacts} — write less, or raise budgets.defaults.artifacts_bytes (ceiling ${snap.policy.budgets.ceilings.artifacts_bytes})${tail(stderr, secrets)}`,
          meta,
          { limit: 'artifacts_bytes' },
        );
      } else {
        const parsed = parseToolOutput(result.stdout, secrets);
        if (!parsed.ok) {
          outcome = 'failure';
          // Kept beside the artifacts, then renamed in (the tool could have left a symlink there).
          const kept = join(artifacts, 'stdout.bin');
          writeFileSync(join(runDir, 'stdout.bin'), killed ? redactCutEnd(result.stdout, secrets) : redactBytes(result.stdout, secrets), {
            mode: 0o600,
            flag: 'wx',
          });
          rmSync(kept, { recursive: true, force: true });
          renameSync(join(runDir, 'stdout.bin'), kept);
          const exit = result.reason === 'signal' ? `was killed by ${result.signal}` : `exited with code ${result.exitCode}`;
          envelope = failure(
            'output_invalid',
            clean(`${parsed.reason}; the tool ${exit}; its stdout is kept in ${kept}${tail(stderr, secrets)}`),
            meta,
          );
        } else {
          const e = parsed.envelope;
          // The tool's own meta, without the fields only forge may set.
          const toolMeta = redactValue(withoutKeys(e.meta, FORGE_META_KEYS), secrets) as EnvelopeMeta;
          // The files it names, as found on disk now (metaFiles.ts), never as the tool says.
          if (toolMeta.files !== undefined) {
            const checked = checkMetaFiles(artifacts, runId, toolMeta.files);
            toolMeta.files = checked.files;
            if (checked.dropped.length > 0) toolMeta.files_dropped = checked.dropped;
          }
          envelope = e.ok
            ? { ok: true, data: redactValue(e.data, secrets), meta: { ...toolMeta, ...meta } }
            : { ok: false, error: redactValue(e.error, secrets) as typeof e.error, meta: { ...toolMeta, ...meta } };
          if (envelope.ok && stored.output_schema) {
            const validators = toolValidators(stored);
            const out = 'kind' in validators ? undefined : validators.output?.(envelope.data);
            if (out && !out.ok) {
              outcome = 'failure';
              envelope = failure('output_schema_failed', out.message, meta, { problems: out.problems });
            }
          }
        }
      }
      envelope.meta.duration_ms = result.durationMs;
      manifest = {
        run_id: runId,
        tool: {
          name: stored.name,
          version: stored.version,
          digest: stored.digest,
          scope: stored.scope,
          runtime: `${runtime.name}@${runtime.version}`,
        },
        persona: ctx.persona,
        session: ctx.session,
        ...(ctx.task ? { task: ctx.task } : {}),
        input: redactValue(r.redactedInput, secrets),
        input_digest: r.inputDigest,
        sandbox: {
          label: sandboxLabel,
          prebuilt: result.prebuilt,
          // Who the tool ran as on the host, and how each limit held: for the whole run (cgroup)
          // or per process only (rlimit).
          host_uid: result.hostUid,
          enforced: result.enforced,
          argv: command,
          mounts: mounts.map((m) => `${m.mode}:${m.target ?? m.source}`),
          binds: r.binds.map((b) => `${b.mode}:${b.path}`),
        },
        limits: { ...budget, clamped },
        secrets: r.secretNames,
        policy: snap.digest,
        started_at: new Date(t0).toISOString(),
        duration_ms: result.durationMs,
        exit: { reason: result.reason, code: result.exitCode, signal: result.signal },
        cache: meta.cache,
        ok: envelope.ok,
        ...(envelope.ok ? {} : { error_kind: envelope.error.kind }),
        stdout_bytes: result.stdoutBytes,
        ...(result.network ? { network: result.network } : {}),
        artifacts: listArtifacts(artifacts),
        ...(result.usage ? { usage: { cpu_ms: result.usage.cpuMs } } : {}),
        ...(result.outputs?.[0] ? { artifacts_copy: outputFacts(result.outputs[0]) } : {}),
        ...(scrubbed ? { redaction: scrubbed } : {}),
        stderr_tail: stderr,
        events: eventSummary,
      };
    }
    calls.set(stored.name, (calls.get(stored.name) ?? 0) + 1);
    // The manifest is written while the audit entry's durable append is under way.
    const [unrecorded] = await Promise.all([
      record(
        'forge.called',
        {
          ok: envelope.ok,
          ...calledFacts(stored, ctx, r.inputDigest),
          run_id: result ? runId : null,
          cache: meta.cache ?? 'off',
          ...(envelope.ok ? {} : { kind: envelope.error.kind }),
          ...(result ? { exit: result.reason, duration_ms: result.durationMs } : {}),
          ...(result?.network ? { network: result.network } : {}),
          ...(r.secretNames.length > 0 ? { secrets: r.secretNames } : {}),
          ...(clamped.length > 0 ? { policy_clamped: clamped } : {}),
          ...(scrubbed && scrubbed.files.length + scrubbed.renamed.length + scrubbed.removed.length > 0
            ? { artifacts_redacted: scrubbed.files.length + scrubbed.renamed.length + scrubbed.removed.length }
            : {}),
          policy: snap.digest,
        },
        r.secrets,
      ),
      // Redacted whole (artifact names, network hosts a tool chose), never cut before that.
      manifest && writeJsonAtomic(join(runDir, 'run_manifest.json'), redactValue(manifest, r.secrets)),
    ]);
    const unrecordedSecrets =
      !unrecorded && r.secretNames.length > 0 && result
        ? await record('tool.secrets_injected', { name: stored.name, run_id: runId, secrets: r.secretNames, persona: ctx.persona })
        : undefined;
    const lost = unrecorded ?? unrecordedSecrets;
    if (lost) {
      // Answered only once audited: the tool's answer is withheld, and the run says why.
      if (manifest) {
        const audit_append = {
          ok: false,
          entry: unrecorded ? 'forge.called' : 'tool.secrets_injected',
          errno: lost.errno,
          at: lost.at,
          message: lost.message,
        };
        await writeJsonAtomic(
          join(runDir, 'run_manifest.json'),
          redactValue({ ...manifest, answered: AUDIT_UNAVAILABLE, audit_append }, r.secrets),
        );
      }
      return { envelope: failure(AUDIT_UNAVAILABLE, lost.message, envelope.meta), runId, outcome };
    }
    // Cached only once audited: a later hit names a seed run the log shows.
    if (envelope.ok && r.key && cache) cache.set(r.key, envelope, runId);
    return { envelope, runId, outcome };
  };

  /** A cache hit: the seed run's envelope with this call's meta, its own manifest and audit entry. */
  const cacheHit = async (h: {
    seed: Envelope;
    seedRun: string;
    stored: StoredTool;
    redactedInput: unknown;
    inputDigest: string;
    snap: PolicySnapshot;
    ctx: Ctx;
    started: number;
    key: string;
    /** Another caller's run, awaited together (single flight), rather than a stored entry. */
    shared: boolean;
  }): Promise<Envelope> => {
    const { seed, seedRun, stored, redactedInput, inputDigest, snap, ctx, started, key, shared } = h;
    const runId = newId(new Date(now()));
    const envelope: Envelope = {
      ...seed,
      meta: { ...seed.meta, run_id: runId, cache: 'hit', duration_ms: now() - started, seed_run: seedRun },
    };
    // The seed's files, read through this hit's id (the hit's persona may read them; runs.ts).
    if (seed.meta.files !== undefined) envelope.meta.files = rebaseFiles(seed.meta.files, runId);
    // A hit runs nothing: its record goes to runs/hits.jsonl, batched (close() waits for it).
    hitsWritten = track(
      hits.append({
        run_id: runId,
        at: new Date(now()).toISOString(),
        tool: { name: stored.name, version: stored.version, digest: stored.digest, scope: stored.scope },
        persona: ctx.persona,
        session: ctx.session,
        ...(ctx.task ? { task: ctx.task } : {}),
        input: redactedInput,
        cache: 'hit',
        cache_key: key,
        seed_run: seedRun,
        shared_flight: shared,
        policy: snap.digest,
        ok: true,
      }),
    );
    calls.set(stored.name, (calls.get(stored.name) ?? 0) + 1);
    const unrecorded = await record('forge.called', {
      ok: true,
      ...calledFacts(stored, ctx, inputDigest),
      run_id: runId,
      seed_run: seedRun,
      cache: 'hit',
      ...(shared ? { shared_flight: true } : {}),
      policy: snap.digest,
    });
    if (unrecorded) return failure(AUDIT_UNAVAILABLE, unrecorded.message, envelope.meta);
    return envelope;
  };

  let codeDirMade = false;
  /** The tool's impl as a file named by its digest (rewritten if it was changed on disk). */
  const codeFile = (tool: StoredTool, ext: string): string => {
    const file = join(paths.codeDir, `${tool.digest.replace(/^sha256:/, '')}.${ext}`);
    if (!codeDirMade) {
      mkdirSync(paths.codeDir, { recursive: true, mode: 0o700 });
      codeDirMade = true;
    }
    let current: string | undefined;
    try {
      current = readFileSync(file, 'utf8');
    } catch {
      current = undefined;
    }
    if (current !== tool.impl) {
      const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
      writeFileSync(tmp, tool.impl, { mode: 0o400, flag: 'wx' });
      renameSync(tmp, file);
    }
    return file;
  };

  /** Counts `op` as in flight until it settles, so close() waits for it. */
  const guarded =
    <A extends unknown[], R>(op: (...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      active++;
      try {
        return await op(...args);
      } finally {
        active--;
      }
    };

  /** The registries `ctx` sees for `scope`, or all of them, loaded. */
  const listTools = async (o: { scope?: Scope } & CallContext = {}): Promise<readonly ListedTool[]> => {
    const ctx = context(o);
    if (contextProblem(ctx)) return [];
    if (o.scope) {
      if (o.scope === 'task' && !ctx.task) return [];
      return (await registryFor(o.scope, ctx)).list({ scope: o.scope });
    }
    const seen = new Map<string, ListedTool>();
    for (const r of await layers(ctx)) for (const t of r.list()) if (!seen.has(t.tool.name)) seen.set(t.tool.name, t);
    // A persona sees the tools its ACL lets it call (the call would be refused anyway).
    // Wire conflicts before the ACL filter: a call by a wire name resolves regardless of the ACL.
    return withWireConflicts([...seen.values()])
      .filter((t) => checkPersonaAcl(ctx.acl, ctx.persona, t.tool.name, META_TOOLS).ok)
      .sort((a, b) => (a.tool.name < b.tool.name ? -1 : 1));
  };

  /**
   * Remove and promote pass the gates of forging (persona ACL, forbidden names, allow-rules,
   * persona namespace; see gates.ts), then the registry asks, under the name's lock, whether the
   * tool is the persona's: its namespace, its creator, or an operator (policy operator_personas).
   */
  const promoteTool = async (name: string, o: { force?: boolean } & CallContext = {}): Promise<ForgeResult & { outcome?: string }> => {
    const ctx = context(o);
    const who = { persona: ctx.persona, session: ctx.session };
    const refuse = async (kind: string, message: string, eventType = 'forge.promoted'): Promise<Refusal> => {
      const f = await record(eventType, {
        ok: false,
        name,
        ...who,
        ...(eventType !== 'forge.promoted' ? { action: 'promote' } : {}),
        kind,
        message,
      });
      return f ? { ok: false, kind: AUDIT_UNAVAILABLE, message: unaudited(f, kind, message), refused: kind } : { ok: false, kind, message };
    };
    if (closing) return refuse('internal', 'forge is shutting down; try again after it restarts');
    if (ctx.signal?.aborted) return refuse('cancelled', `${stopReason(ctx.signal)}; nothing was promoted`);
    const down = await auditGate.ready();
    if (down) return { ok: false, kind: AUDIT_UNAVAILABLE, message: down.message };
    const bad = contextProblem(ctx);
    if (bad) return refuse('validation_failed', bad);
    const pol = policyNow();
    if (!pol.ok) return refuse(pol.kind, pol.message);
    const gate = checkManage(pol.snap, ctx, name, 'promote', 'forge.promoted');
    if (gate) return refuse(gate.kind, gate.message, gate.eventType);
    const hit = base.resolve(name);
    const inUser = hit !== undefined && (hit.scope === 'user' || hit.shadows.includes('user'));
    const r = await wireClaims.hold(await layers(ctx), name, 'user', { kind: 'promote_conflict', existing: inUser }, () =>
      base.promote(name, {
        ...(o.force ? { force: true } : {}),
        createdBy: who,
        authorize: ownerCheck(pol.snap, ctx.persona, name, 'promote'),
      }),
    );
    if (!r.ok) return refuse(r.kind, r.message, eventTypeOf(r.kind, 'forge.promoted'));
    const unrecorded = await record('forge.promoted', {
      ok: true,
      name,
      ...who,
      outcome: r.outcome,
      version: r.tool.version,
      digest: r.tool.digest,
    });
    if (unrecorded) {
      // A promote the log does not show did not happen: the user scope is put back as it was.
      const undone = r.outcome === 'unchanged' ? 'nothing was written' : await undoCreate(base, 'user', name, r.previous);
      return { ok: false, kind: AUDIT_UNAVAILABLE, message: `${unrecorded.message}; "${name}" was not promoted: ${undone}` };
    }
    if (r.outcome !== 'unchanged') notifyChanged(['user'], [name]);
    return { ok: true, tool: r.tool, outcome: r.outcome, ...(r.previous ? { previous: r.previous } : {}) };
  };

  const removeTool = async (name: string, o: { scope?: Scope } & CallContext = {}): Promise<ForgeResult> => {
    const ctx = context(o);
    const who = { persona: ctx.persona, session: ctx.session };
    const refuse = async (
      kind: string,
      message: string,
      extra: Record<string, unknown> = {},
      eventType = 'forge.removed',
    ): Promise<Refusal> => {
      const f = await record(eventType, {
        ok: false,
        name,
        ...who,
        ...(eventType !== 'forge.removed' ? { action: 'remove' } : {}),
        ...extra,
        kind,
        message,
      });
      return f ? { ok: false, kind: AUDIT_UNAVAILABLE, message: unaudited(f, kind, message), refused: kind } : { ok: false, kind, message };
    };
    if (closing) return refuse('internal', 'forge is shutting down; try again after it restarts');
    if (ctx.signal?.aborted) return refuse('cancelled', `${stopReason(ctx.signal)}; nothing was removed`);
    const down = await auditGate.ready();
    if (down) return { ok: false, kind: AUDIT_UNAVAILABLE, message: down.message };
    const bad = contextProblem(ctx);
    if (bad) return refuse('validation_failed', bad);
    if (o.scope === 'task' && !ctx.task) return refuse('validation_failed', 'scope "task" needs a task id (FORGE_TASK_ID or ctx.task)');
    const pol = policyNow();
    if (!pol.ok) return refuse(pol.kind, pol.message);
    const gate = checkManage(pol.snap, ctx, name, 'remove', 'forge.removed');
    if (gate) return refuse(gate.kind, gate.message, {}, gate.eventType);
    const scope = o.scope ?? resolveIn(await layers(ctx), name)?.scope;
    if (!scope) return refuse('unknown_tool', `no forged tool is named "${name}"; call forge_list to see the tools`);
    const r = await (await registryFor(scope, ctx)).remove(name, { scope, authorize: ownerCheck(pol.snap, ctx.persona, name, 'remove') });
    if (!r.ok) return refuse(r.kind, r.message, { scope }, eventTypeOf(r.kind, 'forge.removed'));
    const unrecorded = await record('forge.removed', {
      ok: true,
      name,
      ...who,
      scope,
      version: r.removed.version,
      digest: r.removed.digest,
    });
    if (unrecorded) {
      // A removal the log does not show did not happen: the removed version is made live again.
      const back = await (await registryFor(scope, ctx)).recover(name, r.removed.version, { scope, createdBy: r.removed.created_by });
      const undone = back.ok
        ? `it is live again as version ${back.tool.version}`
        : `it could not be restored (${back.message}); recover version ${r.removed.version} by hand`;
      return { ok: false, kind: AUDIT_UNAVAILABLE, message: `${unrecorded.message}; "${name}" was not removed: ${undone}` };
    }
    notifyChanged([scope], [name]);
    return { ok: true, tool: r.removed };
  };

  /** What runs.ts needs to serve `c`'s reads, or why `c` cannot read now. */
  const readDeps = async (c: CallContext): Promise<RunReadDeps | Refusal> => {
    const ctx = context(c);
    if (closing) return { ok: false, kind: 'internal', message: 'forge is shutting down; try again after it restarts' };
    const down = await auditGate.ready();
    if (down) return { ok: false, kind: AUDIT_UNAVAILABLE, message: down.message };
    const bad = contextProblem(ctx);
    if (bad) return { ok: false, kind: 'validation_failed', message: bad };
    return {
      runsDir: paths.runsDir,
      persona: ctx.persona,
      session: ctx.session,
      policy: policyNow,
      hitsWritten: () => hitsWritten,
      refused: (data) => record('run.read_refused', data),
    };
  };

  const forge: Forge = {
    paths,
    forgeTool: guarded(forgeTool),
    callTool: guarded(callTool),
    listTools,
    promoteTool: guarded(promoteTool),
    removeTool: guarded(removeTool),
    callCount: (name) => calls.get(name) ?? 0,
    readRun: guarded(async (runId, c = {}) => {
      const deps = await readDeps(c);
      return 'ok' in deps ? deps : readRun(deps, runId);
    }),
    readArtifact: guarded(async (runId, path, c = {}) => {
      const deps = await readDeps(c);
      return 'ok' in deps ? deps : readArtifact(deps, runId, path, c.maxBytes !== undefined ? { maxBytes: c.maxBytes } : {});
    }),
    auditTail: guarded(async (o = {}) => {
      const deps = await readDeps(o);
      if ('ok' in deps) return deps;
      const pol = policyNow();
      if (!pol.ok) return pol;
      await audit.flush();
      return readAuditTail({
        log: paths.auditLog,
        last: o.last ?? 50,
        ...(isOperator(pol.snap, deps.persona) ? {} : { persona: deps.persona }),
        ...(signingKey ? { publicKey: createPublicKey(signingKey) } : {}),
      });
    }),
    sandboxFacts(c = {}) {
      const ctx = context(c);
      const pol = policyNow();
      if (!pol.ok || contextProblem(ctx)) return { network: true };
      return { network: networkFor(pol.snap, ctx.persona).network === 'allow' };
    },
    on(event: 'audit' | 'toolsChanged', listener: (e: never) => void) {
      const set = (event === 'audit' ? auditListeners : changeListeners) as Set<(e: never) => void>;
      set.add(listener);
      return () => set.delete(listener);
    },
    async close(o = {}) {
      if (closing) return;
      closing = true;
      const graceMs = o.graceMs ?? 10_000;
      const deadline = Date.now() + graceMs;
      const tick = () => new Promise((r) => setTimeout(r, 10));
      while (active > 0 && Date.now() < deadline) await tick();
      // Past the grace period: stop the sandboxes still running; their calls then finish.
      const why = new Error(`forge is shutting down and the grace period of ${graceMs} ms ended`);
      for (const ac of running) ac.abort(why);
      while (active > 0) {
        for (const ac of running) ac.abort(why);
        await tick();
      }
      await Promise.all([...pendingAudit]);
      // The runtime probe writes its cache file under the home: nothing may write there after close().
      await runtimesReady.catch(() => {});
      if (stageDir) {
        discardPrebuilt(stageDir);
        rmSync(stageDir, { recursive: true, force: true });
      }
      await base.close();
      for (const r of scoped.values()) await (await r).close();
      auditClosed = true;
      await checkpoints.close().catch((err) => process.emitWarning(`forge: audit checkpoint failed: ${(err as Error).message}`));
      if (ownsAudit) await audit.close();
      else await audit.flush();
    },
  };
  return forge;
}

/**
 * Takes back a registry write (a forge or a promote) whose entry could not be written: a new tool
 * is removed, a replaced one's previous version made live again (its own creator kept). Says what
 * happened, for the refusal's message.
 */
async function undoCreate(reg: Registry, scope: Scope, name: string, previous: { version: number } | undefined): Promise<string> {
  const r = previous ? await reg.recover(name, previous.version, { scope }) : await reg.remove(name, { scope });
  if (r.ok) return previous ? `version ${previous.version} is live again` : 'the registry write was taken back';
  return `taking the registry write back failed too (${r.message}); remove or recover "${name}" in scope ${scope} by hand`;
}

/**
 * Why a call's signal was aborted, for its `cancelled` answer: the reason's message (forge serve
 * says "forge is shutting down (SIGTERM) and the grace period of 1000 ms ended"), else a plain
 * "the call was cancelled" (an abort() without a reason).
 */
function stopReason(signal: AbortSignal): string {
  const r: unknown = signal.reason;
  if (typeof r === 'string' && r !== '') return r;
  if (r instanceof Error && r.name !== 'AbortError' && r.message !== '') return r.message;
  return 'the call was cancelled';
}

class RefusalError extends Error {
  constructor(
    readonly kind: string,
    message: string,
    readonly eventType = 'forge.called',
  ) {
    super(message);
  }
}

/** A flat event with its string fields passed through {@link redactTextFolded}. */
function foldRedacted(e: object, secrets: SecretList): Record<string, unknown> {
  if (secrets.length === 0) return { ...e };
  return Object.fromEntries(Object.entries(e).map(([k, v]) => [k, typeof v === 'string' ? redactTextFolded(v, secrets) : v]));
}

/** What the sandbox copied out of the run's artifacts directory, for the manifest. */
function outputFacts(o: NonNullable<RunResult['outputs']>[number]): Record<string, unknown> {
  if (o.lost !== undefined) return { lost: o.lost };
  return {
    files: o.files,
    directories: o.directories,
    symlinks: o.symlinks,
    bytes: o.bytes,
    skipped: o.skipped,
    truncated: o.truncated,
    full: o.full,
  };
}

/** The end of a (redacted) stderr tail for a message, cut only after redacting. */
function tail(stderr: string, secrets: SecretList): string {
  const t = stderr.trim();
  return t ? `; stderr ends: ${excerpt(t, secrets, 600, 'end')}` : '';
}

/** Bytes and entries of a run's artifacts searched for secret values (the artifacts budget when policy sets one). */
function scrubLimits(budget: object): { maxBytes: number; maxEntries: number } {
  const cap = (budget as { artifacts_bytes?: unknown }).artifacts_bytes;
  return { maxBytes: typeof cap === 'number' && cap > 0 ? cap : DEFAULT_SCRUB_BYTES, maxEntries: 100_000 };
}
const DEFAULT_SCRUB_BYTES = 1 << 30;

/** {@link scrubArtifacts}, failing closed: artifacts that cannot be searched are all removed. */
async function scrubOrClear(dir: string, secrets: SecretList, limits: ReturnType<typeof scrubLimits>): Promise<ScrubReport> {
  try {
    return await scrubArtifacts(dir, secrets, limits);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { mode: 0o700 });
    const why = redactText((err as Error).message, secrets);
    return {
      files: [],
      renamed: [],
      removed: [{ path: '.', reason: `could not be searched for secret values: ${why}` }],
      scanned_bytes: 0,
    };
  }
}

/** Fields of an envelope's meta that only forge sets: a tool's own values for them are dropped. */
const FORGE_META_KEYS = [
  'run_id',
  'duration_ms',
  'cache',
  'sandbox',
  'seed_run',
  'stdout_truncated',
  'stdout_truncated_at_bytes',
  'stdout_total_bytes',
  'stdout_full_artifact',
  'policy_clamped',
  'files_dropped',
];

function withoutKeys(o: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (!keys.includes(k)) out[k] = v;
  return out;
}

/** `sha256:` over the canonical JSON of a call's input (what the audit log and manifests record). */
function inputDigest(input: unknown): string {
  return `sha256:${createHash('sha256')
    .update(stableStringify(input ?? null))
    .digest('hex')}`;
}

const MAX_AUDIT_STRING = 2000;
const MAX_AUDIT_ITEMS = 20;

/**
 * Audit data made safe to append whatever a caller sent: secret values redacted first (so no cut
 * below can show part of one), strings well-formed (a lone surrogate in a tool name must not
 * cost the entry) and at most 2000 characters, arrays at most 20 items (plus a count of the
 * rest), nesting at most 8 levels.
 */
function auditSafe(raw: unknown, secrets: SecretList): unknown {
  const v = secrets.length > 0 ? redactValue(raw, secrets) : raw;
  return isAuditSafe(v, 0) ? v : sanitize(v, 0);
}

/** Whether `v` is already within the bounds (the common case: nothing to copy). */
function isAuditSafe(v: unknown, depth: number): boolean {
  if (typeof v === 'string') return v.length <= MAX_AUDIT_STRING && v.isWellFormed();
  if (v === null || typeof v !== 'object') return typeof v !== 'number' || Number.isFinite(v);
  if (depth >= 8) return false;
  if (Array.isArray(v)) return v.length <= MAX_AUDIT_ITEMS && v.every((x) => isAuditSafe(x, depth + 1));
  for (const [k, x] of Object.entries(v)) if (x === undefined || !isAuditSafe(k, depth + 1) || !isAuditSafe(x, depth + 1)) return false;
  return true;
}

function sanitize(v: unknown, depth: number): unknown {
  if (typeof v === 'string') {
    const w = v.toWellFormed();
    return w.length > MAX_AUDIT_STRING ? `${w.slice(0, MAX_AUDIT_STRING)}… (${w.length - MAX_AUDIT_STRING} more characters)` : w;
  }
  if (v === null || typeof v !== 'object') return typeof v === 'number' && !Number.isFinite(v) ? null : v;
  if (depth >= 8) return '…';
  if (Array.isArray(v)) {
    const items = v.slice(0, MAX_AUDIT_ITEMS).map((x) => sanitize(x, depth + 1));
    if (v.length > MAX_AUDIT_ITEMS) items.push(`… ${v.length - MAX_AUDIT_ITEMS} more`);
    return items;
  }
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) if (x !== undefined) out[sanitize(k, depth + 1) as string] = sanitize(x, depth + 1);
  return out;
}
