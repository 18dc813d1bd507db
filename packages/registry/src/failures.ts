/**
 * The refusals the registry's writes and lookups return, each saying what happened, to what and
 * what to do (the wire-name refusal is `wireTaken`, in wire.ts).
 */
import { toolNameProblem } from './name.js';
import type { StoreFailure } from './toolStore.js';
import type { DamagedTool, Failure, Scope } from './types.js';

/** `name` differs only by case from `other`, a tool of the `where` scope. */
export function caseTaken(name: string, other: string, where: Scope): Failure<'name_taken'> {
  return {
    ok: false,
    kind: 'name_taken',
    message: `tool "${name}" differs only by case from the existing tool "${other}" (${where} scope), and names are compared regardless of case; choose another name, or forge "${other}" with overwrite to replace that tool`,
  };
}

/** `name` is a built-in's. */
export function nameForbidden(name: string): Failure<'name_forbidden'> {
  return { ok: false, kind: 'name_forbidden', message: `"${name}" is a built-in tool name and cannot be forged; choose another name` };
}

/** The damaged record a store's failure to read `name` in `scope` makes. */
export function damagedOf(scope: Scope, name: string, f: StoreFailure): DamagedTool {
  return { name, scope, path: f.path, reason: f.reason };
}

/** The refusal of a damaged record: it names the record and the two ways out. */
export function damagedFailure(d: DamagedTool): Failure<'tool_damaged'> {
  return {
    ok: false,
    kind: 'tool_damaged',
    message: `tool "${d.name}" in the ${d.scope} scope is damaged and cannot be used: ${d.path}: ${d.reason}; remove it and forge it again, or restore the record from a copy`,
  };
}

/** No tool `name` in `where` (a scope, or a version history). */
export function unknownTool(name: string, where: string): Failure<'unknown_tool'> {
  return { ok: false, kind: 'unknown_tool', message: `no tool "${name}" in ${where}; list the tools to see what exists` };
}

/** Names reach file paths: anything outside the grammar (`../x`, `a/b`) names no tool. */
export function badName(name: string): Failure<'unknown_tool'> | undefined {
  const problem = toolNameProblem(name);
  if (!problem) return undefined;
  return { ok: false, kind: 'unknown_tool', message: `${JSON.stringify(name)} is not a tool name: it ${problem}` };
}
