/**
 * What an approver reviewed against what a server lists now: an approval covers exactly the
 * definitions shown, so a tool described otherwise since (or one not shown) is not pinned.
 */
import { toolDigest } from './pins.js';
import type { ToolDefinition } from './types.js';

/** A refusal when `expect` (tool → the digest the approver reviewed) names one the server no longer lists that way. */
export function expectedDigests(
  server: string,
  defs: readonly ToolDefinition[],
  expect: Readonly<Record<string, string>> | undefined,
): { ok: false; kind: 'state_conflict'; message: string } | undefined {
  if (!expect) return undefined;
  const now = new Map(defs.map((d) => [d.name, toolDigest(d)]));
  for (const d of defs)
    if (!Object.hasOwn(expect, d.name))
      return {
        ok: false,
        kind: 'state_conflict',
        message: `gateway tool "${server}.${d.name}" was not among the tools reviewed; review them again, then approve`,
      };
  for (const [tool, digest] of Object.entries(expect)) {
    const current = now.get(tool);
    if (current !== digest)
      return {
        ok: false,
        kind: 'state_conflict',
        message: `gateway tool "${server}.${tool}" changed since it was reviewed (${digest.slice(0, 19)}…, now ${current ? `${current.slice(0, 19)}…` : 'not listed'}); nothing was pinned: review it again, then approve`,
      };
  }
  return undefined;
}
