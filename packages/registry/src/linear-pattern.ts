import { createRequire } from 'node:module';
import type { AST, RegExpParser } from '@eslint-community/regexpp';
import type { RE2JS } from 're2js';

// A schema's `pattern` runs on hostile input in the server's own thread. A backtracking engine
// (V8's irregexp) takes exponential time on patterns such as ^(a|aa)*$, and no static check
// catches them all; an automaton engine (RE2) takes time linear in the input for every pattern.
// So every pattern ajv compiles is parsed as ECMAScript (what JSON Schema specifies), refused if
// it needs backtracking (backreferences, lookaround), and rewritten into RE2 syntax that keeps
// ECMAScript's meaning where the two differ (`.`, `\s`, `\uXXXX`, `[^]`, …), then run by re2js.
const require = createRequire(import.meta.url);

let parser: RegExpParser | undefined;
let re2: typeof RE2JS | undefined;

/** The most a counted repetition (`{n,m}`) may count: RE2's own limit, nesting included. */
export const MAX_PATTERN_REPEAT = 1000;

/** A pattern that cannot run in linear time, with why (the construct and what to do). */
export class PatternRefusal extends Error {
  override name = 'PatternRefusal';
}

/** Code point sets as sorted, disjoint, inclusive ranges. */
type Ranges = ReadonlyArray<readonly [number, number]>;

const MAX_CP = 0x10ffff;
const DIGIT: Ranges = [[0x30, 0x39]];
// ECMAScript \w without the i flag: ASCII only, even with u.
const WORD: Ranges = [
  [0x30, 0x39],
  [0x41, 0x5a],
  [0x5f, 0x5f],
  [0x61, 0x7a],
];
// ECMAScript \s: WhiteSpace (TAB, VT, FF, ZWNBSP, Zs) and LineTerminator. RE2's \s is only
// [\t\n\f\r ], so it is spelled out.
const SPACE: Ranges = [
  [0x09, 0x0d],
  [0x20, 0x20],
  [0xa0, 0xa0],
  [0x1680, 0x1680],
  [0x2000, 0x200a],
  [0x2028, 0x2029],
  [0x202f, 0x202f],
  [0x205f, 0x205f],
  [0x3000, 0x3000],
  [0xfeff, 0xfeff],
];
// ECMAScript `.` without the s flag excludes every LineTerminator; RE2's excludes only \n.
const LINE_TERMINATORS: Ranges = [
  [0x0a, 0x0a],
  [0x0d, 0x0d],
  [0x2028, 0x2029],
];

function complement(r: Ranges): Ranges {
  const out: Array<[number, number]> = [];
  let next = 0;
  for (const [a, b] of r) {
    if (a > next) out.push([next, a - 1]);
    next = b + 1;
  }
  if (next <= MAX_CP) out.push([next, MAX_CP]);
  return out;
}

const cp = (c: number): string => `\\x{${c.toString(16)}}`;
const rangesText = (r: Ranges): string => r.map(([a, b]) => (a === b ? cp(a) : `${cp(a)}-${cp(b)}`)).join('');

// General_Category long names → the short names RE2 knows.
const CATEGORY: Record<string, string> = {
  Other: 'C',
  Control: 'Cc',
  cntrl: 'Cc',
  Format: 'Cf',
  Unassigned: 'Cn',
  Private_Use: 'Co',
  Surrogate: 'Cs',
  Letter: 'L',
  Cased_Letter: 'LC',
  Lowercase_Letter: 'Ll',
  Modifier_Letter: 'Lm',
  Other_Letter: 'Lo',
  Titlecase_Letter: 'Lt',
  Uppercase_Letter: 'Lu',
  Mark: 'M',
  Combining_Mark: 'M',
  Spacing_Mark: 'Mc',
  Enclosing_Mark: 'Me',
  Nonspacing_Mark: 'Mn',
  Number: 'N',
  Decimal_Number: 'Nd',
  digit: 'Nd',
  Letter_Number: 'Nl',
  Other_Number: 'No',
  Punctuation: 'P',
  punct: 'P',
  Connector_Punctuation: 'Pc',
  Dash_Punctuation: 'Pd',
  Close_Punctuation: 'Pe',
  Final_Punctuation: 'Pf',
  Initial_Punctuation: 'Pi',
  Other_Punctuation: 'Po',
  Open_Punctuation: 'Ps',
  Symbol: 'S',
  Currency_Symbol: 'Sc',
  Modifier_Symbol: 'Sk',
  Math_Symbol: 'Sm',
  Other_Symbol: 'So',
  Separator: 'Z',
  Line_Separator: 'Zl',
  Paragraph_Separator: 'Zp',
  Space_Separator: 'Zs',
};
// Binary properties RE2 has no name for, as ranges.
const BINARY: Record<string, Ranges> = {
  Any: [[0, MAX_CP]],
  ASCII: [[0, 0x7f]],
  ASCII_Hex_Digit: [
    [0x30, 0x39],
    [0x41, 0x46],
    [0x61, 0x66],
  ],
  AHex: [
    [0x30, 0x39],
    [0x41, 0x46],
    [0x61, 0x66],
  ],
};

