/**
 * Globs over tool and runtime names: `*` matches any run of characters (dots included, so
 * `code.*` covers every tool under `code.`), `?` exactly one; everything else is literal.
 * A list compiles to one anchored regular expression.
 */
export function compileGlobs(patterns: readonly string[]): RegExp {
  if (patterns.length === 0) return /(?!)/; // matches nothing
  const alts = patterns.map((p) =>
    p
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replaceAll('*', '.*')
      .replaceAll('?', '.'),
  );
  return new RegExp(`^(?:${alts.join('|')})$`);
}

/** The first pattern of `patterns` that matches `name`, if any (for messages; slower than compileGlobs). */
export function firstMatch(patterns: readonly string[], name: string): string | undefined {
  return patterns.find((p) => compileGlobs([p]).test(name));
}
