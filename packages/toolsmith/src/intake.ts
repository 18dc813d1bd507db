/**
 * Gap intake: what agents asked for and could not get becomes gap records (an unknown tool, an
 * explicit `forge_request`, a gateway server that cannot start), and the cycle reports which
 * gaps recur enough to be wanted. Nothing here authors or approves a tool.
 */
import { checkCapability, type PolicySnapshot, toolsmithFor } from '@forge/policy';
import type { CallContext, Refusal } from '@forge/runner';
import { readRequest } from './blueprint.js';
import type { ToolsmithContext } from './context.js';
import type { CycleReport, RequestAnswer } from './contract.js';
import { capabilitySlug } from './naming.js';
import type { Awaitable } from './stores.js';
import type { GapKind, GapSummary } from './types.js';

/** One gap's recurrence under the policy's threshold and window (the gap store's summary of it). */
function summaryOf(
  ctx: Pick<ToolsmithContext, 'gaps' | 'now'>,
  snap: PolicySnapshot,
  kind: GapKind,
  signature: string,
): Awaitable<GapSummary> {
  const t = toolsmithFor(snap, 'default');
  const at = ctx.now();
  const none: GapSummary = {
    kind,
    signature,
    count: 0,
    total: 0,
    first_at: at,
    last_at: at,
    personas: [],
    sources: [],
    qualifies: false,
  };
  const rows = ctx.gaps.summary({ threshold: t.threshold, windowMs: t.windowMs, now: at, only: { kind, signature } });
  return rows instanceof Promise ? rows.then(([row]) => row ?? none) : (rows[0] ?? none);
}

/** See `Toolsmith.unknownTool`: records a `missing_tool` gap and returns the hint for the caller. */
export function noteUnknownTool(
  ctx: Pick<ToolsmithContext, 'forge' | 'gaps' | 'now' | 'record'>,
  name: string,
  caller: { persona: string; session: string },
): string | undefined {
  const pol = ctx.forge.policy();
  if (!pol.ok) return undefined;
  const t = toolsmithFor(pol.snapshot, caller.persona);
  if (!t.enabled || t.paused) return undefined;
  // A client calls by the wire name (`text__reverse`): the gap is the forge name's (`text.reverse`).
  const slug = capabilitySlug(name.replaceAll('__', '.'));
  const signature = slug.ok ? slug.slug : name.toLowerCase().slice(0, 128);
  ctx.gaps.note({ kind: 'missing_tool', signature, source: 'unknown_tool', persona: caller.persona, session: caller.session, asked: name });
  void ctx.record('gap_recorded', {
    kind: 'missing_tool',
    signature,
    source: 'unknown_tool',
    persona: caller.persona,
    session: caller.session,
  });
  if (t.mode !== 'governed') return undefined;
  const hours = t.windowMs / 3_600_000;
  // The record being written counts too: the store's summary includes what it has not written yet.
  const seen = summaryOf(ctx, pol.snapshot, 'missing_tool', signature);
  // The hint is given at once: a store that answers later (a database) gets one without the count.
  if (seen instanceof Promise) {
    seen.catch(() => {});
    return `the toolsmith noted the request (a tool is wanted once it is asked for ${t.threshold} times in ${hours} h); to ask for it now, call forge_request {capability, description, example_inputs}`;
  }
  const count = seen.count;
  return count >= t.threshold
    ? `the toolsmith has seen "${signature}" asked for ${count} times in ${hours} h, so a tool for it is wanted: propose one with forge_propose {capability: "${signature}", description, input_schema, impl, runtime, examples}`
    : `the toolsmith noted the request (${count} of ${t.threshold} in ${hours} h before a tool is wanted); to ask for it now, call forge_request {capability, description, example_inputs}`;
}

