import { rmSync } from 'node:fs';
import { tailLog } from '@forge/audit-chain';
import { bindRoots, networkFor, secretDelivery } from '@forge/policy';
import { agentTools } from './agentTools.js';
import type { Forge, ForgeOptions } from './api.js';
import { AUDIT_UNAVAILABLE } from './auditGate.js';
import { makeCallTool } from './call/pipeline.js';
import { makeTrialCall, runtimeLabel } from './call/trial.js';
import { work } from './call/work.js';
import { callerOf } from './caller.js';
import { describeTools } from './cards.js';
import { createEngine, type Engine, type EngineState } from './engine.js';
import { makeForgeTool } from './forgeTool.js';
import { listDamaged, listSourced, listTools } from './listing.js';
import { makeManage } from './manage.js';
import { auditTailFor, readArtifactFor, readRunFor } from './reads.js';
import { sandboxAsked, sandboxModule } from './sandboxModule.js';

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
  await attachSources(e);
  e.opened();
  const guarded = guard(e.state);
  const { promoteTool, removeTool, setToolState } = makeManage(e);
  const forge: Forge = {
    paths: e.paths,
    forgeTool: guarded(makeForgeTool(e)),
    callTool: guarded(makeCallTool(e)),
    listTools: (o) => listTools(e, o),
    listDamaged: (o) => listDamaged(e, o),
    listSourced: (o) => listSourced(e, o),
    describeTools: (o) => describeTools(e, o),
    agentTools: (ctx) => agentTools(forge, ctx),
    promoteTool: guarded(promoteTool),
    removeTool: guarded(removeTool),
    trialCall: guarded(makeTrialCall(e)),
    setToolState: guarded(setToolState),
    runtimeOf: (name) => runtimeLabel(e, name),
    caller: (c = {}) => callerOf(e.context(c)),
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
    readRun: guarded((runId, c = {}) => readRunFor(e, runId, c)),
    readArtifact: guarded((runId, path, c = {}) => readArtifactFor(e, runId, path, c)),
    auditTail: guarded((o = {}) => auditTailFor(e, o)),
    sandboxFacts(c = {}) {
      const ctx = e.context(c);
      const pol = e.policyNow();
      if (!pol.ok || e.contextProblem(ctx)) return { network: true };
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
  return forge;
}

/** Counts each operation as in flight until it settles, so close() waits for it. */
function guard(state: EngineState) {
  return <A extends unknown[], R>(op: (...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      state.active++;
      try {
        return await op(...args);
      } finally {
        state.active--;
      }
    };
}

/** Hands each tool source (the gateway) what it may use of the engine, and hears its changes. */
async function attachSources(e: Engine): Promise<void> {
  for (const source of e.sources) {
    await source.attach({
      record: (type, data) => e.record(type, data),
      lastAudited: (type) => lastAudited(e, type),
      bindRoots: () => {
        const pol = e.policyNow();
        return pol.ok ? bindRoots(pol.snap, { project: e.paths.project }) : [];
      },
      secretDelivery: (names) => {
        const pol = e.policyNow();
        return pol.ok ? secretDelivery(pol.snap, names) : { env: [...names], inject: [] };
      },
      ...(e.options.upstreamCa ? { upstreamCa: e.options.upstreamCa } : {}),
      home: e.paths.home,
      project: e.paths.project,
    });
    source.onChange((names) => e.notifyChanged([], names));
  }
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
  e.dropHeld();
  await Promise.all([...e.pendingAudit]);
  // The runtime probe writes its cache file under the home: nothing may write there after close().
  await e.runtimesAsked()?.catch(() => {});
  // Every call has been answered; the sandboxes of the last ones may still be going away (none
  // exist where the sandbox module was never loaded).
  if (sandboxAsked()) {
    const sandbox = await sandboxModule();
    await sandbox.sandboxesGone();
    if (state.stageDir) {
      sandbox.discardPrebuilt(state.stageDir);
      rmSync(state.stageDir, { recursive: true, force: true });
    }
  }
  await e.base.close();
  for (const r of e.scoped.values()) await (await r).close();
  state.auditClosed = true;
  await e.checkpoints.close().catch((err) => process.emitWarning(`forge: audit checkpoint failed: ${(err as Error).message}`));
  if (e.ownsAudit) await e.audit.close();
  else await e.audit.flush();
}

/** The data of the log's last entry of `type` (the log read from its start: sources ask rarely). */
async function lastAudited(e: Pick<Engine, 'audit' | 'paths'>, type: string): Promise<Record<string, unknown> | undefined> {
  await e.audit.flush();
  let found: Record<string, unknown> | undefined;
  for await (const entry of tailLog(e.paths.auditLog)) {
    if (entry.type === type && entry.data !== null && typeof entry.data === 'object' && !Array.isArray(entry.data))
      found = entry.data as Record<string, unknown>;
  }
  return found;
}
