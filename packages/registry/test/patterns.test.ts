import { describe, expect, it } from 'vitest';
import { compileToolSchema, type JsonSchema, VALIDATION_BUDGET_MS, validateSpec } from '../src/index.js';
import { spec } from './helpers.js';

/** The validator of `{s: string matching pattern}`, or a thrown error naming why it did not compile. */
function stringPattern(pattern: string): (s: string) => boolean {
  const c = compileToolSchema({ type: 'object', properties: { s: { type: 'string', pattern } } });
  if (!c.ok) throw new Error(c.message);
  return (s) => c.validate({ s }).ok;
}

function refusal(input_schema: JsonSchema): string[] {
  const r = validateSpec(spec({ input_schema }));
  if (r.ok) throw new Error('expected validation_failed');
  expect(r.kind).toBe('validation_failed');
  return r.problems.map((p) => `${p.path}: ${p.message}`);
}

// The attack review froze the server for 33 s with ^(a|a)*$ on 30 characters. Each of these
// backtracks exponentially on the hostile input in V8; the verdicts are asserted, not the time
// (on the old engine the test never gets to its assertions).
const CATASTROPHIC: Array<{ pattern: string; hostile: (n: number) => string; matching: (n: number) => string }> = [
  { pattern: '^(a|a)*$', hostile: (n) => `${'a'.repeat(n)}!`, matching: (n) => 'a'.repeat(n) },
  { pattern: '^(a|aa)*$', hostile: (n) => `${'a'.repeat(n)}!`, matching: (n) => 'a'.repeat(n) },
  { pattern: '(x+x+)+y', hostile: (n) => 'x'.repeat(n), matching: (n) => `${'x'.repeat(n)}y` },
  { pattern: '^(a+)+$', hostile: (n) => `${'a'.repeat(n)}!`, matching: (n) => 'a'.repeat(n) },
  { pattern: '^(\\w+\\s?)*$', hostile: (n) => `${'ab '.repeat(n / 3)}!`, matching: (n) => 'ab '.repeat(n / 3) },
  { pattern: '^((a*)*b)*$', hostile: (n) => `${'a'.repeat(n)}!`, matching: (n) => `${'a'.repeat(n)}b` },
];

describe('catastrophic patterns run in linear time', () => {
  for (const { pattern, hostile, matching } of CATASTROPHIC) {
    it(`${pattern} gives the right verdict on hostile inputs of 30, 1000 and 100000 characters`, () => {
      const test = stringPattern(pattern);
      for (const n of [30, 1000, 100_000]) {
        expect(test(hostile(n)), `${pattern} on ${n} hostile characters`).toBe(false);
        expect(test(matching(n)), `${pattern} on ${n} matching characters`).toBe(true);
      }
    });
  }

  it('also as a patternProperties key and a propertyNames pattern', () => {
    const c = compileToolSchema({
      type: 'object',
      patternProperties: { '^(a|aa)*$': { type: 'integer' } },
      propertyNames: { pattern: '^(a|a)*b?$' },
    });
    if (!c.ok) throw new Error(c.message);
    const hostile = `${'a'.repeat(100_000)}!`;
    expect(c.validate({ [hostile]: 1 })).toMatchObject({ ok: false, problems: [{ path: 'input' }, { path: 'input' }] });
    expect(c.validate({ [`${'a'.repeat(1000)}`]: 'not an integer' })).toMatchObject({
      ok: false,
      problems: [{ path: `input/${'a'.repeat(1000)}`, message: 'must be integer' }],
    });
    expect(c.validate({ [`${'a'.repeat(1000)}b`]: 'any' })).toEqual({ ok: true });
  });
});

