import { createPublicKey } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tailLog } from '@forge/audit-chain';
import { bindRoots, checkPersonaAcl, isOperator, networkFor } from '@forge/policy';
import { type DamagedTool, type ListedTool, type Scope, wireName } from '@forge/registry';
import { discardPrebuilt } from '@forge/sandbox';
import { type CallContext, type Forge, type ForgeOptions, META_TOOLS, type Refusal } from './api.js';
import { AUDIT_UNAVAILABLE } from './auditGate.js';
import { readAuditTail } from './auditTail.js';
import { makeCallTool } from './call/pipeline.js';
import { sourceContext } from './call/resolve.js';
import { reportShadow, sourceNamespace } from './call/shadow.js';
import { makeTrialCall, runtimeLabel } from './call/trial.js';
import { work } from './call/work.js';
import { createEngine, type Engine } from './engine.js';
import { makeForgeTool } from './forgeTool.js';
import { makeManage } from './manage.js';
import { type RunReadDeps, readArtifact, readRun } from './runs.js';
import type { SourcedTool } from './sources.js';
import { withWireConflicts } from './wireNames.js';

export {
  type CallContext,
  type DispatchOptions,
  type Forge,
  type ForgeEvent,
  type ForgeOptions,
  type ForgeResult,
  type ForgeToolOptions,
  META_TOOLS,
  type Refusal,
  type RemoveToolResult,
  type ToolsChanged,
  type TrialOptions,
  type TrialResult,
  type WorkOptions,
} from './api.js';

/**
 * Creates the engine: the registry over forge's scopes, the hot-reloaded policy, the audit log,
 * the result cache, the sandbox and the tool sources. Fails (throws) only when the home or the
 * audit log cannot be opened; a host that cannot sandbox is reported per call (`sandbox_unavailable`).
 *
 * The pipelines live in their own modules over one engine (engine.ts): forging (forgeTool.ts),
 * calling (call/pipeline.ts: resolve → gates → validate → execute → record, with the sandbox
 * and source executors in executors/), promote and remove (manage.ts), and the reads of runs and
 * of the audit log (runs.ts, auditTail.ts). This function composes them.
 */
