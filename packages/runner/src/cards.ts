import { type Budget, bindRoots, checkRuntime, checkSecrets, clampBudget, networkFor, type PolicySnapshot } from '@forge/policy';
import { wireName } from '@forge/registry';
import type { CallContext } from './api.js';
import { passNameGates } from './call/gates.js';
import type { Ctx } from './caller.js';
import { type FoundHooks, findHooks, hookRoots } from './hooks/find.js';
import type { ListPorts } from './listing.js';
import { listSourced, listTools } from './listing.js';
import type { PolicyPort } from './ports.js';
import type { ToolCap, ToolCard, ToolPolicyView } from './toolCard.js';

/**
 * The cards of every tool `o`'s caller can see (forged, then the sources'), by name; empty when
 * the policy cannot be read (a call would be refused) or the caller is malformed.
 */
export async function describeTools(
  e: ListPorts & PolicyPort & { paths: { project: string; hooksDir: string; projectForge: string } },
  o: CallContext = {},
): Promise<ToolCard[]> {
  const ctx = e.context(o);
  if (e.contextProblem(ctx)) return [];
  const pol = e.policyNow();
  if (!pol.ok) return [];
  const snap = pol.snap;
  const cards: ToolCard[] = [];
  // The hooks directories every tool shares are read once for all the cards.
  const seen = new Map<string, FoundHooks>();
  for (const { tool } of await listTools(e, o)) {
    const secrets = tool.meta?.secrets ?? [];
    const runtimeGate = checkRuntime(snap, tool.runtime);
    const secretGate = checkSecrets(snap, ctx.persona, secrets);
    cards.push({
      name: tool.name,
      wireName: wireName(tool.name),
      description: tool.description ?? '',
      inputSchema: tool.input_schema,
      ...(tool.output_schema !== undefined ? { outputSchema: tool.output_schema } : {}),
      origin: { kind: 'forged', scope: tool.scope, forgedBy: { persona: tool.created_by.persona, session: tool.created_by.session } },
      status: { state: tool.state, version: tool.version, digest: tool.digest },
      cap: capOf(e.paths.project, snap, ctx, {
        schema: tool.input_schema,
        runtime: tool.runtime,
        secrets,
        sandboxed: true,
        requested: budgetAsked(tool.meta),
      }),
      policy: policyOf(hookRoots(e.paths, snap), seen, snap, ctx, tool.name, [
        { gate: 'runtime', decision: runtimeGate },
        { gate: 'secrets', decision: secretGate },
      ]),
    });
  }
  for (const t of await listSourced(e, o)) {
    const secrets = t.meta?.secrets ?? [];
    cards.push({
      name: t.name,
      wireName: wireName(t.name),
      description: t.description,
      inputSchema: t.input_schema,
      ...(t.output_schema !== undefined ? { outputSchema: t.output_schema } : {}),
      origin: {
        kind: 'source',
        source: t.origin.kind,
        server: t.origin.server,
        tool: t.origin.tool,
        transport: t.origin.transport,
        sandboxed: t.origin.sandboxed,
      },
      status: { state: 'active', digest: t.digest },
      cap: capOf(e.paths.project, snap, ctx, {
        schema: t.input_schema,
        secrets,
        sandboxed: t.origin.sandboxed,
        requested: t.meta?.timeout_ms !== undefined ? { timeout_ms: t.meta.timeout_ms } : {},
      }),
      policy: policyOf(hookRoots(e.paths, snap), seen, snap, ctx, t.name, [
        { gate: 'secrets', decision: checkSecrets(snap, ctx.persona, secrets) },
      ]),
    });
  }
  return cards;
}

function budgetAsked(meta: { timeout_ms?: number; cpu_s?: number; output_cap?: number } | undefined): Partial<Budget> {
  return {
    ...(meta?.timeout_ms !== undefined ? { timeout_ms: meta.timeout_ms } : {}),
    ...(meta?.cpu_s !== undefined ? { cpu_s: meta.cpu_s } : {}),
    ...(meta?.output_cap !== undefined ? { output_cap: meta.output_cap } : {}),
  };
}

