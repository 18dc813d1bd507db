import { toolsmithFor } from '@forge/policy';
import type { DamagedTool, Registry, StoredTool } from '@forge/registry';
import { WIRE_NAME_PATTERN, wireName } from '@forge/registry';
import { META_TOOLS } from '../api.js';
import { type Ctx, callerOf } from '../caller.js';
import type { AuditPort, PolicyPort, ToolLookup } from '../ports.js';
import type { Refusal } from '../refusal.js';
import type { SourcedTool, ToolSource } from '../sources.js';
import { findTool, UNKNOWN_TOOL_TODO, UNKNOWN_TOOL_TODO_GOVERNED } from '../wireNames.js';
import { reportShadow, sourceNamespace } from './shadow.js';

/** What a call names: a forged tool of the registry, or a tool a source serves. */
export type Target = { kind: 'forged'; stored: StoredTool } | { kind: 'sourced'; tool: SourcedTool; source: ToolSource };

/**
 * Why nothing can be called by a name: none has it, the record it resolves to is damaged
 * (`tool_damaged`), or (a worker's pinned route) the tool is not the one the front-end resolved.
 */
export type Unresolved = Refusal & {
  kind: 'unknown_tool' | 'tool_damaged' | 'internal';
  /** The forge name the call is audited under (a damaged record's, a pinned tool's), when not the name asked. */
  name?: string;
  /** The call's entry type, when not `forge.called` (a pinned name that resolves to a source's tool). */
  eventType?: string;
};

/** What step 1 gives: the target, or why there is none. */
export type Resolved = { ok: true; target: Target } | Unresolved;

/** The ports resolving reads: the registries, the sources, the policy (governed mode), the log (shadows). */
export type ResolvePorts = Pick<ToolLookup, 'layers' | 'damagedIn' | 'resolveIn' | 'sources'> & PolicyPort & Pick<AuditPort, 'record'>;

/** The forge name of `target`: what every gate, entry and manifest names. */
export function targetName(target: Target): string {
  return target.kind === 'forged' ? target.stored.name : target.tool.name;
}

/** The audit entry type of a call of `target`: `forge.called`, or its source's (`gateway.called`). */
export function targetEvent(target: Target): string {
  return target.kind === 'forged' ? 'forge.called' : `${target.source.kind}.called`;
}

/**
 * Step 1, resolve: the forge name or wire name `name` through the layered registry (task →
 * session → project → user), then through the sources (the gateway's projected tools). A forged
 * tool in a source's namespace is never the answer (shadow.ts): the call goes to the source. A
 * damaged record the name resolves to is `tool_damaged`, never run and never passed over for a
 * tool below it.
 */
export async function resolveTarget(e: ResolvePorts, ctx: Ctx, name: string): Promise<Resolved> {
  const regs = await e.layers(ctx);
  const damaged = e.damagedIn(regs, name);
  if (damaged && !sourceNamespace(e, damaged.name)) return damagedRefusal(damaged);
  // A persona in governed mode (policy toolsmith.mode) is told to propose a tool, not to forge one.
  const todo = () => {
    const pol = e.policyNow();
    return pol.ok && toolsmithFor(pol.snap, ctx.persona).mode === 'governed' ? UNKNOWN_TOOL_TODO_GOVERNED : UNKNOWN_TOOL_TODO;
  };
  const found = findTool(regs, name, (n) => e.resolveIn(regs, n), META_TOOLS, todo);
  if (found.ok) {
    const stored = found.resolved.tool;
    const owned = sourceNamespace(e, stored.name);
    if (!owned) return { ok: true, target: { kind: 'forged', stored } };
    reportShadow(e, stored, owned);
  }
  for (const source of e.sources) {
    const who = callerOf(ctx);
    const direct = await source.resolve(name, who);
    if (direct) return { ok: true, target: { kind: 'sourced', tool: direct, source } };
    if (WIRE_NAME_PATTERN.test(name) && !name.includes('.')) {
      const byWire = (await source.list(who)).filter((t) => wireName(t.name) === name);
      const only = byWire.length === 1 ? byWire[0] : undefined;
      if (only) return { ok: true, target: { kind: 'sourced', tool: only, source } };
    }
  }
  if (!found.ok) {
    const byWire = damagedByWireName(e, regs, name);
    return byWire ? damagedRefusal(byWire) : { ok: false, kind: 'unknown_tool', message: found.message };
  }
  return {
    ok: false,
    kind: 'unknown_tool',
    message: `no tool "${name}": ${sourceNamespace(e, found.resolved.tool.name)}; the forged tool of that name is not served`,
  };
}

/** The damaged record whose wire name is `wire` and that its forge name resolves to (only one may). */
function damagedByWireName(e: ResolvePorts, regs: Registry[], wire: string): DamagedTool | undefined {
  if (!WIRE_NAME_PATTERN.test(wire)) return undefined;
  const hits = new Set<DamagedTool>();
  for (const r of regs) for (const d of r.listDamaged()) if (wireName(d.name) === wire && e.damagedIn(regs, d.name) === d) hits.add(d);
  const [only] = hits;
  return hits.size === 1 && only && !sourceNamespace(e, only.name) ? only : undefined;
}

/**
 * The refusal of a call to a damaged record: which, where, what is wrong, and what to do. Its
 * file no longer says who forged it, so removing it is for an operator persona (or the owner of
 * its namespace).
 */
export function damagedRefusal(d: DamagedTool): Unresolved {
  const where = d.path.startsWith('/') ? `its file ${d.path}` : `its record ${d.path}`;
  return {
    ok: false,
    kind: 'tool_damaged',
    name: d.name,
    message: `tool "${d.name}" (${d.scope} scope) is damaged and was not run: ${where} cannot be used (${d.reason}); remove it (forge_remove, or forge tools remove ${d.name} --scope ${d.scope}: an operator persona or the owner of its namespace may, as the file no longer says who forged it) and forge it again, or restore the file from a copy`,
  };
}
