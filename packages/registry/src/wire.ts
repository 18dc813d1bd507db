import type { ListedTool } from './contract.js';
import { wireName } from './name.js';
import type { Failure } from './types.js';

/**
 * The refusal of `name` because `other` (in `where`: a scope, or `built-in`) has, or would have,
 * the same wire name regardless of case. Names both tools, both wire names and what to do.
 */
export function wireTaken<K extends string>(kind: K, name: string, other: string, where: string): Failure<K> {
  const mine = wireName(name);
  const theirs = wireName(other);
  const served =
    mine === theirs
      ? `would both be served to MCP clients as "${mine}"`
      : `would be served to MCP clients as "${mine}" and "${theirs}", which differ only by case`;
  const tool = where === 'built-in' ? `the built-in tool "${other}"` : `the existing tool "${other}" (${where})`;
  const todo = kind === 'promote_conflict' ? 'rename the tool before promoting it' : `choose another name for "${name}"`;
  return {
    ok: false,
    kind,
    message: `tool "${name}" and ${tool} ${served} (on the wire every "." becomes "__", and wire names are compared regardless of case); ${todo}`,
  };
}

/**
 * Marks the rows of an effective listing that are not served under their wire name: when
 * several rows share one, the row whose forge name is that wire name keeps it (a call by that
 * name resolves to it), and when none is, no row does (a call by it would be ambiguous). Each
 * marked row is a copy carrying `wireConflict` (the other forge names); the rest are returned as
 * they are. Forge-time checks make such groups impossible for tools forged through one registry;
 * this keeps a listing well-formed for older files and for writes raced by other processes.
 */
export function markWireConflicts(rows: readonly ListedTool[]): ListedTool[] {
  const byWire = new Map<string, ListedTool[]>();
  let shared = false;
  for (const r of rows) {
    const group = byWire.get(r.wireName);
    if (group) {
      group.push(r);
      shared = true;
    } else byWire.set(r.wireName, [r]);
  }
  if (!shared) return [...rows];
  const marked = new Map<ListedTool, ListedTool>();
  for (const [wire, group] of byWire) {
    if (group.length < 2) continue;
    for (const r of group) {
      if (r.tool.name === wire) continue;
      const others = group.filter((o) => o !== r).map((o) => o.tool.name);
      marked.set(r, { ...r, wireConflict: Object.freeze(others.sort()) });
    }
  }
  return rows.map((r) => marked.get(r) ?? r);
}
