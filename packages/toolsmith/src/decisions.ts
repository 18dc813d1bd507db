/**
 * An approver's decisions on a proposal: approve (checked again under the policy now, claimed
 * once, validated again when what it was validated under changed, then forged live and its
 * record moved to active) and reject. Both are one-shot: racing deciders get exactly one outcome.
 */
import { checkCapability, checkNamespace, checkToolName, type PolicySnapshot } from '@forge/policy';
import type { StoredTool } from '@forge/registry';
import type { Refusal } from '@forge/runner';
import type { ToolsmithContext } from './context.js';
import type { Operator } from './contract.js';
import { approverRefusal } from './gate.js';
import { validateAndRecord } from './propose.js';
import type { UpdateResult } from './stores.js';
import type { Proposal } from './types.js';
import { specDigest } from './validate.js';

/** What approving uses. */
type ApproveContext = Pick<ToolsmithContext, 'forge' | 'proposals' | 'now' | 'warn' | 'gate' | 'damaged' | 'record' | 'activeTool'>;

/** What `Toolsmith.approve` answers when the tool went live. */
type Approved = { ok: true; proposal: Proposal; tool: StoredTool; revalidated: boolean };

/** See `Toolsmith.approve`. */
export async function approveProposal(ctx: ApproveContext, id: string, op: Operator): Promise<Approved | Refusal> {
  const g = await ctx.gate.check('default', 'approved');
  if (!g.ok) return g;
  const denied = approverRefusal(g.snap, op.by, 'approve proposals');
  if (denied) return denied;
  const p = await ctx.damaged.read(ctx.proposals, id);
  if (!p) return ctx.damaged.refusal(id);
  const approvable = await checkApprovable(ctx, g.snap, p, op);
  if (!approvable.ok) return approvable;
  // One approval ever: racing approvers get exactly one activation.
  if (!(await ctx.proposals.claim(id, op.by))) {
    const again = await ctx.proposals.get(id);
    return {
      ok: false,
      kind: 'state_conflict',
      message: `proposal ${id} is already being approved or was approved (${again?.state ?? 'unknown'}); nothing was done`,
    };
  }
  const made = await forgeClaimed(ctx, g.snap, p, op, approvable.live);
  if (!made.ok) return made;
  return recordActivation(ctx, p, op, made);
}

/** Why `p` may not be approved by `op` under the policy now, or the live tool it would replace. */
async function checkApprovable(
  ctx: Pick<ToolsmithContext, 'activeTool'>,
  snap: PolicySnapshot,
  p: Proposal,
  op: Operator,
): Promise<{ ok: true; live: StoredTool | undefined } | Refusal> {
  const id = p.id;
  if (p.persona === op.by)
    return { ok: false, kind: 'policy_denied', message: `"${op.by}" proposed ${id} and may not approve it; another approver must` };
  if (p.state !== 'validated')
    return {
      ok: false,
      kind: 'state_conflict',
      message: `proposal ${id} is ${p.state}, not validated; only a validated proposal can be approved${p.state === 'failed' ? ` (it failed: ${p.validation?.summary})` : ''}`,
    };
  // The current policy, not the one the proposal was validated under.
  const allowed = checkCapability(snap, p.capability);
  if (!allowed.ok) return allowed as Refusal;
  for (const d of [checkToolName(snap, p.name), checkNamespace(snap, p.persona, p.name)]) if (!d.ok) return d as Refusal;
  const live = await ctx.activeTool(p.name);
  if ((live?.digest ?? null) !== (p.replaces?.digest ?? null))
    return {
      ok: false,
      kind: 'state_conflict',
      message: `the live "${p.name}" changed since ${id} was proposed (${live ? `now version ${live.version}` : 'now none'}); the proposal must be made again against it`,
    };
  return { ok: true, live };
}

/**
 * With the approval claimed: validates `p` again if its policy or runtime changed, re-reads the
 * gate, audits the approval and forges the tool live. Any refusal on the way gives the claim back.
 */