describe('patterns a linear-time engine cannot match are refused at forge time', () => {
  it('names the schema path and the construct: backreferences and lookaround, wherever the pattern sits', () => {
    expect(
      refusal({
        type: 'object',
        properties: {
          twice: { type: 'string', pattern: '^(a+)\\1$' },
          named: { type: 'string', pattern: '^(?<q>["\'])\\w*\\k<q>$' },
          list: { type: 'array', items: { type: 'string', pattern: '^(?!tmp)\\w+$' } },
        },
        patternProperties: { '(?<=x_)id$': { type: 'string' } },
        propertyNames: { pattern: '^\\w+(?=_)' },
        $defs: { v: { type: 'string', pattern: '(?<!\\d)\\d{3}' } },
      }),
    ).toMatchInlineSnapshot(`
      [
        "input_schema/patternProperties/(?<=x_)id$: the key uses the lookbehind (?<=x_): forge matches patterns with a linear-time engine (so that no input can stall the server), which has no lookaround; rewrite the pattern without it, or check this in the tool",
        "input_schema/properties/twice/pattern: uses the backreference \\1: forge matches patterns with a linear-time engine (so that no input can stall the server), which has no backreferences; rewrite the pattern without it, or check this in the tool",
        "input_schema/properties/named/pattern: uses the backreference \\k<q>: forge matches patterns with a linear-time engine (so that no input can stall the server), which has no backreferences; rewrite the pattern without it, or check this in the tool",
        "input_schema/properties/list/items/pattern: uses the lookahead (?!tmp): forge matches patterns with a linear-time engine (so that no input can stall the server), which has no lookaround; rewrite the pattern without it, or check this in the tool",
        "input_schema/$defs/v/pattern: uses the lookbehind (?<!\\d): forge matches patterns with a linear-time engine (so that no input can stall the server), which has no lookaround; rewrite the pattern without it, or check this in the tool",
        "input_schema/propertyNames/pattern: uses the lookahead (?=_): forge matches patterns with a linear-time engine (so that no input can stall the server), which has no lookaround; rewrite the pattern without it, or check this in the tool",
      ]
    `);
  });

  it('refuses an output_schema pattern the same way', () => {
    const r = validateSpec(spec({ output_schema: { type: 'object', properties: { s: { type: 'string', pattern: '(a)\\1' } } } }));
    expect(r).toMatchObject({ ok: false, kind: 'validation_failed', problems: [{ path: 'output_schema/properties/s/pattern' }] });
  });

  it('refuses a count over 1000 and a Unicode property the engine lacks, saying what to use', () => {
    expect(
      refusal({
        type: 'object',
        properties: {
          long: { type: 'string', pattern: '^.{1,5000}$' },
          emoji: { type: 'string', pattern: '^\\p{Emoji}+$' },
        },
      }),
    ).toMatchInlineSnapshot(`
      [
        "input_schema/properties/long/pattern: repeats {1,5000}, more than the 1000 a linear-time pattern may count; bound a string's length with minLength/maxLength instead",
        "input_schema/properties/emoji/pattern: uses the Unicode property \\p{Emoji}, which forge's linear-time pattern engine does not know; use a General_Category (\\p{L}, \\p{Lu}, \\p{Nd}, …), a script by its long name (\\p{Script=Greek}), \\p{ASCII} or \\p{Any}, or list the characters in a class",
      ]
    `);
  });

  it('refuses a pattern under a keyword the annotation walk does not visit when ajv compiles it', () => {
    // draft-07 `dependencies` holds schemas too; the engine refuses the pattern there as well.
    const r = compileToolSchema({
      $schema: 'http://json-schema.org/draft-07/schema#',
      type: 'object',
      dependencies: { a: { properties: { b: { type: 'string', pattern: '(?=b)' } } } },
    });
    expect(r).toMatchObject({
      ok: false,
      kind: 'validation_failed',
      problems: [{ path: 'input_schema/dependencies/a/properties/b/pattern' }],
    });
  });
});

