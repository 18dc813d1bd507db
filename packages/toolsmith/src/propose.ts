/**
 * The proposal's start: a blueprint (`forge_propose`) is checked against policy as forging would
 * check it, stored as a pending proposal, audited, and validated in the sandbox at once
 * (`validateAndRecord`, which approval uses again when what a proposal was validated under changed).
 */
import { checkCapability, checkNamespace, checkRuntime, checkToolName, type PolicySnapshot } from '@forge/policy';
import { type StoredTool, type ToolExample, type ToolSpec, validateSpec } from '@forge/registry';
import type { CallContext, Refusal } from '@forge/runner';
import { type Blueprint, readBlueprint } from './blueprint.js';
import type { ToolsmithContext } from './context.js';
import type { ProposeAnswer } from './contract.js';
import { capabilitySlug, deriveToolName } from './naming.js';
import type { Proposal, ProposalState, ValidationRecord } from './types.js';
import { specDigest, validateProposal } from './validate.js';

/** What proposing uses. */
type ProposeContext = Pick<ToolsmithContext, 'forge' | 'proposals' | 'now' | 'gate' | 'proposedBy' | 'record' | 'activeTool'>;

/** A blueprint drafted into a spec, or the refusal and the audit fields known when it was refused. */
type Draft =
  | { ok: true; b: Blueprint; capability: string; spec: ToolSpec }
  | { ok: false; refusal: Refusal; extra?: Record<string, unknown> };

/** See `Toolsmith.propose`: stores the blueprint as a proposal and validates it at once. */
export async function proposeTool(ctx: ProposeContext, args: unknown, callCtx: CallContext = {}): Promise<ProposeAnswer | Refusal> {
  const { persona, session } = ctx.forge.caller(callCtx);
  const refuse = async (r: Refusal, extra: Record<string, unknown> = {}): Promise<Refusal> => {
    const lost = await ctx.record('proposed', { ok: false, persona, session, kind: r.kind, message: r.message, ...extra });
    return lost ?? r;
  };
  const g = await ctx.gate.check(persona, 'proposed');
  if (!g.ok) return g.kind === 'policy_denied' ? refuse(g) : g;
  // Each proposal costs sandbox runs: a session proposes at most as many tools as it may forge.
  const limit = g.snap.policy.breakers.per_session_forge_count;
  const made = ctx.proposedBy.get(session) ?? 0;
  if (made >= limit)
    return refuse({
      ok: false,
      kind: 'breaker_open',
      message: `session "${session}" has made ${made} proposals, the most policy breakers.per_session_forge_count allows; start a new session or ask an operator`,
    });
  ctx.proposedBy.set(session, made + 1);
  const draft = await draftSpec(ctx, g.snap, persona, args);
  if (!draft.ok) return refuse(draft.refusal, draft.extra);
  const { b, capability, spec } = draft;
  const name = spec.name;
  const live = await ctx.activeTool(name);
  const liveProposal = live ? (await ctx.proposals.lineage(name)).find((p) => p.state === 'active') : undefined;
  const proposal = await ctx.proposals.create({
    state: 'pending',
    name,
    capability,
    persona,
    session,
    // The gap it answers, as the gap store keys it (normalised like every signature).
    gap: { kind: 'missing_tool', signature: gapOf(b.gap?.signature) ?? capability },
    spec,
    ...(live ? { replaces: { version: live.version, digest: live.digest, ...(liveProposal ? { proposal: liveProposal.id } : {}) } } : {}),
    by: persona,
  });
  const lost = await ctx.record('proposed', {
    ok: true,
    id: proposal.id,
    name,
    capability,
    persona,
    session,
    spec_digest: specDigest(spec),
    ...(proposal.replaces ? { replaces: proposal.replaces } : {}),
    ...(b.ignored.length > 0 ? { ignored: b.ignored } : {}),
  });
  if (lost) {
    await ctx.proposals.transition(proposal.id, ['pending'], 'failed', { by: 'forge', reason: 'the audit log did not take the proposal' });
    return lost;
  }
  const validated = await validateAndRecord(ctx, proposal, g.snap, live);
  if (!validated.ok) return validated;
  const p = validated.proposal;
  const ignoredNote =
    b.ignored.length > 0 ? ` (not taken from the blueprint: ${b.ignored.join(', ')}; sandbox, network and secrets come from policy)` : '';
  const message =
    p.state === 'validated'
      ? `proposal ${p.id} for "${name}" passed validation (${p.validation?.summary}) and waits for an approver: forge toolsmith approve ${p.id}${ignoredNote}`
      : `proposal ${p.id} for "${name}" failed validation: ${p.validation?.summary}; fix it and propose again${ignoredNote}`;
  return { ok: true, proposal: p, ignored: b.ignored, message };
}

