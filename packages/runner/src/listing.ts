import { checkPersonaAcl } from '@forge/policy';
import { type DamagedTool, type ListedTool, type Scope, wireName } from '@forge/registry';
import { type CallContext, META_TOOLS } from './api.js';
import { reportShadow, sourceNamespace } from './call/shadow.js';
import { callerOf } from './caller.js';
import type { AuditPort, Callers, ToolLookup } from './ports.js';
import type { SourcedTool } from './sources.js';
import { withWireConflicts } from './wireNames.js';

/**
 * What a caller sees: the forged tools, the damaged records and the sources' tools its names
 * resolve to, within its ACL. A forged tool in a source's namespace is never listed (nor called):
 * the source's is (call/shadow.ts).
 */

/** The ports of listing: who calls, the registries and sources, the log (shadows are reported). */
export type ListPorts = Pick<Callers, 'context' | 'contextProblem'> &
  Pick<ToolLookup, 'layers' | 'registryFor' | 'damagedIn' | 'sources'> &
  Pick<AuditPort, 'record'>;

/** The forged tools `o`'s caller can call (each name once, as it resolves), or every tool of one scope (see `Forge.listTools`). */
export async function listTools(e: ListPorts, o: { scope?: Scope } & CallContext = {}): Promise<readonly ListedTool[]> {
  const ctx = e.context(o);
  if (e.contextProblem(ctx)) return [];
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
}

/** The damaged records `o`'s caller sees for a scope, or those its names resolve to (see `Forge.listDamaged`). */
export async function listDamaged(e: ListPorts, o: { scope?: Scope } & CallContext = {}): Promise<readonly DamagedTool[]> {
  const ctx = e.context(o);
  if (e.contextProblem(ctx)) return [];
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
}

/** The sources' tools `o`'s caller can call, leaving out any whose forge or wire name a forged tool or a meta-tool has. */
export async function listSourced(e: ListPorts, o: CallContext & { offline?: boolean } = {}): Promise<readonly SourcedTool[]> {
  const ctx = e.context(o);
  if (e.contextProblem(ctx) || e.sources.length === 0) return [];
  const taken = new Set<string>(META_TOOLS);
  for (const t of await listTools(e, o)) {
    taken.add(t.tool.name);
    taken.add(wireName(t.tool.name));
  }
  const out: SourcedTool[] = [];
  for (const source of e.sources) {
    for (const t of await source.list({ ...callerOf(ctx), ...(o.offline ? { offline: true } : {}) })) {
      if (taken.has(t.name) || taken.has(wireName(t.name))) continue;
      if (!checkPersonaAcl(ctx.acl, ctx.persona, t.name, META_TOOLS).ok) continue;
      taken.add(t.name);
      taken.add(wireName(t.name));
      out.push(t);
    }
  }
  return out.sort((a, b) => (a.name < b.name ? -1 : 1));
}
