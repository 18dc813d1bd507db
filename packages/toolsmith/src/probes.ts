import { compileToolSchema } from '@forge/registry';
import stableStringify from 'fast-json-stable-stringify';

/** One generated input and what forge's own validator says of it. */
export interface Probe {
  input: Record<string, unknown>;
  /** The verdict of the tool's input validator (the one forge enforces), never the generator's intent. */
  valid: boolean;
  /** What the probe exercises: `n at its minimum (0)`, `n of the wrong type (string)`, `missing required q`. */
  label: string;
}

/** Options of `generateProbes`. */
export interface ProbeOptions {
  /** Most probes returned (default 24). */
  max?: number;
  /** The proposal's example inputs: their values are the preferred typical values. */
  examples?: Array<Record<string, unknown>>;
}

type Schema = Record<string, unknown>;
/** A candidate before classification. */
type Candidate = { input: Record<string, unknown>; label: string };
/** A generated value, or `undefined` when none can be made (a pattern with no example). */
type Gen = { value: unknown } | undefined;

const DEFAULT_MAX = 24;
/** Nested objects deeper than this get no per-property probes of their own. */
const MAX_DEPTH = 3;
/** Lengths and item counts above this are not built (a probe stays small). */
const MAX_BUILD = 1000;
const FORMAT_VALUES: Record<string, string> = {
  date: '2024-01-15',
  'date-time': '2024-01-15T12:00:00Z',
  time: '12:00:00Z',
  email: 'user@example.com',
  uri: 'https://example.com/',
  'uri-reference': 'https://example.com/',
  url: 'https://example.com/',
  uuid: '123e4567-e89b-42d3-a456-426614174000',
  hostname: 'example.com',
  ipv4: '192.0.2.1',
  ipv6: '2001:db8::1',
};
/** Strings tried against a `pattern` when no example value is given. */
const PATTERN_POOL = [
  'example',
  'a',
  'abc',
  'A',
  'ABC',
  'Example',
  '0',
  '1',
  '123',
  'a1',
  'abc123',
  'a-b',
  'a_b',
  'a.b',
  'x@y.z',
  '2024-01-15',
];

