import { compileToolSchema } from '@forge/registry';
import stableStringify from 'fast-json-stable-stringify';
import { describe, expect, it } from 'vitest';
import { generateProbes, type Probe } from '../src/probes.js';

/** The verdict forge enforces at call time, compiled here independently of the generator. */
function verdict(schema: Record<string, unknown>, input: unknown): boolean {
  const c = compileToolSchema(schema, { path: 'input_schema' });
  if (!c.ok) throw new Error(c.message);
  return c.validate(input).ok;
}

/** The invariants every probe list keeps. */
function checkInvariants(schema: Record<string, unknown>, probes: Probe[], max = 24): void {
  expect(probes.length).toBeLessThanOrEqual(max);
  for (const p of probes) expect(p.valid, p.label).toBe(verdict(schema, p.input));
  const firstInvalid = probes.findIndex((p) => !p.valid);
  if (firstInvalid >= 0) expect(probes.slice(firstInvalid).every((p) => !p.valid)).toBe(true);
  const keys = probes.map((p) => stableStringify(p.input));
  expect(new Set(keys).size).toBe(keys.length);
  for (const p of probes) expect(p.label.length).toBeGreaterThan(0);
}

const FOUR = {
  type: 'object',
  properties: {
    n: { type: 'integer', minimum: 0, maximum: 10 },
    mode: { type: 'string', enum: ['fast', 'slow', 'exact', 'fuzzy'] },
    q: { type: 'string', maxLength: 20 },
    verbose: { type: 'boolean' },
  },
  required: ['n', 'mode', 'q'],
  additionalProperties: false,
};

function byLabel(probes: Probe[]): Map<string, Probe> {
  return new Map(probes.map((p) => [p.label, p]));
}