// Patterns people write, checked against V8's own engine: the linear engine must match exactly
// the same strings (ECMAScript's `.`, `\s`, `\w`, `\b`, `$`, Unicode escapes and properties).
const ORDINARY = [
  '^[a-z]+$',
  '^[A-Z][a-z]*$',
  '^\\d+$',
  '^\\D+$',
  '^\\d{3}-\\d{4}$',
  '^\\d{1,3}(\\.\\d{1,3}){3}$',
  '^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$',
  '^\\w+$',
  '^\\W+$',
  '^\\s*$',
  '^\\S+$',
  '^[\\S\\d]+$',
  '^[^\\s\\d]+$',
  '^[\\w\\s]+$',
  '^.+$',
  '^.$',
  '^[^]$',
  '^[]$',
  'foo',
  '\\bcat\\b',
  '\\Bcat',
  '^$',
  'a$',
  '^a',
  '^(a|b|)$',
  '^\\p{L}+$',
  '^\\p{Lu}',
  '^\\P{L}+$',
  '^[\\p{L}\\p{Nd}_-]+$',
  '^[^\\p{L}]+$',
  '^\\p{Script=Greek}+$',
  '^\\p{sc=Cyrillic}+$',
  '^\\p{Letter}+$',
  '^\\p{gc=Decimal_Number}+$',
  '^\\p{ASCII}+$',
  '^\\P{ASCII}$',
  '^[\\u0041-\\u005A]+$',
  '^\\u00e9$',
  '^\\u{1F600}$',
  '^\\ud83d\\ude00$',
  '^[😀-😂]+$',
  '^\\x41\\x42$',
  '^\\cJ$',
  '^\\0$',
  '^\\t\\n\\v\\f\\r$',
  '^a{2,4}$',
  '^a{3}$',
  '^a{2,}$',
  '^(?:ab|cd)*$',
  '^(?<y>\\d{4})-(?<m>\\d{2})$',
  '^a+?b*?$',
  '^[\\-\\]\\\\^]+$',
  '^\\/\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$$',
  '^[.]$',
  '^[$^]$',
  'é',
  '^[^a-z]$',
  '^[\\b]$',
  '^\\u2028$',
  '^[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}$',
  '^(\\+\\d{1,3} )?\\(?\\d{3}\\)?[ .-]?\\d{3}[ .-]?\\d{4}$',
  '^(?:[01]\\d|2[0-3]):[0-5]\\d$',
];
const SAMPLES = [
  '',
  'abc',
  'Abc',
  'ABC',
  '123',
  '123-4567',
  '192.168.0.1',
  'x@y.com',
  'a b',
  'a\nb',
  'a\rb',
  '\n',
  '\r',
  '\u2028',
  '\u2029',
  ' \t',
  '\u00a0',
  '\u1680',
  '\u2000',
  '\u200a',
  '\u202f',
  '\u3000',
  '\ufeff',
  '\u180e',
  '\u0085',
  '\v',
  '\f',
  '\t\n\v\f\r',
  'cat',
  'a cat b',
  'concat',
  'é',
  'É',
  'e\u0301',
  'ß',
  '😀',
  '😁',
  '\ud83d',
  '\ude00',
  '\ud800\ud800',
  'αβγ',
  'абв',
  '٣',
  '_',
  '\0',
  '\b',
  'AB',
  'aa',
  'aaaa',
  'aaaaa',
  'abcd',
  'abab',
  '2024-01',
  'ab*',
  '-]\\^',
  '/.*+?()[]{}|^$',
  '.',
  '$',
  'a\n',
  '+1 (555) 123-4567',
  '23:59',
  '24:00',
  'someone.name@example.co',
];