function isObj(v: unknown): v is Schema {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

/** The type a subschema describes (the first non-null one of a list, else inferred), if any. */
function typeOf(s: Schema): string | undefined {
  const t = s.type;
  if (typeof t === 'string') return t;
  if (Array.isArray(t)) return (t.find((x) => x !== 'null') ?? t[0]) as string | undefined;
  if ('const' in s) return jsonType(s.const);
  if (Array.isArray(s.enum) && s.enum.length > 0) return jsonType(s.enum[0]);
  if (isObj(s.properties)) return 'object';
  if ('items' in s) return 'array';
  return undefined;
}

function jsonType(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

/** The inclusive bounds of a numeric subschema, snapped to `multipleOf`. */
function numBounds(s: Schema, integer: boolean): { lo?: number; hi?: number; m?: number } {
  const m = num(s.multipleOf) ?? (integer ? 1 : undefined);
  let lo = num(s.minimum);
  let hi = num(s.maximum);
  const exLo = num(s.exclusiveMinimum);
  const exHi = num(s.exclusiveMaximum);
  const step = m ?? 1;
  if (exLo !== undefined) lo = Math.max(lo ?? -Infinity, integer ? Math.floor(exLo) + 1 : exLo + step);
  if (exHi !== undefined) hi = Math.min(hi ?? Infinity, integer ? Math.ceil(exHi) - 1 : exHi - step);
  if (m !== undefined && m > 0) {
    if (lo !== undefined) lo = Math.ceil(lo / m) * m;
    if (hi !== undefined) hi = Math.floor(hi / m) * m;
  }
  return { lo, hi, m };
}

function stringOf(length: number): string {
  return 'example'.padEnd(length, 'x').slice(0, length);
}

/** A typical value of `s`: `hint` (an example's value), then `examples`/`default`/`const`/`enum`[0], then by type. */
function typical(s: unknown, hint: unknown, depth: number): Gen {
  // A host path is never made up, nor taken from an example.
  if (isObj(s) && 'x-bind' in s) return undefined;
  if (hint !== undefined) return { value: withoutBound(s, hint, depth) };
  if (!isObj(s)) return { value: 'example' };
  if (Array.isArray(s.examples) && s.examples.length > 0) return { value: s.examples[0] };
  if ('default' in s) return { value: s.default };
  if ('const' in s) return { value: s.const };
  if (Array.isArray(s.enum) && s.enum.length > 0) return { value: s.enum[0] };
  switch (typeOf(s)) {
    case 'integer':
    case 'number': {
      const integer = typeOf(s) === 'integer';
      const { lo, hi, m } = numBounds(s, integer);
      let v = lo !== undefined && hi !== undefined ? (lo + hi) / 2 : (lo ?? (hi !== undefined ? Math.min(hi, 1) : 1));
      if (m !== undefined && m > 0) v = Math.floor(v / m) * m;
      if (lo !== undefined && v < lo) v = lo;
      return { value: v };
    }
    case 'string':
      return typicalString(s);
    case 'boolean':
      return { value: true };
    case 'null':
      return { value: null };
    case 'array':
      return arrayOf(s, Math.min(Math.max(num(s.minItems) ?? 1, 1), num(s.maxItems) ?? Infinity), depth);
    case 'object':
      return objectBase(s, undefined, depth);
    default:
      return { value: 'example' };
  }
}

function typicalString(s: Schema): Gen {
  const min = num(s.minLength) ?? 0;
  const max = num(s.maxLength) ?? Infinity;
  if (typeof s.format === 'string' && FORMAT_VALUES[s.format]) return { value: FORMAT_VALUES[s.format] };
  if (typeof s.pattern === 'string') {
    let re: RegExp;
    try {
      re = new RegExp(s.pattern, 'u');
    } catch {
      return undefined;
    }
    const hit = PATTERN_POOL.find((c) => re.test(c) && c.length >= min && c.length <= max);
    return hit === undefined ? undefined : { value: hit };
  }
  if (min > MAX_BUILD) return undefined;
  return { value: stringOf(Math.min(Math.max(7, min), max)) };
}

/** The `items` subschema of an array (draft-07's tuple form: its first entry). */
function itemsOf(s: Schema): unknown {
  if (Array.isArray(s.items)) return s.items[0];
  return s.items;
}

function arrayOf(s: Schema, n: number, depth: number): Gen {
  if (n > MAX_BUILD) return undefined;
  const items = itemsOf(s);
  const out: unknown[] = [];
  for (let i = 0; i < n; i++) {
    const g = typical(items, undefined, depth + 1);
    if (!g) return undefined;
    // Distinct numbers when items must be unique (identical items would fail uniqueItems).
    out.push(s.uniqueItems === true && i > 0 ? distinct(g.value, i) : g.value);
  }
  return { value: out };
}

/** The `i`th variant of a number or string, same length for strings (so lengths still hold). */
function distinct(v: unknown, i: number): unknown {
  if (typeof v === 'number') return v + i;
  if (typeof v === 'string') return v.length === 0 ? String(i) : `${v.slice(0, Math.max(0, v.length - String(i).length))}${i}`;
  return v;
}

function propsOf(s: Schema): Record<string, unknown> {
  return isObj(s.properties) ? s.properties : {};
}

function requiredOf(s: Schema): string[] {
  return Array.isArray(s.required) ? s.required.filter((r): r is string => typeof r === 'string') : [];
}

/** An object of `s`'s required properties at typical values (`hints` first), or undefined. */
function objectBase(s: Schema, hints: Record<string, unknown> | undefined, depth: number): Gen {
  const props = propsOf(s);
  const out: Record<string, unknown> = {};
  for (const r of requiredOf(s)) {
    const g = typical(props[r], hints?.[r], depth + 1);
    if (!g) return undefined;
    out[r] = g.value;
  }
  return { value: out };
}

/** `v` (an example's value) without the values `s` marks `x-bind`, at any depth. */
function withoutBound(s: unknown, v: unknown, depth: number): unknown {
  if (!isObj(s) || depth > 16) return v;
  if (Array.isArray(v)) {
    const items = itemsOf(s);
    return isObj(items) && 'x-bind' in items ? [] : v.map((x) => withoutBound(items, x, depth + 1));
  }
  if (!isObj(v)) return v;
  const props = propsOf(s);
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) {
    const p = props[k];
    if (isObj(p) && 'x-bind' in p) continue;
    out[k] = withoutBound(p, x, depth + 1);
  }
  return out;
}

/** Whether a required property (at any depth along required objects) carries `x-bind`. */
function requiresBind(s: unknown, depth = 0): boolean {
  if (!isObj(s) || depth > 16) return false;
  const props = propsOf(s);
  return requiredOf(s).some((r) => {
    const p = props[r];
    return isObj(p) && ('x-bind' in p || requiresBind(p, depth + 1) || (isObj(p.items) && 'x-bind' in p.items));
  });
}

function isBound(p: unknown): boolean {
  return isObj(p) && ('x-bind' in p || (isObj(p.items) && 'x-bind' in p.items));
}

/** A wrong-typed value for a subschema of type `t`, and the name of its type. */
function wrongType(t: string | undefined): [unknown, string] {
  return t === 'string' ? [42, 'number'] : t === 'boolean' ? ['true', 'string'] : ['42', 'string'];
}

/** The first example value given for each top-level property. */
function exampleHints(examples: Array<Record<string, unknown>> | undefined): Record<string, unknown> {
  const hints: Record<string, unknown> = {};
  for (const ex of examples ?? []) {
    if (!isObj(ex)) continue;
    for (const [k, v] of Object.entries(ex)) if (!(k in hints)) hints[k] = v;
  }
  return hints;
}

/**
 * Candidates for each property of the object `s` whose current value is `base`; `put` makes a
 * whole input from a replacement of that object, `prefix` names it in labels.
 */
function propertyCandidates(
  s: Schema,
  base: Record<string, unknown>,
  prefix: string,
  put: (obj: Record<string, unknown>) => Record<string, unknown>,
  depth: number,
  out: { valid: Candidate[]; invalid: Candidate[] },
): void {
  const props = propsOf(s);
  const required = new Set(requiredOf(s));
  const withValue = (k: string, v: unknown) => put({ ...base, [k]: v });
  for (const [k, p] of Object.entries(props)) {
    if (isBound(p) || !isObj(p)) continue;
    const name = `${prefix}${k}`;
    const ok = (label: string, v: unknown) => out.valid.push({ input: withValue(k, v), label: `${name} ${label}` });
    const bad = (label: string, v: unknown) => out.invalid.push({ input: withValue(k, v), label: `${name} ${label}` });
    const t = typeOf(p);
    if (!required.has(k)) {
      const g = typical(p, undefined, depth + 1);
      if (g) ok(`present (${show(g.value)})`, g.value);
    }
    if (Array.isArray(p.enum)) {
      for (const v of p.enum.slice(0, 3)) ok(`= ${show(v)}`, v);
      bad('not in its enum', '__not_in_enum__');
    }
    const [wv, wt] = wrongType(t);
    if (t !== undefined) bad(`of the wrong type (${wt})`, wv);
    if (required.has(k)) {
      const { [k]: _, ...rest } = base;
      out.invalid.push({ input: put(rest), label: `missing required ${name}` });
    }
    if (Array.isArray(p.enum) || 'const' in p) continue;
    if (t === 'integer' || t === 'number') {
      const integer = t === 'integer';
      const { lo, hi, m } = numBounds(p, integer);
      const step = m ?? 1;
      if (lo !== undefined) {
        ok(`at its minimum (${lo})`, lo);
        bad(`below its minimum (${lo - step})`, lo - step);
      }
      if (hi !== undefined) {
        ok(`at its maximum (${hi})`, hi);
        bad(`above its maximum (${hi + step})`, hi + step);
      }
      if (integer) bad(`not an integer (${(lo ?? 0) + 0.5})`, (lo ?? 0) + 0.5);
    } else if (t === 'string' && typeof p.pattern !== 'string' && typeof p.format !== 'string') {
      const min = num(p.minLength);
      const max = num(p.maxLength);
      if (min !== undefined && min <= MAX_BUILD) ok(`at its minimum length (${min})`, stringOf(min));
      else ok('empty ("")', '');
      if (max !== undefined && max <= MAX_BUILD) ok(`at its maximum length (${max})`, stringOf(max));
      if (min !== undefined && min > 0 && min <= MAX_BUILD) bad(`too short (${min - 1})`, stringOf(min - 1));
      if (max !== undefined && max < MAX_BUILD) bad(`too long (${max + 1})`, stringOf(max + 1));
    } else if (t === 'boolean') {
      ok('true', true);
      ok('false', false);
    } else if (t === 'array') {
      const min = num(p.minItems);
      const max = num(p.maxItems);
      ok('empty ([])', []);
      if (min !== undefined && min > 0) {
        const g = arrayOf(p, min, depth);
        if (g) ok(`with its minimum items (${min})`, g.value);
        const few = arrayOf(p, min - 1, depth);
        if (few) bad(`with too few items (${min - 1})`, few.value);
      }
      if (max !== undefined) {
        const g = arrayOf(p, max, depth);
        if (g) ok(`with its maximum items (${max})`, g.value);
        const many = arrayOf(p, max + 1, depth);
        if (many) bad(`with too many items (${max + 1})`, many.value);
      }
      const it = itemsOf(p);
      if (isObj(it) && typeOf(it) !== undefined) {
        const [iv, itName] = wrongType(typeOf(it));
        bad(`with an item of the wrong type (${itName})`, [iv]);
      }
    } else if (t === 'object' && depth < MAX_DEPTH) {
      const cur = base[k];
      const g = isObj(cur) ? { value: cur } : typical(p, undefined, depth + 1);
      if (g && isObj(g.value)) {
        const nested = g.value;
        propertyCandidates(p, nested, `${name}.`, (obj) => withValue(k, obj), depth + 1, out);
      }
    }
  }
  if (s.additionalProperties === false) {
    const extra = 'probe_extra';
    if (!(extra in props))
      out.invalid.push({
        input: put({ ...base, [extra]: 'x' }),
        label: `${prefix || ''}extra property "${extra}" (additionalProperties is false)`,
      });
  }
}

function show(v: unknown): string {
  const t = stableStringify(v) ?? String(v);
  return t.length > 40 ? `${t.slice(0, 39)}…` : t;
}

/**
 * Probes for a tool's input JSON Schema (an object schema, draft 2020-12 or draft-07): a
 * typical valid input (required properties at typical values, preferring the values in
 * `examples`, then `examples`/`default`/`const`/`enum`[0] of the schema, else made from the type
 * and its bounds, formats and lengths), then per property boundary and typical values (minimum,
 * maximum, lengths, enum values up to 3, both booleans, empty and limit arrays, optional
 * properties present) and invalid values (wrong type, out of bounds, too short or long, not in the
 * enum, each required property missing, an extra property when `additionalProperties` is false).
 *
 * Every candidate is classified by forge's own input validator (`compileToolSchema` of
 * @forge/registry: the settings, formats and patterns forge enforces at call time), so `valid`
 * is the validator's verdict whatever the generator intended. Duplicates (canonical JSON) are
 * dropped. Valid probes come first; at most `max` (default 24), shared between valid and invalid
 * when there are more. Deterministic: the same schema and options give the same probes.
 *
 * `x-bind` properties (host paths) are never set; when one is required the result is `[]` (such
 * tools are validated by their examples only). A schema that does not compile gives `[]` (the
 * static check reports it). Keywords the generator does not model (`$ref`, `anyOf`, `if`, …)
 * give fewer meaningful probes, never a crash. A required value that cannot be made (a `pattern`
 * no example satisfies) leaves only probes that are invalid whatever the rest is.
 */
export function generateProbes(schema: Record<string, unknown>, o: ProbeOptions = {}): Probe[] {
  const max = Math.max(0, Math.floor(o.max ?? DEFAULT_MAX));
  if (!isObj(schema) || max === 0 || requiresBind(schema)) return [];
  const compiled = compileToolSchema(schema, { path: 'input_schema' });
  if (!compiled.ok) return [];
  const hints = exampleHints(o.examples);
  const out = { valid: [] as Candidate[], invalid: [] as Candidate[] };
  const base = objectBase(schema, hints, 0);
  if (base && isObj(base.value)) {
    const root = base.value;
    out.valid.push({ input: root, label: 'typical input' });
    propertyCandidates(schema, root, '', (obj) => obj, 0, out);
  } else {
    // No valid base: only probes invalid whatever the other values are.
    const props = propsOf(schema);
    for (const r of requiredOf(schema)) {
      const p = props[r];
      const t = isObj(p) ? typeOf(p) : undefined;
      const [wv, wt] = wrongType(t);
      if (t !== undefined) out.invalid.push({ input: { [r]: wv }, label: `${r} of the wrong type (${wt})` });
      out.invalid.push({ input: {}, label: `missing required ${r}` });
    }
  }
  const seen = new Set<string>();
  const valid: Probe[] = [];
  const invalid: Probe[] = [];
  for (const c of [...out.valid, ...out.invalid]) {
    const key = stableStringify(c.input);
    if (seen.has(key)) continue;
    seen.add(key);
    const verdict = compiled.validate(c.input).ok;
    (verdict ? valid : invalid).push({ input: c.input, valid: verdict, label: c.label });
  }
  // Share the budget: half each, the unused part of one side goes to the other.
  const half = Math.ceil(max / 2);
  const nValid = Math.min(valid.length, Math.max(half, max - invalid.length));
  const nInvalid = Math.min(invalid.length, max - nValid);
  return [...valid.slice(0, nValid), ...invalid.slice(0, nInvalid)];
}
