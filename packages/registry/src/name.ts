import { createHash } from 'node:crypto';
import { RegistryError } from './errors.js';

/** Longest tool name, in bytes (names are ASCII, so also in characters). */
export const MAX_NAME_BYTES = 64;

const NAME_CHARS = /^[A-Za-z0-9_.-]*$/;

/**
 * Why `name` is not a valid tool name, or `undefined` when it is. The grammar: 1–64 bytes of
 * `[A-Za-z0-9_.-]`, starting with a letter, with no `..` and no leading or trailing `.`; dots
 * separate namespaces (`code.csv_filter`).
 */
export function toolNameProblem(name: unknown): string | undefined {
  if (typeof name !== 'string') return 'must be a string';
  if (name.length === 0) return 'must not be empty';
  if (!NAME_CHARS.test(name)) return `may only hold A-Z a-z 0-9 _ . - (got ${JSON.stringify(name)})`;
  if (name.length > MAX_NAME_BYTES) return `must be at most ${MAX_NAME_BYTES} bytes (got ${name.length})`;
  if (!/^[A-Za-z]/.test(name)) return `must start with a letter (got ${JSON.stringify(name)})`;
  if (name.includes('..')) return `must not contain ".." (got ${JSON.stringify(name)})`;
  if (name.endsWith('.')) return `must not end with "." (got ${JSON.stringify(name)})`;
  return undefined;
}

/** True when `name` follows the tool name grammar (see `toolNameProblem`). */
export function isValidToolName(name: unknown): name is string {
  return toolNameProblem(name) === undefined;
}

/** What every tool name an MCP client sees matches (claude.ai, Claude Desktop, Codex, Copilot CLI). */
export const WIRE_NAME_PATTERN = /^[a-zA-Z0-9_-]{1,64}$/;

/** How many characters of the flattened name a long wire name keeps before `_` and its hash. */
const WIRE_PREFIX = 55;

/**
 * The name MCP clients see for the tool `name`: every `.` becomes `__`; when that is longer than
 * 64 characters, its first 55 characters, `_`, and the first 8 hex digits of sha256(`name`)
 * (exactly 64). A name without dots, up to 64 characters, is its own wire name. Deterministic and
 * pure; the result always matches {@link WIRE_NAME_PATTERN}. Two different names can share a wire
 * name (`a.b` and `a__b`): the registry refuses the second at forge time (`name_taken`). Throws
 * `invalid_option` for a string that is not a tool name (see `toolNameProblem`).
 */
export function wireName(name: string): string {
  const problem = toolNameProblem(name);
  if (problem) throw new RegistryError('invalid_option', `${JSON.stringify(name)} is not a tool name: it ${problem}`);
  return wireNameOfValid(name);
}

/** `wireName` of a name already known to be valid (the registry's own): no grammar check. */
export function wireNameOfValid(name: string): string {
  const flat = name.replaceAll('.', '__');
  if (flat.length <= MAX_NAME_BYTES) return flat;
  return `${flat.slice(0, WIRE_PREFIX)}_${createHash('sha256').update(name).digest('hex').slice(0, 8)}`;
}

/**
 * The key two names collide on: their wire names compared regardless of case (clients and file
 * systems that fold case would mix them up, and forge names already compare that way).
 */
export function wireKey(name: string): string {
  return wireName(name).toLowerCase();
}

/**
 * The lock two colliding names of one scope share: the first 55 characters of the flattened,
 * lower-cased name. Names that differ only by case, names with the same wire name regardless of
 * case, and a 64-character name equal to a long name's hashed wire name all agree on these 55
 * characters (others that do are merely serialized too). A valid file name: `[a-z0-9_-]`, starting
 * with a letter.
 */
export function wireLockKey(name: string): string {
  return name.replaceAll('.', '__').toLowerCase().slice(0, WIRE_PREFIX);
}