/** A deterministic generator (mulberry32), so a failure reproduces. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('ordinary patterns keep ECMAScript semantics', () => {
  it('matches exactly what V8 matches on tricky samples and seeded random strings', () => {
    const next = random(13);
    const alphabet = [
      ...'aAbBcz09_-.@ +/$^\\',
      '\n',
      '\r',
      '\t',
      '\v',
      '\u00a0',
      '\u2028',
      '\u3000',
      '\ufeff',
      'é',
      'ß',
      'α',
      'д',
      '😀',
      '\ud800',
    ];
    const inputs = [...SAMPLES];
    for (let i = 0; i < 300; i++) {
      let s = '';
      const len = Math.floor(next() * 8);
      for (let j = 0; j < len; j++) s += alphabet[Math.floor(next() * alphabet.length)];
      inputs.push(s);
    }
    const differences: string[] = [];
    for (const pattern of ORDINARY) {
      const native = new RegExp(pattern, 'u');
      const linear = stringPattern(pattern);
      for (const s of inputs) {
        if (linear(s) !== native.test(s)) differences.push(`${pattern} on ${JSON.stringify(s)}: V8 ${native.test(s)}`);
      }
    }
    expect(differences).toEqual([]);
  });
});

describe('validation time is bounded whatever the schema', () => {
  it('stops a schema whose anyOf branches reach the same $ref 2^40 times, on a one-character input', () => {
    const defs: Record<string, JsonSchema> = { d40: { type: 'string', minLength: 5 } };
    for (let i = 0; i < 40; i++) defs[`d${i}`] = { anyOf: [{ $ref: `#/$defs/d${i + 1}` }, { $ref: `#/$defs/d${i + 1}` }] };
    const c = compileToolSchema({ type: 'object', $defs: defs, properties: { s: { $ref: '#/$defs/d0' } } });
    if (!c.ok) throw new Error(c.message);
    expect(c.validate({ s: 'x' })).toMatchObject({
      ok: false,
      kind: 'validation_failed',
      problems: [{ path: 'input', message: expect.stringContaining(`validation was stopped after ${VALIDATION_BUDGET_MS} ms`) }],
    });
    // The same validator still answers the next call.
    expect(c.validate({})).toEqual({ ok: true });
  });

  it('stops uniqueItems comparing 50000 objects pairwise, and still checks small arrays', () => {
    const c = compileToolSchema({ type: 'object', properties: { rows: { type: 'array', uniqueItems: true } } });
    if (!c.ok) throw new Error(c.message);
    const rows = Array.from({ length: 50_000 }, (_, i) => ({ i }));
    expect(c.validate({ rows })).toMatchObject({ ok: false, problems: [{ path: 'input' }] });
    expect(c.validate({ rows: [{ i: 1 }, { i: 1 }] })).toMatchObject({ ok: false, problems: [{ path: 'input/rows' }] });
    expect(c.validate({ rows: [{ i: 1 }, { i: 2 }] })).toEqual({ ok: true });
  });

  it('stops a tree-shaped schema when its size times the data is too large, and checks small data directly', () => {
    // 300 subschemas that each test every item: no $ref, but 300 × 1000 × 1000 pattern steps.
    const items = { type: 'string', pattern: '^(a|aa)*$' };
    const c = compileToolSchema({ type: 'object', properties: { list: { allOf: Array.from({ length: 300 }, () => ({ items })) } } });
    if (!c.ok) throw new Error(c.message);
    expect(c.validate({ list: Array.from({ length: 1000 }, () => 'a'.repeat(1000)) })).toMatchObject({
      ok: false,
      problems: [{ path: 'input', message: expect.stringContaining('stopped after') }],
    });
    expect(c.validate({ list: ['aaa', 'aa'] })).toEqual({ ok: true });
    const bad = c.validate({ list: ['ab'] });
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(bad.problems[0]).toEqual({ path: 'input/list/0', message: 'must match pattern "^(a|aa)*$"' });
  });

  it('refuses data nested deeper than the stack instead of throwing', () => {
    const c = compileToolSchema({ type: 'object', properties: { c: { $ref: '#' } } });
    if (!c.ok) throw new Error(c.message);
    let deep: Record<string, unknown> = {};
    for (let i = 0; i < 200_000; i++) deep = { c: deep };
    expect(c.validate(deep)).toMatchObject({
      ok: false,
      kind: 'validation_failed',
      problems: [{ path: 'input', message: expect.stringContaining('nested too deeply') }],
    });
  });

  it('bounds the check of a spec example at forge time too', () => {
    const defs: Record<string, JsonSchema> = { d40: { type: 'string', minLength: 5 } };
    for (let i = 0; i < 40; i++) defs[`d${i}`] = { anyOf: [{ $ref: `#/$defs/d${i + 1}` }, { $ref: `#/$defs/d${i + 1}` }] };
    const r = validateSpec(
      spec({ input_schema: { type: 'object', $defs: defs, properties: { s: { $ref: '#/$defs/d0' } } }, examples: [{ input: { s: 'x' } }] }),
    );
    expect(r).toMatchObject({ ok: false, problems: [{ path: 'examples/0/input', message: expect.stringContaining('stopped after') }] });
  });
});
