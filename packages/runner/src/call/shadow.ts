import type { AuditPort, ToolLookup } from '../ports.js';

/**
 * A forged tool in a source's namespace (a gateway server's `<server>.*` or `<server>__*`) is
 * never served (docs/security.md, invariant 4): what an operator's approval vouches for is
 * answered by the approved upstream or by nothing. Forging such a name is refused at forge time;
 * a tool that is there anyway (shipped in a repository's `.forge/tools/`, forged before the server
 * was configured, or written by another process) is left out of every listing and never resolved
 * by a call, and reported once per engine and definition (`forge.shadow_refused`).
 */
export function sourceNamespace(e: Pick<ToolLookup, 'sources'>, name: string): string | undefined {
  for (const source of e.sources) {
    const why = source.owns?.(name);
    if (why) return why;
  }
  return undefined;
}

const reported = new WeakMap<object, Set<string>>();

/** Records once that the forged tool `tool` was not served for the reason `why`. */
export function reportShadow(e: Pick<AuditPort, 'record'>, tool: { name: string; scope: string; digest: string }, why: string): void {
  let seen = reported.get(e);
  if (!seen) {
    seen = new Set();
    reported.set(e, seen);
  }
  const key = `${tool.scope}\0${tool.name}\0${tool.digest}`;
  if (seen.has(key)) return;
  seen.add(key);
  void e.record('forge.shadow_refused', { tool: tool.name, scope: tool.scope, digest: tool.digest, reason: why });
}