/**
 * The spec a blueprint proposes, checked as forging would check it under `snap`: the capability
 * allowed, the derived name (in `persona`'s namespace) allowed, the spec's shape, the runtime
 * allowed by policy and present on the host.
 */
async function draftSpec(ctx: Pick<ToolsmithContext, 'forge'>, snap: PolicySnapshot, persona: string, args: unknown): Promise<Draft> {
  const b = readBlueprint(args);
  if (!b.ok) return { ok: false, refusal: b };
  const slug = capabilitySlug(b.capability);
  if (!slug.ok) return { ok: false, refusal: slug };
  const capability = slug.slug;
  const allowed = checkCapability(snap, capability);
  if (!allowed.ok) return { ok: false, refusal: allowed as Refusal, extra: { capability } };
  const ns = snap.policy.persona_namespaces[persona];
  const named = deriveToolName(capability, Object.hasOwn(snap.policy.persona_namespaces, persona) ? ns : undefined);
  if (!named.ok) return { ok: false, refusal: named, extra: { capability } };
  const name = named.name;
  for (const d of [checkToolName(snap, name), checkNamespace(snap, persona, name)])
    if (!d.ok) return { ok: false, refusal: d as Refusal, extra: { capability, name } };
  const spec: ToolSpec = {
    name,
    description: b.description,
    input_schema: b.input_schema,
    ...(b.output_schema ? { output_schema: b.output_schema } : {}),
    impl: b.impl,
    runtime: b.runtime,
    ...(b.meta ? { meta: b.meta } : {}),
    examples: b.examples,
  };
  // The spec's shape as forging checks it (the runtime is policy's and the host's, checked next).
  const shape = validateSpec(spec, { runtimes: [spec.runtime] });
  if (!shape.ok) return { ok: false, refusal: { ok: false, kind: shape.kind, message: shape.message }, extra: { capability, name } };
  const rt = checkRuntime(snap, spec.runtime);
  if (!rt.ok) return { ok: false, refusal: rt as Refusal, extra: { capability, name } };
  try {
    await ctx.forge.runtimeOf(spec.runtime);
  } catch (err) {
    return {
      ok: false,
      refusal: { ok: false, kind: 'validation_failed', message: `runtime: ${(err as Error).message}` },
      extra: { capability, name },
    };
  }
  return { ok: true, b, capability, spec };
}

/** A gap signature as the store keys it (the capability slug), or undefined for none. */
function gapOf(signature: string | undefined): string | undefined {
  if (signature === undefined) return undefined;
  const slug = capabilitySlug(signature);
  return slug.ok ? slug.slug : signature;
}

/**
 * Validates `p` (pending, or in one of `from`) in the sandbox, against the examples of `live` too
 * (the tool it would replace), and moves it to validated or failed with the record; audited.
 */
export async function validateAndRecord(
  ctx: Pick<ToolsmithContext, 'forge' | 'proposals' | 'now' | 'gate' | 'record'>,
  p: Proposal,
  snap: PolicySnapshot,
  live: StoredTool | undefined,
  from: ProposalState[] = ['pending'],
): Promise<{ ok: true; proposal: Proposal } | Refusal> {
  const regression: readonly ToolExample[] = live?.examples ?? [];
  const rec: ValidationRecord = await validateProposal({
    forge: ctx.forge,
    spec: p.spec,
    persona: p.persona,
    session: p.session,
    proposal: p.id,
    snap,
    regression,
    now: ctx.now,
    stopped: () => {
      const s = ctx.gate.status(p.persona);
      return !s.enabled ? 'the toolsmith was turned off' : s.paused ? (s.pausedWhy ?? 'paused') : undefined;
    },
  });
  const to = rec.ok ? 'validated' : 'failed';
  const moved = await ctx.proposals.transition(p.id, from, to, {
    by: 'forge',
    ...(rec.ok ? {} : { reason: rec.summary.slice(0, 1000) }),
    change: () => ({ validation: rec }),
  });
  if (!moved.ok) return { ok: false, kind: moved.kind, message: moved.message };
  const lost = await ctx.record(rec.ok ? 'validated' : 'validation_failed', {
    id: p.id,
    name: p.name,
    sandbox_runs: rec.sandbox_runs,
    checks: rec.checks.length,
    duration_ms: rec.duration_ms,
    runtime: rec.runtime,
    policy: rec.policy_digest,
    ...(rec.ok ? {} : { summary: rec.summary.slice(0, 500) }),
  });
  return lost ?? { ok: true, proposal: moved.proposal };
}