describe('generateProbes', () => {
  it('a 4-property schema: boundaries, typical values, invalid ones, each classified by the validator', () => {
    const probes = generateProbes(FOUR, { max: 40 });
    checkInvariants(FOUR, probes, 40);
    const m = byLabel(probes);
    const want: Array<[string, boolean, Record<string, unknown>]> = [
      ['typical input', true, { n: 5, mode: 'fast', q: 'example' }],
      ['n at its minimum (0)', true, { n: 0, mode: 'fast', q: 'example' }],
      ['n at its maximum (10)', true, { n: 10, mode: 'fast', q: 'example' }],
      ['mode = "slow"', true, { n: 5, mode: 'slow', q: 'example' }],
      ['mode = "exact"', true, { n: 5, mode: 'exact', q: 'example' }],
      ['q empty ("")', true, { n: 5, mode: 'fast', q: '' }],
      ['q at its maximum length (20)', true, { n: 5, mode: 'fast', q: 'example'.padEnd(20, 'x') }],
      ['verbose present (true)', true, { n: 5, mode: 'fast', q: 'example', verbose: true }],
      ['verbose false', true, { n: 5, mode: 'fast', q: 'example', verbose: false }],
      ['n below its minimum (-1)', false, { n: -1, mode: 'fast', q: 'example' }],
      ['n above its maximum (11)', false, { n: 11, mode: 'fast', q: 'example' }],
      ['n of the wrong type (string)', false, { n: '42', mode: 'fast', q: 'example' }],
      ['mode not in its enum', false, { n: 5, mode: '__not_in_enum__', q: 'example' }],
      ['q too long (21)', false, { n: 5, mode: 'fast', q: 'example'.padEnd(21, 'x') }],
      ['missing required q', false, { n: 5, mode: 'fast' }],
      ['missing required n', false, { mode: 'fast', q: 'example' }],
      ['extra property "probe_extra" (additionalProperties is false)', false, { n: 5, mode: 'fast', q: 'example', probe_extra: 'x' }],
    ];
    for (const [label, valid, input] of want) {
      const p = m.get(label);
      expect(p, label).toBeDefined();
      expect(p?.valid, label).toBe(valid);
      expect(p?.input, label).toEqual(input);
    }
    // Only the first three enum values are probed.
    expect(m.has('mode = "fuzzy"')).toBe(false);
  });

  it('keeps to max (default 24), valid first, and shares the budget between valid and invalid', () => {
    const wide = {
      type: 'object',
      properties: Object.fromEntries(['a', 'b', 'c', 'd', 'e', 'f'].map((k) => [k, { type: 'integer', minimum: 0, maximum: 9 }])),
      required: ['a', 'b', 'c', 'd', 'e', 'f'],
    };
    const all = generateProbes(wide, { max: 100 });
    const def = generateProbes(wide);
    expect(all.length).toBeGreaterThan(24);
    expect(def.length).toBe(24);
    checkInvariants(wide, def);
    expect(def.filter((p) => p.valid).length).toBe(12);
    // The valid ones kept are the first generated: the typical input and a's boundaries.
    expect(def.slice(0, 3).map((p) => p.label)).toEqual(['typical input', 'a at its minimum (0)', 'a at its maximum (9)']);
    const five = generateProbes(FOUR, { max: 5 });
    checkInvariants(FOUR, five, 5);
    expect(five.length).toBe(5);
    expect(five.filter((p) => p.valid).length).toBe(3);
    expect(five.filter((p) => !p.valid).length).toBe(2);
    expect(generateProbes(FOUR, { max: 0 })).toEqual([]);
  });

  it('is deterministic', () => {
    const schemas = [FOUR, NESTED, ARRAY, DRAFT7];
    for (const s of schemas) expect(stableStringify(generateProbes(s))).toBe(stableStringify(generateProbes(structuredClone(s))));
  });

  it('a nested object: built with its required properties, its own properties probed', () => {
    const probes = generateProbes(NESTED, { max: 60 });
    checkInvariants(NESTED, probes, 60);
    const m = byLabel(probes);
    expect(m.get('typical input')).toMatchObject({ valid: true, input: { opts: { depth: 3 }, id: 'example' } });
    expect(m.get('opts.depth at its minimum (1)')).toMatchObject({ valid: true, input: { opts: { depth: 1 }, id: 'example' } });
    expect(m.get('opts.depth above its maximum (6)')).toMatchObject({ valid: false });
    expect(m.get('opts.name at its minimum length (2)')).toMatchObject({
      valid: true,
      input: { opts: { depth: 3, name: 'ex' }, id: 'example' },
    });
    expect(m.get('opts.name too short (1)')).toMatchObject({ valid: false });
    expect(m.get('missing required opts.depth')).toMatchObject({ valid: false, input: { opts: {}, id: 'example' } });
    expect(m.get('opts.extra property "probe_extra" (additionalProperties is false)')).toMatchObject({ valid: false });
    expect(m.get('opts of the wrong type (string)')).toMatchObject({ valid: false, input: { opts: '42', id: 'example' } });
    expect(m.get('id at its minimum length (3)')).toMatchObject({ valid: true });
  });

  it('an array with items: empty, minimum and maximum items, too few, too many, a wrong item', () => {
    const probes = generateProbes(ARRAY, { max: 60 });
    checkInvariants(ARRAY, probes, 60);
    const m = byLabel(probes);
    expect(m.get('typical input')).toMatchObject({ valid: true, input: { tags: ['examp'] } });
    expect(m.get('tags with its maximum items (3)')).toMatchObject({ valid: true, input: { tags: ['examp', 'exam1', 'exam2'] } });
    // minItems is 1: the empty array is refused, and the validator says so.
    expect(m.get('tags empty ([])')).toMatchObject({ valid: false });
    expect(m.get('tags with too many items (4)')).toMatchObject({ valid: false });
    expect(m.get('tags with an item of the wrong type (number)')).toMatchObject({ valid: false, input: { tags: [42] } });
    expect(m.get('limit present (1)')).toMatchObject({ valid: true });
  });

  it('draft-07: exclusive bounds, multipleOf and formats', () => {
    const probes = generateProbes(DRAFT7, { max: 60 });
    checkInvariants(DRAFT7, probes, 60);
    const m = byLabel(probes);
    expect(m.get('typical input')).toMatchObject({ valid: true, input: { step: 50, day: '2024-01-15', who: 'user@example.com' } });
    expect(m.get('step at its minimum (5)')).toMatchObject({ valid: true });
    expect(m.get('step at its maximum (95)')).toMatchObject({ valid: true });
    expect(m.get('step below its minimum (0)')).toMatchObject({ valid: false });
    expect(m.get('step above its maximum (100)')).toMatchObject({ valid: false });
    expect(m.get('day of the wrong type (number)')).toMatchObject({ valid: false });
  });

  it('formats are enforced as forge enforces them: a value the generator meant valid is classified by the validator', () => {
    const s = { type: 'object', properties: { when: { type: 'string', format: 'date-time', default: 'not a date' } }, required: ['when'] };
    const probes = generateProbes(s);
    checkInvariants(s, probes);
    expect(byLabel(probes).get('typical input')).toMatchObject({ valid: false, input: { when: 'not a date' } });
  });

  it('x-bind: a required one gives no probes; an optional one is never set', () => {
    const required = {
      type: 'object',
      properties: { path: { type: 'string', 'x-bind': 'ro' }, n: { type: 'integer' } },
      required: ['path'],
    };
    expect(generateProbes(required)).toEqual([]);
    const nested = {
      type: 'object',
      properties: { o: { type: 'object', properties: { p: { type: 'string', 'x-bind': 'rw' } }, required: ['p'] } },
      required: ['o'],
    };
    expect(generateProbes(nested)).toEqual([]);
    const optional = {
      type: 'object',
      properties: { path: { type: 'string', 'x-bind': 'ro' }, n: { type: 'integer', minimum: 1 } },
      required: ['n'],
    };
    const probes = generateProbes(optional, { examples: [{ path: '/etc/passwd', n: 2 }] });
    checkInvariants(optional, probes);
    expect(probes.length).toBeGreaterThan(0);
    for (const p of probes) expect(Object.keys(p.input)).not.toContain('path');
    // Deeper: an optional object that needs a bound path is never built, and an example's bound
    // values are dropped from the typical input it gives.
    const deep = {
      type: 'object',
      properties: {
        out: { type: 'object', properties: { file: { type: 'string', 'x-bind': 'rw' } }, required: ['file'] },
        cfg: { type: 'object', properties: { dir: { type: 'string', 'x-bind': 'ro' }, depth: { type: 'integer' } } },
        files: { type: 'array', items: { type: 'string', 'x-bind': 'ro' } },
      },
      required: ['cfg'],
    };
    const dp = generateProbes(deep, { max: 60, examples: [{ cfg: { dir: '/srv', depth: 2 }, files: ['/etc/hosts'] }] });
    checkInvariants(deep, dp, 60);
    expect(byLabel(dp).get('typical input')).toMatchObject({ valid: true, input: { cfg: { depth: 2 } } });
    for (const p of dp) {
      const text = JSON.stringify(p.input);
      expect(text).not.toContain('/srv');
      expect(text).not.toContain('/etc/hosts');
      expect(text).not.toContain('"file"');
      expect(text).not.toContain('"dir"');
      expect(text).not.toMatch(/"files":\["/);
    }
  });

  it('examples give the typical values; a pattern no example satisfies leaves only always-invalid probes', () => {
    const s = {
      type: 'object',
      properties: { sku: { type: 'string', pattern: '^[A-Z]{3}-\\d{4}$' }, n: { type: 'integer' } },
      required: ['sku', 'n'],
    };
    const withEx = generateProbes(s, { examples: [{ sku: 'ABC-1234', n: 7 }] });
    checkInvariants(s, withEx);
    expect(byLabel(withEx).get('typical input')).toMatchObject({ valid: true, input: { sku: 'ABC-1234', n: 7 } });
    const without = generateProbes(s);
    checkInvariants(s, without);
    expect(without.length).toBeGreaterThan(0);
    expect(without.every((p) => !p.valid)).toBe(true);
    expect(byLabel(without).has('missing required sku')).toBe(true);
    // A simple pattern is met from the built-in pool.
    const simple = { type: 'object', properties: { w: { type: 'string', pattern: '^[a-z]+$' } }, required: ['w'] };
    expect(byLabel(generateProbes(simple)).get('typical input')).toMatchObject({ valid: true, input: { w: 'example' } });
  });

  it('unsupported keywords do not crash; the validator still decides', () => {
    const schemas: Record<string, unknown>[] = [
      { type: 'object', $defs: { pos: { type: 'integer', minimum: 1 } }, properties: { a: { $ref: '#/$defs/pos' } }, required: ['a'] },
      {
        type: 'object',
        properties: { v: { oneOf: [{ type: 'string' }, { type: 'integer' }] }, w: { anyOf: [{ type: 'null' }, { type: 'boolean' }] } },
        required: ['v'],
      },
      { type: 'object', allOf: [{ required: ['x'] }], properties: { x: { type: 'integer' } } },
      { type: 'object', patternProperties: { '^s_': { type: 'string' } }, additionalProperties: false },
      {
        type: 'object',
        properties: { k: { type: 'string', enum: ['a', 'b'] }, v: { type: 'integer' } },
        if: { properties: { k: { const: 'a' } } },
        // biome-ignore lint/suspicious/noThenProperty: a JSON Schema keyword, not a thenable
        then: { required: ['v'] },
      },
      { type: 'object', properties: { t: { type: ['string', 'null'], maxLength: 3 } }, required: ['t'] },
    ];
    for (const s of schemas) {
      const probes = generateProbes(s);
      checkInvariants(s, probes);
    }
  });

  it('a schema that does not compile, or is not an object schema, gives no probes', () => {
    expect(generateProbes({ type: 'object', properties: { a: { type: 'nope' } } })).toEqual([]);
    expect(generateProbes({ type: 'string' })).toEqual([]);
    expect(generateProbes({ $schema: 'http://example.com/other', type: 'object' })).toEqual([]);
  });
});

const NESTED = {
  type: 'object',
  properties: {
    opts: {
      type: 'object',
      properties: { depth: { type: 'integer', minimum: 1, maximum: 5 }, name: { type: 'string', minLength: 2 } },
      required: ['depth'],
      additionalProperties: false,
    },
    id: { type: 'string', minLength: 3, maxLength: 12 },
  },
  required: ['opts', 'id'],
};

const ARRAY = {
  type: 'object',
  properties: {
    tags: { type: 'array', items: { type: 'string', maxLength: 5 }, minItems: 1, maxItems: 3, uniqueItems: true },
    limit: { type: 'integer' },
  },
  required: ['tags'],
};

const DRAFT7 = {
  $schema: 'http://json-schema.org/draft-07/schema#',
  type: 'object',
  properties: {
    step: { type: 'integer', exclusiveMinimum: 0, exclusiveMaximum: 100, multipleOf: 5 },
    day: { type: 'string', format: 'date' },
    who: { type: 'string', format: 'email' },
  },
  required: ['step', 'day', 'who'],
};
