import { toolsmithFor } from '@forge/policy';
import type { StoredTool } from '@forge/registry';
import { WIRE_NAME_PATTERN, wireName } from '@forge/registry';
import { META_TOOLS } from '../api.js';
import type { Ctx, Engine } from '../engine.js';
import type { SourcedTool, ToolSource } from '../sources.js';
import { findTool, UNKNOWN_TOOL_TODO, UNKNOWN_TOOL_TODO_GOVERNED } from '../wireNames.js';
import { reportShadow, sourceNamespace } from './shadow.js';

/** What a call names: a forged tool of the registry, or a tool a source serves. */
export type Target = { kind: 'forged'; stored: StoredTool } | { kind: 'sourced'; tool: SourcedTool; source: ToolSource };

/**
 * Step 1, resolve: the forge name or wire name `name` through the layered registry (task →
 * session → project → user), then through the sources (the gateway's projected tools). A forged
 * tool in a source's namespace is never the answer (shadow.ts): the call goes to the source.
 */
export async function resolveTarget(
  e: Engine,
  ctx: Ctx,
  name: string,
): Promise<{ ok: true; target: Target } | { ok: false; message: string }> {
  const regs = await e.layers(ctx);
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
    const who = sourceContext(ctx);
    const direct = await source.resolve(name, who);
    if (direct) return { ok: true, target: { kind: 'sourced', tool: direct, source } };
    if (WIRE_NAME_PATTERN.test(name) && !name.includes('.')) {
      const byWire = (await source.list(who)).filter((t) => wireName(t.name) === name);
      const only = byWire.length === 1 ? byWire[0] : undefined;
      if (only) return { ok: true, target: { kind: 'sourced', tool: only, source } };
    }
  }
  if (!found.ok) return { ok: false, message: found.message };
  return {
    ok: false,
    message: `no tool "${name}": ${sourceNamespace(e, found.resolved.tool.name)}; the forged tool of that name is not served`,
  };
}

/** What a source is told of the caller. */
export function sourceContext(ctx: Ctx): { persona: string; session: string; task?: string } {
  return { persona: ctx.persona, session: ctx.session, ...(ctx.task ? { task: ctx.task } : {}) };
}