/** See `Toolsmith.request`: `forge_request` records the need explicitly. */
export async function requestTool(
  ctx: Pick<ToolsmithContext, 'forge' | 'gaps' | 'now' | 'gate' | 'record'>,
  args: unknown,
  callCtx: CallContext = {},
): Promise<RequestAnswer | Refusal> {
  const { persona, session } = ctx.forge.caller(callCtx);
  const g = await ctx.gate.check(persona, 'requested');
  if (!g.ok) return g;
  const r = readRequest(args);
  if (!r.ok) return r;
  const slug = capabilitySlug(r.capability);
  if (!slug.ok) return slug;
  try {
    await ctx.gaps.record({
      kind: 'missing_tool',
      signature: slug.slug,
      source: 'forge_request',
      persona,
      session,
      description: r.description,
      ...(r.example_inputs ? { example_inputs: r.example_inputs } : {}),
    });
  } catch (err) {
    return { ok: false, kind: 'internal', message: `the request could not be recorded: ${(err as Error).message}` };
  }
  const lost = await ctx.record('gap_recorded', { kind: 'missing_tool', signature: slug.slug, source: 'forge_request', persona, session });
  if (lost) return lost;
  const gap = await summaryOf(ctx, g.snap, 'missing_tool', slug.slug);
  const authorable = checkCapability(g.snap, slug.slug).ok;
  const message = !authorable
    ? `recorded; "${slug.slug}" is outside policy toolsmith.capability_allow, so no tool can be proposed for it until an operator allows it`
    : gap.qualifies
      ? `recorded; "${slug.slug}" is wanted (${gap.count} requests in the window): propose it with forge_propose {capability: "${slug.slug}", description, input_schema, impl, runtime, examples}`
      : `recorded (${gap.count} of ${g.t.threshold} in the window before it is wanted); you may propose it now with forge_propose`;
  return { ok: true, capability: slug.slug, gap, authorable, message };
}

/** See `Toolsmith.gapSummary`. */
export function gapSummary(
  ctx: Pick<ToolsmithContext, 'forge' | 'gaps' | 'now'>,
): GapSummary[] | Refusal | Promise<GapSummary[] | Refusal> {
  const pol = ctx.forge.policy();
  if (!pol.ok) return pol;
  const t = toolsmithFor(pol.snapshot, 'default');
  const rows = ctx.gaps.summary({ threshold: t.threshold, windowMs: t.windowMs, now: ctx.now() });
  if (!(rows instanceof Promise)) return rows;
  return rows.catch(
    (err: Error): Refusal => ({ ok: false, kind: 'internal', message: `the toolsmith could not read its gaps: ${err.message}` }),
  );
}

/** See `Toolsmith.cycle`. */
export async function runCycle(
  ctx: Pick<ToolsmithContext, 'gaps' | 'proposals' | 'now' | 'gate' | 'record'>,
): Promise<CycleReport | Refusal> {
  const g = await ctx.gate.check('default', 'cycled');
  if (!g.ok) return g;
  const rows = (await ctx.gaps.summary({ threshold: g.t.threshold, windowMs: g.t.windowMs, now: ctx.now() })).filter((s) => s.qualifies);
  const open = await ctx.proposals.list({ state: ['pending', 'validated', 'active'] });
  const inFlight = new Set(open.map((p) => p.capability));
  const wanted = rows.filter((s) => s.kind === 'missing_tool' && !inFlight.has(s.signature));
  const absent = rows.filter((s) => s.kind === 'service_absent');
  const awaiting = open.filter((p) => p.state === 'validated').length;
  const at = new Date(ctx.now()).toISOString();
  const lost = await ctx.record('cycle', {
    wanted: wanted.map((w) => ({ signature: w.signature, count: w.count })),
    service_absent: absent.map((s) => ({ server: s.signature, count: s.count })),
    awaiting_approval: awaiting,
  });
  if (lost) return lost;
  for (const s of absent)
    await ctx.record('service_absent', { server: s.signature, count: s.count, last_at: new Date(s.last_at).toISOString() });
  return { ok: true, at, wanted, service_absent: absent, awaiting_approval: awaiting };
}

/**
 * Records a `service_absent` gap for each gateway server that cannot start: an operator signal,
 * never authored. Returns the unsubscribe.
 */
export function watchServiceGaps(ctx: Pick<ToolsmithContext, 'forge' | 'gaps' | 'record'>): () => void {
  return ctx.forge.on('audit', (ev) => {
    if (ev.type !== 'gateway.upstream_exited' || ev.data.phase !== 'start' || typeof ev.data.server !== 'string') return;
    const pol = ctx.forge.policy();
    if (!pol.ok) return;
    const t = toolsmithFor(pol.snapshot, 'default');
    if (!t.enabled || t.paused) return;
    const server = ev.data.server.slice(0, 128);
    ctx.gaps.note({ kind: 'service_absent', signature: server, source: 'gateway', persona: 'forge', session: '-' });
    void ctx.record('gap_recorded', { kind: 'service_absent', signature: server, source: 'gateway' });
  });
}
