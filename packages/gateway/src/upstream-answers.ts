import type { ServerConfig } from './types.js';

// What forge passes on from an upstream's answers (docs/security.md, invariant 7).

/**
 * Where an upstream's answer points somewhere local (docs/security.md, invariant 7): a
 * `resource_link` or embedded `resource` whose URI is not http(s) — `file:` (the host's files),
 * `forge:` (posing as forge's own run resources), or any other scheme a client may resolve
 * locally. Returns what is wrong with the first such item, or undefined.
 */
export function localReference(content: readonly unknown[]): string | undefined {
  for (const [i, item] of content.entries()) {
    const c = item as { type?: unknown; uri?: unknown; resource?: { uri?: unknown } };
    const uri = c.type === 'resource_link' ? c.uri : c.type === 'resource' ? c.resource?.uri : undefined;
    if (uri === undefined) continue;
    const scheme = typeof uri === 'string' ? /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(uri)?.[1]?.toLowerCase() : undefined;
    if (scheme !== 'http' && scheme !== 'https') {
      return `a ${String(c.type)} (content[${i}]) to ${JSON.stringify(typeof uri === 'string' ? uri.slice(0, 200) : uri)}`;
    }
  }
  return undefined;
}

/**
 * An upstream's safety annotations as forge passes them on (invariant 7): its word is taken only
 * where forge's own facts cannot contradict it. A server with a `rw` bind can change the host's
 * files (and so can one running outside forge's sandbox), so none of its tools is `readOnlyHint:
 * true` nor `destructiveHint: false`; one with network (or outside the sandbox, or reached by URL)
 * reaches the world, so `openWorldHint` is true.
 */
export function vettedAnnotations(server: ServerConfig, given: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  const writes = server.binds.some((b) => b.mode === 'rw') || server.unsandboxed;
  const world = server.network !== false || server.unsandboxed || server.transport === 'http';
  if (!given && !writes && !world) return undefined;
  const out: Record<string, unknown> = { ...(given ?? {}) };
  if (writes) {
    out.readOnlyHint = false;
    out.destructiveHint = true;
  }
  if (world) out.openWorldHint = true;
  return out;
}
