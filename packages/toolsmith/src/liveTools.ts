/**
 * An operator's steps on a tool already live: retire it, or roll it back to the version its
 * previous proposal activated. The registry is changed first; the proposals' records follow.
 */
import type { StoredTool } from '@forge/registry';
import type { Refusal } from '@forge/runner';
import type { ToolsmithContext } from './context.js';
import type { Operator } from './contract.js';
import { approverRefusal } from './gate.js';
import type { Proposal } from './types.js';

/** See `Toolsmith.retire`. */
export async function retireTool(
  ctx: Pick<ToolsmithContext, 'forge' | 'proposals' | 'gate' | 'activeTool'>,
  name: string,
  op: Operator & { reason?: string },
): Promise<{ ok: true; tool: StoredTool; proposal?: Proposal } | Refusal> {
  // Retiring takes capability away: it works while paused or off (a kill switch must not keep a bad tool live).
  const g = await ctx.gate.check('default', 'retired', { pausable: false, needsEnabled: false });
  if (!g.ok) return g;
  const denied = approverRefusal(g.snap, op.by, 'retire tools');
  if (denied) return denied;
  const live = await ctx.activeTool(name);
  if (!live) return { ok: false, kind: 'unknown_tool', message: `no live tool "${name}" in this project to retire` };
  const owner = (await ctx.proposals.lineage(name)).find((p) => p.state === 'active');
  const r = await ctx.forge.setToolState(name, 'retired', {
    scope: 'project',
    from: ['active'],
    digest: live.digest,
    event: {
      type: 'toolsmith.retired',
      data: { by: op.by, ...(op.reason ? { reason: op.reason.slice(0, 1000) } : {}), ...(owner ? { id: owner.id } : {}) },
    },
  });
  if (!r.ok) return r;
  const moved = owner
    ? await ctx.proposals.transition(owner.id, ['active'], 'retired', { by: op.by, ...(op.reason ? { reason: op.reason } : {}) })
    : undefined;
  return { ok: true, tool: r.tool, ...(moved?.ok ? { proposal: moved.proposal } : {}) };
}

/** See `Toolsmith.rollback`. */
export async function rollbackTool(
  ctx: Pick<ToolsmithContext, 'forge' | 'proposals' | 'now' | 'gate' | 'record' | 'activeTool'>,
  name: string,
  op: Operator,
): Promise<{ ok: true; tool: StoredTool; proposal: Proposal; from?: Proposal } | Refusal> {
  const g = await ctx.gate.check('default', 'rolled back');
  if (!g.ok) return g;
  const denied = approverRefusal(g.snap, op.by, 'roll tools back');
  if (denied) return denied;
  const lineage = await ctx.proposals.lineage(name);
  const current = lineage[0];
  const previous = current?.state === 'active' ? lineage[1] : current?.state === 'retired' ? lineage[1] : undefined;
  if (!current || !previous)
    return {
      ok: false,
      kind: 'unknown_tool',
      message: `"${name}" has no earlier toolsmith version to roll back to (${lineage.length} activated so far)`,
    };
  const live = await ctx.activeTool(name);
  const made = await ctx.forge.forgeTool(previous.spec, {
    persona: previous.persona,
    session: previous.session,
    scope: 'project',
    overwrite: true,
    activation: { proposal: previous.id, approvedBy: op.by },
  });
  if (!made.ok) return made;
  const at = new Date(ctx.now()).toISOString();
  if (current.state === 'active')
    await ctx.proposals.transition(current.id, ['active'], 'retired', { by: op.by, reason: `rolled back to ${previous.id}` });
  const moved = await ctx.proposals.transition(previous.id, ['retired'], 'active', {
    by: op.by,
    reason: `rollback from ${current.id}`,
    change: () => ({ activated: { version: made.tool.version, digest: made.tool.digest, at, by: op.by } }),
  });
  if (!moved.ok) return { ok: false, kind: moved.kind, message: moved.message };
  const lost = await ctx.record('rolled_back', {
    name,
    by: op.by,
    from: current.id,
    to: previous.id,
    version: made.tool.version,
    digest: made.tool.digest,
    ...(live ? { replaced: { version: live.version, digest: live.digest } } : {}),
  });
  if (lost) return lost;
  return { ok: true, tool: made.tool, proposal: moved.proposal, from: current };
}
