import {
  isValidToolName,
  type ListedTool,
  markWireConflicts,
  type ResolvedTool,
  type Scope,
  WIRE_NAME_PATTERN,
  wireName,
  wireTaken,
} from '@forge/registry';

/** What the wire-name rules need of a registry layer. */
export interface WireLayer {
  byWireName(wire: string): readonly ResolvedTool[];
  wireVariantOf(name: string): ResolvedTool | undefined;
}

/** A tool found by `findTool`, or why none was. */
export type ToolLookup = { ok: true; resolved: ResolvedTool } | { ok: false; kind: 'unknown_tool'; message: string };

/**
 * The tool a caller means by `name`, a forge name (`code.csv_stats`) or a wire name
 * (`code__csv_stats`): the tool `name` resolves to as a forge name if there is one; otherwise
 * the one visible tool whose wire name is `name`. Several tools with that wire name (only
 * possible for files older than the forge-time check, see `markWireConflicts`) resolve to none.
 * `resolve` is the layered lookup by forge name, most specific scope first.
 */
export function findTool(
  layers: readonly WireLayer[],
  name: string,
  resolve: (forgeName: string) => ResolvedTool | undefined,
  metaTools: readonly string[],
  /** What an `unknown_tool` message tells the caller to do (asked only when nothing is found). */
  todo: () => string = () => UNKNOWN_TOOL_TODO,
): ToolLookup {
  const direct = resolve(name);
  if (direct) return { ok: true, resolved: direct };
  if (WIRE_NAME_PATTERN.test(name)) {
    const names = new Set<string>();
    for (const layer of layers) for (const hit of layer.byWireName(name)) names.add(hit.tool.name);
    const [only] = names;
    const resolved = names.size === 1 && only !== undefined ? resolve(only) : undefined;
    if (resolved) return { ok: true, resolved };
    if (names.size > 1) {
      const list = [...names]
        .sort()
        .map((n) => `"${n}"`)
        .join(', ');
      return {
        ok: false,
        kind: 'unknown_tool',
        message: `"${name}" is the wire name of several tools (${list}), so it names none of them; call one by its forge name`,
      };
    }
  }
  return { ok: false, kind: 'unknown_tool', message: unknownToolMessage(name, metaTools, todo()) };
}

/** What an `unknown_tool` message tells the caller to do (a governed persona is told to propose instead). */
export const UNKNOWN_TOOL_TODO = 'call forge_list to see the tools, or forge_tool to create it';
/** The same for a persona in governed mode (policy toolsmith.mode). */
export const UNKNOWN_TOOL_TODO_GOVERNED =
  'call forge_list to see the tools, or forge_propose to propose one (forge_tool is refused in governed mode)';

/**
 * The `unknown_tool` message for `name`, naming its other form (forge or wire name) when it has
 * one, and `todo`: what the caller can do (a governed persona is told to propose, not to forge).
 */
export function unknownToolMessage(name: string, metaTools: readonly string[], todo: string = UNKNOWN_TOOL_TODO): string {
  if (metaTools.includes(name)) return `"${name}" is a meta-tool served by the MCP server, not a forged tool`;
  if (isValidToolName(name) && name.includes('.')) return `no forged tool is named "${name}" (wire name "${wireName(name)}"); ${todo}`;
  const dotted = name.replaceAll('__', '.');
  if (dotted !== name && isValidToolName(dotted) && wireName(dotted) === name) {
    return `no forged tool is named "${name}" or has it as its wire name (forge name "${dotted}"); ${todo}`;
  }
  return `no forged tool is named "${name}"; ${todo}`;
}

/**
 * Forge-time wire-name checks across registries. Each registry refuses a shared wire name among
 * its own scopes under its locks; the session and task scopes are registries of their own, so
 * two concurrent forges of `a.b` (session) and `a__b` (project) would each pass their own.
 * `hold` checks every visible layer and the writes this engine has in flight, synchronously,
 * then keeps the name claimed until the write is in memory.
 */
export class WireClaims {
  private readonly inFlight = new Map<string, { name: string; scope: Scope }[]>();

  /**
   * Runs `write` (the registry write of `name` into `scope`) unless another visible tool, or a
   * write in flight, has `name`'s wire name regardless of case: then that refusal (`kind`,
   * naming both tools and the wire name). `existing` skips the check against visible tools (the
   * very name is being replaced, beside whatever stands there already), not against writes in
   * flight.
   */
  async hold<R>(
    layers: readonly WireLayer[],
    name: string,
    scope: Scope,
    options: { kind: 'name_taken' | 'promote_conflict'; existing?: boolean },
    write: () => Promise<R>,
  ): Promise<R | { ok: false; kind: 'name_taken' | 'promote_conflict'; message: string }> {
    const key = wireName(name).toLowerCase();
    if (!options.existing) {
      for (const layer of layers) {
        const twin = layer.wireVariantOf(name);
        if (twin) return wireTaken(options.kind, name, twin.tool.name, `${twin.scope} scope`);
      }
    }
    const racing = this.inFlight.get(key)?.find((w) => w.name !== name);
    if (racing) return wireTaken(options.kind, name, racing.name, `${racing.scope} scope, being written now`);
    const entry = { name, scope };
    const list = this.inFlight.get(key);
    if (list) list.push(entry);
    else this.inFlight.set(key, [entry]);
    try {
      return await write();
    } finally {
      const held = this.inFlight.get(key) ?? [];
      held.splice(held.indexOf(entry), 1);
      if (held.length === 0) this.inFlight.delete(key);
    }
  }
}

/**
 * An effective listing merged from several registries, `wireConflict` marked across all of them
 * (each registry marks only its own scopes).
 */
export function withWireConflicts(rows: readonly ListedTool[]): ListedTool[] {
  return markWireConflicts(rows);
}
