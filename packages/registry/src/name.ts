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