/** A `\p{…}` escape as the text of a class item (inside `[…]`). */
function propertyItem(s: AST.UnicodePropertyCharacterSet): string {
  const binary = s.value === null ? BINARY[s.key] : undefined;
  if (binary) return rangesText(s.negate ? complement(binary) : binary);
  let name: string | undefined;
  if (s.key === 'General_Category' || s.key === 'gc') name = s.value === null ? undefined : (CATEGORY[s.value] ?? s.value);
  else if (s.key === 'Script' || s.key === 'sc') name = s.value ?? undefined;
  else if (s.value === null) name = CATEGORY[s.key];
  if (name === undefined || !/^[A-Za-z_]+$/.test(name) || !re2Compiles(`\\p{${name}}`)) {
    throw new PatternRefusal(
      `uses the Unicode property ${s.raw}, which forge's linear-time pattern engine does not know; use a General_Category (\\p{L}, \\p{Lu}, \\p{Nd}, …), a script by its long name (\\p{Script=Greek}), \\p{ASCII} or \\p{Any}, or list the characters in a class`,
    );
  }
  return `\\${s.negate ? 'P' : 'p'}{${name}}`;
}

function re2Compiles(source: string): boolean {
  try {
    re2Engine().compile(source);
    return true;
  } catch {
    return false;
  }
}

/** A class escape (`\d`, `\S`, `\p{L}`, …) as the text of a class item. */
function setItem(s: AST.EscapeCharacterSet | AST.UnicodePropertyCharacterSet): string {
  if (s.kind === 'property') return propertyItem(s);
  const r = s.kind === 'digit' ? DIGIT : s.kind === 'word' ? WORD : SPACE;
  return rangesText(s.negate ? complement(r) : r);
}

function classText(c: AST.CharacterClass): string {
  const items: string[] = [];
  for (const e of c.elements) {
    if (e.type === 'Character') items.push(cp(e.value));
    else if (e.type === 'CharacterClassRange') items.push(`${cp(e.min.value)}-${cp(e.max.value)}`);
    else if (e.type === 'CharacterSet') items.push(setItem(e));
    else throw new PatternRefusal(`uses the class syntax ${e.raw}, which needs the v flag; JSON Schema patterns use the u flag`);
  }
  // [] matches nothing and [^] everything; RE2 has no spelling of either.
  if (items.length === 0) return c.negate ? `[${cp(0)}-${cp(MAX_CP)}]` : `[^${cp(0)}-${cp(MAX_CP)}]`;
  return `[${c.negate ? '^' : ''}${items.join('')}]`;
}

function counted(q: AST.Quantifier): string {
  const { min, max } = q;
  if (min > MAX_PATTERN_REPEAT || (max !== Number.POSITIVE_INFINITY && max > MAX_PATTERN_REPEAT)) {
    throw new PatternRefusal(
      `repeats ${q.raw.slice(q.element.raw.length)}, more than the ${MAX_PATTERN_REPEAT} a linear-time pattern may count; bound a string's length with minLength/maxLength instead`,
    );
  }
  if (max === Number.POSITIVE_INFINITY) return min === 0 ? '*' : min === 1 ? '+' : `{${min},}`;
  if (min === 0 && max === 1) return '?';
  return min === max ? `{${min}}` : `{${min},${max}}`;
}

