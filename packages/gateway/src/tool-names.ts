import { wireName } from '@forge/runner';

/** The tool-name grammar of forge: 1–64 bytes of `[A-Za-z0-9_.-]`, a letter first, no `..`, no trailing `.`. */
export function isForgeToolName(name: string): boolean {
  return /^[A-Za-z][A-Za-z0-9_.-]*$/.test(name) && !name.includes('..') && !name.endsWith('.') && Buffer.byteLength(name) <= 64;
}

/** The key two forge names collide on over MCP: the wire name (dots become `__`), case folded. */
export function wireKeyOf(name: string): string {
  try {
    return wireName(name).toLowerCase();
  } catch {
    return name.replaceAll('.', '__').toLowerCase();
  }
}

/**
 * The first of `names` that would take the wire name of another: two forge names with one wire
 * name (`x.a__b` and `x__a.b` are both `x__a__b` on the wire) cannot both be served, so the
 * second is refused when approved, never dropped silently. `pinned` are the names approved already.
 */
export function wireClash(pinned: Iterable<string>, names: readonly string[]): { name: string; holder: string } | undefined {
  const wired = new Map<string, string>();
  for (const n of pinned) wired.set(wireKeyOf(n), n);
  for (const name of names) {
    const holder = wired.get(wireKeyOf(name));
    if (holder !== undefined && holder !== name) return { name, holder };
    wired.set(wireKeyOf(name), name);
  }
  return undefined;
}
