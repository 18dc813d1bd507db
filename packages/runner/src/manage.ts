import type { DamagedTool, Registry, Scope, ToolState } from '@forge/registry';
import type { CallContext, ForgeResult, RemoveToolResult } from './api.js';
import { AUDIT_UNAVAILABLE } from './auditGate.js';
import { type Creator, creatorOf } from './caller.js';
import type { Engine } from './engine.js';
import { checkManage, eventTypeOf, ownerCheck } from './gates.js';
import { type Refusal, refusalKind } from './refusal.js';
import { refuse } from './refuse.js';

/** The ports of promote, remove and state changes: who calls, the log, the policy, the registries. */
export type ManagePorts = Pick<
  Engine,
  | 'context'
  | 'admit'
  | 'record'
  | 'unaudited'
  | 'policyNow'
  | 'base'
  | 'layers'
  | 'resolveIn'
  | 'damagedIn'
  | 'registryFor'
  | 'wireClaims'
  | 'notifyChanged'
>;

/** What {@link setToolState} takes besides the name and the state. */
export type SetStateOptions = {
  scope?: Scope;
  from?: readonly ToolState[];
  digest?: string;
  event?: { type: string; data: Record<string, unknown> };
} & CallContext;

/** Promote (project → user scope), remove and state changes, over one engine. */
export function makeManage(e: ManagePorts) {
  return {
    promoteTool: (name: string, o: { force?: boolean } & CallContext = {}) => promoteTool(e, name, o),
    removeTool: (name: string, o: { scope?: Scope } & CallContext = {}) => removeTool(e, name, o),
    setToolState: (name: string, toState: ToolState, o: SetStateOptions) => setToolState(e, name, toState, o),
  };
}

/**
 * Remove and promote pass the gates of forging (persona ACL, forbidden names, allow-rules,
 * persona namespace; see gates.ts), then the registry asks, under the name's lock, whether the
 * tool is the persona's: its namespace, its creator, or an operator (policy operator_personas).
 */