function capOf(
  project: string,
  snap: PolicySnapshot,
  ctx: Ctx,
  t: { schema: unknown; runtime?: string; secrets: string[]; sandboxed: boolean; requested: Partial<Budget> },
): ToolCap {
  const { budget, clamped } = clampBudget(snap, t.requested);
  return {
    ...(t.runtime !== undefined ? { runtime: t.runtime } : {}),
    sandboxed: t.sandboxed,
    binds: bindsIn(t.schema),
    bindRoots: bindRoots(snap, { project }),
    network: networkFor(snap, ctx.persona),
    secrets: [...t.secrets],
    limits: budget,
    clamped,
  };
}

/** The hooks a call of `name` meets (see `hooks/find.ts`), as a card shows them. */
function hooksOf(roots: readonly string[], seen: Map<string, FoundHooks>, name: string): ToolPolicyView['hooks'] {
  const out: { pre: { path: string; digest: string }[]; post: { path: string; digest: string }[] } = { pre: [], post: [] };
  for (const stage of ['pre', 'post'] as const) {
    const found = findHooks(roots, name, stage, seen);
    if (!found.ok) return { problem: `hook ${found.path} ${found.message}` };
    out[stage] = found.hooks.map((h) => ({ path: h.path, digest: h.digest }));
  }
  return out;
}

function policyOf(
  roots: readonly string[],
  seen: Map<string, FoundHooks>,
  snap: PolicySnapshot,
  ctx: Ctx,
  name: string,
  more: { gate: string; decision: { ok: true } | { ok: false; kind: string; message: string } }[],
): ToolPolicyView {
  const gates: ToolPolicyView['gates'] = [];
  // The name's gates exactly as a call passes them (persona ACL, forbidden names, allow-rules).
  const named = passNameGates({ policyNow: () => ({ ok: true, snap }) }, { ctx, name });
  gates.push(named.ok ? { gate: 'name', ok: true } : { gate: 'name', ok: false, kind: named.kind, message: named.message });
  for (const { gate, decision } of more)
    gates.push(decision.ok ? { gate, ok: true } : { gate, ok: false, kind: decision.kind, message: decision.message });
  const hooks = hooksOf(roots, seen, name);
  if ('problem' in hooks) gates.push({ gate: 'hooks', ok: false, kind: 'hook_failed', message: hooks.problem });
  return {
    hooks,
    persona: ctx.persona,
    allowed: gates.every((g) => g.ok),
    gates,
    breakers: { ...snap.policy.breakers },
    digest: snap.digest,
    sources: snap.sources.map((s) => ({ file: s.file, kind: s.kind, status: s.status })),
  };
}

const MAX_DEPTH = 32;

/** Every `x-bind` in `schema`, as a JSON pointer into the schema, with its mode. */
export function bindsIn(schema: unknown): { at: string; mode: 'ro' | 'rw' }[] {
  const out: { at: string; mode: 'ro' | 'rw' }[] = [];
  const walk = (s: unknown, at: string, depth: number) => {
    if (depth > MAX_DEPTH || s === null || typeof s !== 'object') return;
    if (Array.isArray(s)) {
      for (const [i, v] of s.entries()) walk(v, `${at}/${i}`, depth + 1);
      return;
    }
    for (const [k, v] of Object.entries(s)) {
      if (k === 'x-bind' && (v === 'ro' || v === 'rw')) out.push({ at: at || '/', mode: v });
      // Values under these keywords are data, not schemas.
      else if (k !== 'const' && k !== 'enum' && k !== 'default' && k !== 'examples')
        walk(v, `${at}/${k.replaceAll('~', '~0').replaceAll('/', '~1')}`, depth + 1);
    }
  };
  walk(schema, '', 0);
  return out;
}