export async function createForge(options: ForgeOptions = {}): Promise<Forge> {
  const e = await createEngine(options);
  const { paths, state, context, contextProblem } = e;

  for (const source of e.sources) {
    await source.attach({
      record: (type, data) => e.record(type, data),
      lastAudited: (type) => lastAudited(e, type),
      bindRoots: () => {
        const pol = e.policyNow();
        return pol.ok ? bindRoots(pol.snap, { project: paths.project }) : [];
      },
      home: paths.home,
      project: paths.project,
    });
    source.onChange((names) => e.notifyChanged([], names));
  }

  const forgeTool = makeForgeTool(e);
  const callTool = makeCallTool(e);
  const { promoteTool, removeTool, setToolState } = makeManage(e);
  const trialCall = makeTrialCall(e);

  /** Counts `op` as in flight until it settles, so close() waits for it. */
  const guarded =
    <A extends unknown[], R>(op: (...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      state.active++;
      try {
        return await op(...args);
      } finally {
        state.active--;
      }
    };

  /** The registries `ctx` sees for `scope`, or all of them, loaded. */
  const listTools = async (o: { scope?: Scope } & CallContext = {}): Promise<readonly ListedTool[]> => {
    const ctx = context(o);
    if (contextProblem(ctx)) return [];
    if (o.scope) {
      if (o.scope === 'task' && !ctx.task) return [];
      return (await e.registryFor(o.scope, ctx)).list({ scope: o.scope }).filter((t) => {
        const owned = sourceNamespace(e, t.tool.name);
        if (owned) reportShadow(e, t.tool, owned);
        return !owned;
      });
    }
    const seen = new Map<string, ListedTool>();
    for (const r of await e.layers(ctx)) for (const t of r.list()) if (!seen.has(t.tool.name)) seen.set(t.tool.name, t);
    // A forged tool in a source's namespace is never listed (nor called): the source's is.
    for (const [name, t] of seen) {
      const owned = sourceNamespace(e, name);
      if (!owned) continue;
      seen.delete(name);
      reportShadow(e, t.tool, owned);
    }
    // A persona sees the tools its ACL lets it call (the call would be refused anyway).
    // Wire conflicts before the ACL filter: a call by a wire name resolves regardless of the ACL.
    return withWireConflicts([...seen.values()])
      .filter((t) => checkPersonaAcl(ctx.acl, ctx.persona, t.tool.name, META_TOOLS).ok)
      .sort((a, b) => (a.tool.name < b.tool.name ? -1 : 1));
  };

  /** The damaged records `ctx` sees for `scope`, or those its names resolve to (see `Forge.listDamaged`). */
  const listDamaged = async (o: { scope?: Scope } & CallContext = {}): Promise<readonly DamagedTool[]> => {
    const ctx = context(o);
    if (contextProblem(ctx)) return [];
    if (o.scope) {
      if (o.scope === 'task' && !ctx.task) return [];
      return (await e.registryFor(o.scope, ctx)).listDamaged({ scope: o.scope });
    }
    const regs = await e.layers(ctx);
    const out: DamagedTool[] = [];
    for (const r of regs)
      for (const d of r.listDamaged()) {
        // As listTools: what a name resolves to, outside the sources' namespaces, within the ACL.
        if (e.damagedIn(regs, d.name) !== d || sourceNamespace(e, d.name)) continue;
        if (checkPersonaAcl(ctx.acl, ctx.persona, d.name, META_TOOLS).ok) out.push(d);
      }
    return out.sort((a, b) => (a.name < b.name ? -1 : 1));
  };

  /** The sources' tools `ctx` can call, leaving out any whose forge or wire name a forged tool or a meta-tool has. */
  const listSourced = async (o: CallContext = {}): Promise<readonly SourcedTool[]> => {
    const ctx = context(o);
    if (contextProblem(ctx) || e.sources.length === 0) return [];
    const taken = new Set<string>(META_TOOLS);
    for (const t of await listTools(o)) {
      taken.add(t.tool.name);
      taken.add(wireName(t.tool.name));
    }
    const out: SourcedTool[] = [];
    for (const source of e.sources) {
      for (const t of await source.list(sourceContext(ctx))) {
        if (taken.has(t.name) || taken.has(wireName(t.name))) continue;
        if (!checkPersonaAcl(ctx.acl, ctx.persona, t.name, META_TOOLS).ok) continue;
        taken.add(t.name);
        taken.add(wireName(t.name));
        out.push(t);
      }
    }
    return out.sort((a, b) => (a.name < b.name ? -1 : 1));
  };

  /** What runs.ts needs to serve `c`'s reads, or why `c` cannot read now. */
  const readDeps = async (c: CallContext): Promise<RunReadDeps | Refusal> => {
    const ctx = context(c);
    if (state.closing) return { ok: false, kind: 'internal', message: 'forge is shutting down; try again after it restarts' };
    const down = await e.auditGate.ready();
    if (down) return { ok: false, kind: AUDIT_UNAVAILABLE, message: down.message };
    const bad = contextProblem(ctx);
    if (bad) return { ok: false, kind: 'validation_failed', message: bad };
    return {
      runs: e.runs,
      persona: ctx.persona,
      session: ctx.session,
      policy: e.policyNow,
      hitsWritten: () => state.hitsWritten,
      refused: (data) => e.record('run.read_refused', data),
    };
  };

  return {
    paths,
    forgeTool: guarded(forgeTool),
    callTool: guarded(callTool),
    listTools,
    listDamaged,
    listSourced,
    promoteTool: guarded(promoteTool),
    removeTool: guarded(removeTool),
    trialCall: guarded(trialCall),
    setToolState: guarded(setToolState),
    runtimeOf: (name) => runtimeLabel(e, name),
    caller(c = {}) {
      const ctx = context(c);
      return { persona: ctx.persona, session: ctx.session, ...(ctx.task ? { task: ctx.task } : {}) };
    },
    releaseSession: (session) => e.releaseSession(session),
    policy() {
      const pol = e.policyNow();
      return pol.ok ? { ok: true, snapshot: pol.snap } : pol;
    },
    recordEvent: guarded(async (type, data) => {
      if (!/^toolsmith\.[a-z_]{1,64}$/.test(type))
        throw new TypeError(`recordEvent: "${type}" is not a toolsmith.* event type; the engine writes its own events`);
      const f = await e.record(type, data);
      return f ? { ok: false, kind: AUDIT_UNAVAILABLE, message: f.message } : undefined;
    }),
    callCount: (name) => e.calls.get(name) ?? 0,
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
      const pol = e.policyNow();
      if (!pol.ok) return pol;
      await e.audit.flush();
      return readAuditTail({
        log: paths.auditLog,
        last: o.last ?? 50,
        ...(isOperator(pol.snap, deps.persona) ? {} : { persona: deps.persona }),
        ...(e.signingKey ? { publicKey: createPublicKey(e.signingKey) } : {}),
      });
    }),
    sandboxFacts(c = {}) {
      const ctx = context(c);
      const pol = e.policyNow();
      if (!pol.ok || contextProblem(ctx)) return { network: true };
      return { network: networkFor(pol.snap, ctx.persona).network === 'allow' };
    },
    on(event: 'audit' | 'toolsChanged', listener: (ev: never) => void) {
      const set = (event === 'audit' ? e.auditListeners : e.changeListeners) as Set<(ev: never) => void>;
      set.add(listener);
      return () => set.delete(listener);
    },
    work: guarded((o) => work(e, o)),
    close: (o = {}) => close(e, o.graceMs ?? 10_000),
  };
}