async function promoteTool(
  e: ManagePorts,
  name: string,
  o: { force?: boolean } & CallContext,
): Promise<ForgeResult & { outcome?: string }> {
  const ctx = e.context(o);
  const who = creatorOf(ctx);
  const refused = (r: { ok: false; kind: string; message: string }, eventType = 'forge.promoted'): Promise<Refusal> =>
    refuse(
      e,
      { ok: false, kind: refusalKind(r.kind), message: r.message },
      {
        type: eventType,
        facts: { name, ...who, ...(eventType !== 'forge.promoted' ? { action: 'promote' } : {}) },
      },
    );
  const no = await e.admit(ctx, 'nothing was promoted');
  if (no) return refused(no);
  const pol = e.policyNow();
  if (!pol.ok) return refused(pol);
  const gate = checkManage(pol.snap, ctx, name, 'promote', 'forge.promoted');
  if (gate) return refused(gate, gate.eventType);
  const { base } = e;
  const hit = base.resolve(name);
  const inUser = hit !== undefined && (hit.scope === 'user' || hit.shadows.includes('user'));
  const r = await e.wireClaims.hold(await e.layers(ctx), name, 'user', { kind: 'promote_conflict', existing: inUser }, () =>
    base.promote(name, {
      ...(o.force ? { force: true } : {}),
      createdBy: who,
      authorize: ownerCheck(pol.snap, ctx.persona, name, 'promote'),
    }),
  );
  if (!r.ok) return refused(r, eventTypeOf(refusalKind(r.kind), 'forge.promoted'));
  const unrecorded = await e.record('forge.promoted', {
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
  if (r.outcome !== 'unchanged') e.notifyChanged(['user'], [name]);
  return { ok: true, tool: r.tool, outcome: r.outcome, ...(r.previous ? { previous: r.previous } : {}) };
}

/** Removes a tool (or the damaged record the name resolves to) under the gates of {@link promoteTool}. */
async function removeTool(e: ManagePorts, name: string, o: { scope?: Scope } & CallContext): Promise<RemoveToolResult> {
  const ctx = e.context(o);
  const who = creatorOf(ctx);
  const refused = (
    r: { ok: false; kind: string; message: string },
    extra: Record<string, unknown> = {},
    eventType = 'forge.removed',
  ): Promise<Refusal> =>
    refuse(
      e,
      { ok: false, kind: refusalKind(r.kind), message: r.message },
      {
        type: eventType,
        facts: { name, ...who, ...(eventType !== 'forge.removed' ? { action: 'remove' } : {}), ...extra },
      },
    );
  const no = await e.admit(ctx, 'nothing was removed');
  if (no) return refused(no);
  if (o.scope === 'task' && !ctx.task)
    return refused({ ok: false, kind: 'validation_failed', message: 'scope "task" needs a task id (FORGE_TASK_ID or ctx.task)' });
  const pol = e.policyNow();
  if (!pol.ok) return refused(pol);
  const gate = checkManage(pol.snap, ctx, name, 'remove', 'forge.removed');
  if (gate) return refused(gate, {}, gate.eventType);
  const visible = await e.layers(ctx);
  // A damaged record the name resolves to is what a remove without a scope takes away.
  const scope = o.scope ?? e.resolveIn(visible, name)?.scope ?? e.damagedIn(visible, name)?.scope;
  if (!scope)
    return refused({ ok: false, kind: 'unknown_tool', message: `no forged tool is named "${name}"; call forge_list to see the tools` });
  const r = await (await e.registryFor(scope, ctx)).remove(name, { scope, authorize: ownerCheck(pol.snap, ctx.persona, name, 'remove') });
  if (!r.ok) return refused(r, { scope }, eventTypeOf(refusalKind(r.kind), 'forge.removed'));
  if (r.damaged) return removedDamaged(e, r.damaged, who);
  const unrecorded = await e.record('forge.removed', {
    ok: true,
    name,
    ...who,
    scope,
    version: r.removed.version,
    digest: r.removed.digest,
  });
  if (unrecorded) {
    // A removal the log does not show did not happen: the removed version is made live again.
    const back = await (await e.registryFor(scope, ctx)).recover(name, r.removed.version, { scope, createdBy: r.removed.created_by });
    const undone = back.ok
      ? `it is live again as version ${back.tool.version}`
      : `it could not be restored (${back.message}); recover version ${r.removed.version} by hand`;
    return { ok: false, kind: AUDIT_UNAVAILABLE, message: `${unrecorded.message}; "${name}" was not removed: ${undone}` };
  }
  e.notifyChanged([scope], [name]);
  return { ok: true, tool: r.removed };
}

/**
 * Audits the removal of a damaged record (`forge.removed` with `damaged`: its path and what was
 * wrong; it had no readable version or digest). A removal the log does not take cannot be put
 * back through the registry (a damaged record is no version to recover): the answer says where
 * the file is kept.
 */
async function removedDamaged(e: Pick<ManagePorts, 'record' | 'notifyChanged'>, d: DamagedTool, who: Creator): Promise<RemoveToolResult> {
  const unrecorded = await e.record('forge.removed', {
    ok: true,
    name: d.name,
    ...who,
    scope: d.scope,
    damaged: { path: d.path, reason: d.reason },
  });
  e.notifyChanged([d.scope], [d.name]);
  if (unrecorded) {
    return {
      ok: false,
      kind: AUDIT_UNAVAILABLE,
      message: `${unrecorded.message}; the damaged record of "${d.name}" (${d.scope} scope, ${d.path}) was removed all the same and is kept in its version history, but the log does not show it`,
    };
  }
  return { ok: true, damaged: d };
}

/**
 * Stamps a state on a forged tool's live version (the toolsmith's retire and reactivation). The
 * entry `o.event` names is written after the registry write; a write the log does not take is
 * taken back (the previous state stamped again).
 */
async function setToolState(e: ManagePorts, name: string, toState: ToolState, o: SetStateOptions): Promise<ForgeResult> {
  const ctx = e.context(o);
  const no = await e.admit(ctx, 'nothing was changed');
  if (no) return { ok: false, kind: no.kind, message: no.message };
  if (o.event && !/^toolsmith\.[a-z_]{1,64}$/.test(o.event.type))
    throw new TypeError(`setToolState: "${o.event.type}" is not a toolsmith.* event type`);
  const scope = o.scope ?? e.resolveIn(await e.layers(ctx), name)?.scope ?? 'project';
  if (scope === 'task' && !ctx.task) return { ok: false, kind: 'validation_failed', message: 'scope "task" needs a task id' };
  const reg = await e.registryFor(scope, ctx);
  const r = await reg.setState(name, toState, { scope, ...(o.from ? { from: o.from } : {}), ...(o.digest ? { digest: o.digest } : {}) });
  if (!r.ok) return { ok: false, kind: refusalKind(r.kind), message: r.message };
  if (o.event) {
    const unrecorded = await e.record(o.event.type, {
      ...o.event.data,
      name,
      scope,
      version: r.tool.version,
      digest: r.tool.digest,
      state: toState,
    });
    if (unrecorded) {
      const before = r.previous
        ? (await reg.versions(name, { scope })).find((v) => v.version === r.previous?.version)?.tool?.state
        : undefined;
      const back = before ? await reg.setState(name, before, { scope }) : undefined;
      const undone = back?.ok ? `it is ${before} again` : `its state could not be put back; set it by hand`;
      return { ok: false, kind: AUDIT_UNAVAILABLE, message: `${unrecorded.message}; "${name}" was not made ${toState}: ${undone}` };
    }
  }
  e.notifyChanged([scope], [name]);
  return { ok: true, tool: r.tool, ...(r.previous ? { previous: r.previous } : {}) };
}

/**
 * Takes back a registry write (a forge or a promote) whose entry could not be written: a new tool
 * is removed, a replaced one's previous version made live again (its own creator kept). Says what
 * happened, for the refusal's message.
 */
export async function undoCreate(reg: Registry, scope: Scope, name: string, previous: { version: number } | undefined): Promise<string> {
  const r = previous ? await reg.recover(name, previous.version, { scope }) : await reg.remove(name, { scope });
  if (r.ok) return previous ? `version ${previous.version} is live again` : 'the registry write was taken back';
  return `taking the registry write back failed too (${r.message}); remove or recover "${name}" in scope ${scope} by hand`;
}