async function forgeClaimed(
  ctx: ApproveContext,
  snap: PolicySnapshot,
  p: Proposal,
  op: Operator,
  live: StoredTool | undefined,
): Promise<{ ok: true; tool: StoredTool; revalidated: boolean } | Refusal> {
  const id = p.id;
  let revalidated = false;
  let current = p;
  const release = async (why: string, r: Refusal): Promise<Refusal> => {
    await ctx.proposals.release(id);
    ctx.warn(`approval of ${id} was taken back: ${why}`);
    return r;
  };
  const runtimeNow = await ctx.forge.runtimeOf(p.spec.runtime).catch((err: Error) => `unavailable (${err.message})`);
  // What the approver reviewed is what goes live: a spec that changed after validation (its
  // file edited) is refused, never validated again under the same approval.
  if (p.validation?.spec_digest !== specDigest(p.spec))
    return release('its spec changed after validation', {
      ok: false,
      kind: 'state_conflict',
      message: `proposal ${id}'s spec is not the one validated (${p.validation?.spec_digest ?? 'none'}, now ${specDigest(p.spec)}): its file was changed; propose it again`,
    });
  // Validated again when what it was validated under changed: the policy or the runtime.
  if (p.validation?.policy_digest !== snap.digest || p.validation?.runtime !== runtimeNow) {
    revalidated = true;
    const again = await validateAndRecord(ctx, p, snap, live, ['validated']);
    if (!again.ok) return release('validation could not run', again);
    current = again.proposal;
    if (current.state !== 'validated') {
      await ctx.proposals.release(id);
      return {
        ok: false,
        kind: 'validation_failed',
        message: `the policy or the runtime changed since ${id} was validated, and it fails validation now: ${current.validation?.summary}`,
      };
    }
  }
  // Re-read at every step: a kill switch set while validation ran stops the activation.
  const still = await ctx.gate.check('default', 'approved');
  if (!still.ok) return release('the toolsmith was paused or turned off', still);
  const lostApproval = await ctx.record('approved', {
    id,
    name: p.name,
    by: op.by,
    via: op.via ?? 'cli',
    revalidated,
    spec_digest: specDigest(current.spec),
    policy: still.snap.digest,
  });
  if (lostApproval) return release('the audit log did not take the approval', lostApproval);
  const made = await ctx.forge.forgeTool(current.spec, {
    persona: p.persona,
    session: p.session,
    scope: 'project',
    overwrite: true,
    activation: { proposal: id, approvedBy: op.by },
  });
  if (!made.ok) return release(`the forge pipeline refused it: ${made.kind}`, made);
  return { ok: true, tool: made.tool, revalidated };
}

/**
 * The tool is live now (the registry decides): the proposal's record follows it, the proposal it
 * replaces is retired, and the log says so even when the record cannot be written.
 */
async function recordActivation(
  ctx: Pick<ToolsmithContext, 'proposals' | 'now' | 'warn' | 'record'>,
  p: Proposal,
  op: Operator,
  made: { tool: StoredTool; revalidated: boolean },
): Promise<Approved | Refusal> {
  const id = p.id;
  const at = new Date(ctx.now()).toISOString();
  let moved: UpdateResult | undefined;
  let recordError: string | undefined;
  for (let attempt = 0; attempt < 3 && !moved?.ok; attempt++) {
    try {
      moved = await ctx.proposals.transition(id, ['validated'], 'active', {
        by: op.by,
        change: () => ({ activated: { version: made.tool.version, digest: made.tool.digest, at, by: op.by } }),
      });
      if (!moved.ok) break;
    } catch (err) {
      recordError = (err as Error).message;
    }
  }
  if (p.replaces?.proposal)
    await ctx.proposals
      .transition(p.replaces.proposal, ['active'], 'retired', { by: op.by, reason: `replaced by ${id}` })
      .catch((err: Error) => ctx.warn(`proposal ${p.replaces?.proposal} could not be marked retired: ${err.message}`));
  const lost = await ctx.record('activated', {
    id,
    name: p.name,
    by: op.by,
    version: made.tool.version,
    digest: made.tool.digest,
    ...(p.replaces ? { replaced: p.replaces } : {}),
  });
  if (lost) return lost;
  if (!moved?.ok)
    return {
      ok: false,
      kind: 'internal',
      message: `"${p.name}" is live as version ${made.tool.version} (approved by ${op.by}, audited), but proposal ${id}'s record could not be updated (${moved?.message ?? recordError ?? 'unknown error'}); retire the tool with forge toolsmith retire ${p.name} if it should not stay live`,
    };
  return { ok: true, proposal: moved.proposal, tool: made.tool, revalidated: made.revalidated };
}

/** See `Toolsmith.reject`. */
export async function rejectProposal(
  ctx: Pick<ToolsmithContext, 'proposals' | 'gate' | 'damaged' | 'record'>,
  id: string,
  op: Operator & { reason: string },
): Promise<{ ok: true; proposal: Proposal } | Refusal> {
  const g = await ctx.gate.check('default', 'rejected', { pausable: false, needsEnabled: false });
  if (!g.ok) return g;
  const denied = approverRefusal(g.snap, op.by, 'reject proposals');
  if (denied) return denied;
  if (typeof op.reason !== 'string' || op.reason.trim() === '')
    return { ok: false, kind: 'validation_failed', message: 'a rejection needs a reason (--reason "…"): the proposer sees it' };
  const p = await ctx.damaged.read(ctx.proposals, id);
  if (!p) return ctx.damaged.refusal(id);
  if (!['pending', 'validated', 'failed'].includes(p.state))
    return {
      ok: false,
      kind: 'state_conflict',
      message: `proposal ${id} is ${p.state}; only a pending, validated or failed proposal can be rejected`,
    };
  // The decision is one-shot too: a rejection and an approval racing give exactly one of them.
  if (!(await ctx.proposals.claim(id, op.by)))
    return {
      ok: false,
      kind: 'state_conflict',
      message: `proposal ${id} is already being decided (approved or rejected); nothing was done`,
    };
  const moved = await ctx.proposals.transition(id, ['pending', 'validated', 'failed'], 'rejected', {
    by: op.by,
    reason: op.reason.slice(0, 1000),
  });
  if (!moved.ok) return { ok: false, kind: moved.kind, message: moved.message };
  const lost = await ctx.record('rejected', { id, name: p.name, by: op.by, via: op.via ?? 'cli', reason: op.reason.slice(0, 1000) });
  return lost ?? { ok: true, proposal: moved.proposal };
}