function elementText(e: AST.Element): string {
  switch (e.type) {
    case 'Character':
      return cp(e.value);
    case 'CharacterClass':
      return classText(e);
    case 'CharacterSet':
      if (e.kind === 'any') return `[^${rangesText(LINE_TERMINATORS)}]`;
      return `[${setItem(e)}]`;
    case 'Group':
    case 'CapturingGroup':
      // Capturing or not, `test` only asks whether it matches.
      return `(?:${e.alternatives.map(alternativeText).join('|')})`;
    case 'Quantifier':
      // Lazy or greedy matches the same strings.
      return `(?:${elementText(e.element)})${counted(e)}`;
    case 'Assertion':
      if (e.kind === 'start') return '^';
      if (e.kind === 'end') return '$';
      if (e.kind === 'word') return e.negate ? '\\B' : '\\b';
      throw new PatternRefusal(
        `uses the ${e.kind} ${e.raw}: forge matches patterns with a linear-time engine (so that no input can stall the server), which has no lookaround; rewrite the pattern without it, or check this in the tool`,
      );
    case 'Backreference':
      throw new PatternRefusal(
        `uses the backreference ${e.raw}: forge matches patterns with a linear-time engine (so that no input can stall the server), which has no backreferences; rewrite the pattern without it, or check this in the tool`,
      );
    default:
      throw new PatternRefusal(`uses ${(e as { raw: string }).raw}, which forge's linear-time pattern engine does not support`);
  }
}

function alternativeText(a: AST.Alternative): string {
  return a.elements.map(elementText).join('');
}

function re2Engine(): typeof RE2JS {
  re2 ??= (require('re2js') as typeof import('re2js')).RE2JS;
  return re2;
}

/**
 * `pattern` (ECMAScript syntax with the u flag, as JSON Schema specifies) in RE2 syntax that
 * matches exactly the same strings. Throws a `SyntaxError` for a pattern that is not valid
 * ECMAScript, and a `PatternRefusal` for one that needs backtracking or exceeds RE2's limits.
 */
export function toRe2Syntax(pattern: string): string {
  parser ??= new (require('@eslint-community/regexpp') as typeof import('@eslint-community/regexpp')).RegExpParser({
    // ECMAScript 2024: what Node 20 accepts with the u flag (no inline modifiers), on every Node.
    ecmaVersion: 2024,
  });
  const ast = parser.parsePattern(pattern, 0, pattern.length, { unicode: true });
  return ast.alternatives.map(alternativeText).join('|');
}

/** What ajv needs of a compiled pattern. */
export interface LinearRegExp {
  test(input: string): boolean;
  toString(): string;
}

/**
 * Compiles a JSON Schema pattern for linear-time matching (re2js). Throws `PatternRefusal`
 * (backreference, lookaround, a count over 1000, an unknown Unicode property, a pattern too large
 * for RE2) or `SyntaxError` (not a valid ECMAScript pattern); never falls back to a backtracking
 * engine.
 */
export function compileLinearPattern(pattern: string): LinearRegExp {
  const source = toRe2Syntax(pattern);
  let re: RE2JS;
  try {
    re = re2Engine().compile(source);
  } catch (err) {
    const why = err instanceof Error ? err.message.replace(/^error parsing regexp: /, '') : String(err);
    throw new PatternRefusal(`is too large or too deeply repeated for forge's linear-time pattern engine (${why}); simplify it`);
  }
  return {
    test: (input) => re.test(input),
    // ajv keys its compiled patterns by this text.
    toString: () => `/${pattern}/u`,
  };
}

/**
 * Why `pattern` cannot be a schema pattern in forge, or `undefined` when it can. A pattern that is
 * not valid ECMAScript is not reported here (ajv reports it, against the meta-schema).
 */
export function linearPatternProblem(pattern: string): string | undefined {
  try {
    compileLinearPattern(pattern);
    return undefined;
  } catch (err) {
    return err instanceof PatternRefusal ? err.message : undefined;
  }
}

/**
 * ajv's `code.regExp` engine: every `pattern`, `patternProperties` key (and so `propertyNames`
 * patterns and `additionalProperties` next to `patternProperties`) compiles through
 * `compileLinearPattern`. ajv passes `"u"` (its `unicodeRegExp` default).
 */
export const linearRegExpEngine = Object.assign(
  (pattern: string, flags: string): LinearRegExp => {
    if (flags !== 'u') throw new PatternRefusal(`is compiled with flags "${flags}"; forge compiles schema patterns with "u" only`);
    return compileLinearPattern(pattern);
  },
  // Only read by ajv's standalone code generation, which forge does not use.
  { code: 'forge-linear-pattern' },
);