/** Waits for operations in flight (aborting their runs after the grace period), then closes everything. */
async function close(e: Engine, graceMs: number): Promise<void> {
  const { state } = e;
  if (state.closing) return;
  state.closing = true;
  const deadline = Date.now() + graceMs;
  const tick = () => new Promise((r) => setTimeout(r, 10));
  while (state.active > 0 && Date.now() < deadline) await tick();
  // Past the grace period: stop the runs still going; their calls then finish.
  const why = new Error(`forge is shutting down and the grace period of ${graceMs} ms ended`);
  for (const ac of e.running) ac.abort(why);
  while (state.active > 0) {
    for (const ac of e.running) ac.abort(why);
    await tick();
  }
  for (const source of e.sources) {
    await source
      .close()
      .catch((err: unknown) => process.emitWarning(`forge: closing the ${source.kind} failed: ${(err as Error).message}`));
  }
  await Promise.all([...e.pendingAudit]);
  // The runtime probe writes its cache file under the home: nothing may write there after close().
  await e.runtimesReady.catch(() => {});
  if (state.stageDir) {
    discardPrebuilt(state.stageDir);
    rmSync(state.stageDir, { recursive: true, force: true });
  }
  await e.base.close();
  for (const r of e.scoped.values()) await (await r).close();
  state.auditClosed = true;
  await e.checkpoints.close().catch((err) => process.emitWarning(`forge: audit checkpoint failed: ${(err as Error).message}`));
  if (e.ownsAudit) await e.audit.close();
  else await e.audit.flush();
}

/** The data of the log's last entry of `type` (the log read from its start: sources ask rarely). */
async function lastAudited(e: Engine, type: string): Promise<Record<string, unknown> | undefined> {
  await e.audit.flush();
  let found: Record<string, unknown> | undefined;
  for await (const entry of tailLog(e.paths.auditLog)) {
    if (entry.type === type && entry.data !== null && typeof entry.data === 'object' && !Array.isArray(entry.data))
      found = entry.data as Record<string, unknown>;
  }
  return found;
}
