/**
 * Globs over tool and runtime names: `*` matches any run of characters (dots included, so
 * `code.*` covers every tool under `code.`), `?` exactly one; everything else is literal.
 *
 * Matching never backtracks exponentially: a glob like `*a*a*a*…b` compiled to a regular
 * expression costs O(n^k) on a near miss (seconds for a 64-character name), so each pattern is
 * matched by the classic two-pointer wildcard walk, O(pattern × name) at worst.
 */

/** A compiled list of globs. */
export interface GlobMatcher {
  /** True when `name` matches at least one of the globs. */
  test(name: string): boolean;
}

export interface GlobOptions {
  /**
   * Match regardless of ASCII case (`deploy_*` refuses `DEPLOY_prod`). For deny-lists, where a
   * case variant slipping through is the failure; allow-lists stay exact.
   */
  ignoreCase?: boolean;
}

const NOTHING: GlobMatcher = Object.freeze({ test: () => false });

/** Compiles `patterns` into one matcher (exact names are looked up in a set, the rest walked). */
export function compileGlobs(patterns: readonly string[], options: GlobOptions = {}): GlobMatcher {
  if (patterns.length === 0) return NOTHING;
  const fold = options.ignoreCase === true;
  const exact = new Set<string>();
  const wild: string[] = [];
  for (const raw of patterns) {
    const p = fold ? raw.toLowerCase() : raw;
    if (p.includes('*') || p.includes('?')) wild.push(collapseStars(p));
    else exact.add(p);
  }
  return {
    test(name: string): boolean {
      const n = fold ? name.toLowerCase() : name;
      if (exact.has(n)) return true;
      for (const p of wild) if (globMatch(p, n)) return true;
      return false;
    },
  };
}

/** The first pattern of `patterns` that matches `name`, if any (for messages). */
export function firstMatch(patterns: readonly string[], name: string, options: GlobOptions = {}): string | undefined {
  return patterns.find((p) => compileGlobs([p], options).test(name));
}

/** `a**b` is `a*b`: fewer restart points, same language. */
function collapseStars(p: string): string {
  return p.replace(/\*{2,}/g, '*');
}

/**
 * Whether `name` matches the glob `p`. On a mismatch after a `*`, the star takes one more
 * character and matching resumes after it: each (star, position) pair is visited once.
 */
export function globMatch(p: string, name: string): boolean {
  let pi = 0;
  let ni = 0;
  let star = -1;
  let mark = 0;
  while (ni < name.length) {
    const c = p.charCodeAt(pi);
    if (pi < p.length && (c === 0x3f /* ? */ || c === name.charCodeAt(ni))) {
      pi++;
      ni++;
    } else if (pi < p.length && c === 0x2a /* * */) {
      star = pi++;
      mark = ni;
    } else if (star >= 0) {
      pi = star + 1;
      ni = ++mark;
    } else return false;
  }
  while (pi < p.length && p.charCodeAt(pi) === 0x2a) pi++;
  return pi === p.length;
}
