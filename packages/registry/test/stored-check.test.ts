import { Ajv2020 } from 'ajv/dist/2020.js';
import formatsModule from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import schema from '../schema/tool-spec.schema.json' with { type: 'json' };
import { digestSpec } from '../src/index.js';
import { storedShapeProblem } from '../src/stored-check.js';
import { BY, spec } from './helpers.js';

// The load path checks stored files with a hand-written function; the published schema (stamps
// required) is the definition. This holds the two to the same verdict over many mutations.
const ajv = new Ajv2020({ allErrors: true, strict: true });
formatsModule.default(ajv);
ajv.addSchema(schema);
const bySchema = ajv.compile({
  type: 'object',
  allOf: [{ $ref: schema.$id }],
  required: ['version', 'digest', 'created_at', 'created_by', 'scope', 'state'],
});

function full(): Record<string, unknown> {
  const s = spec({
    output_schema: { type: 'object' },
    meta: {
      deterministic: true,
      secrets: ['GH_TOKEN', 'db.password'],
      timeout_ms: 1000,
      cpu_s: 0.5,
      output_cap: 4096,
      task_support: 'optional',
      annotations: { title: 'A tool', readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
    },
    examples: [{ input: { path: '/a' }, expect: 3 }, { input: {} }],
  });
  return {
    ...s,
    version: 2,
    digest: digestSpec(s),
    created_at: '2030-01-02T03:04:05.000Z',
    created_by: { ...BY },
    scope: 'user',
    state: 'active',
    origin: { project: '/p', digest: digestSpec(s) },
  };
}

const VALUES: unknown[] = [
  undefined,
  null,
  0,
  1,
  -1,
  1.5,
  '',
  'x',
  'python3',
  true,
  [],
  ['x'],
  {},
  { a: 1 },
  'a'.repeat(65),
  '😀'.repeat(40),
  '😀'.repeat(70),
  `sha256:${'a'.repeat(64)}`,
  `sha256:${'A'.repeat(64)}`,
  '2030-01-02T03:04:05Z',
  '2030-01-02T03:04:05+01:00',
  '2030-01-02 03:04:05Z',
  '2030-01-02T03:04:05',
  '2030-02-30T03:04:05Z',
  '2028-02-29T03:04:05.123Z',
  '2100-02-29T03:04:05Z',
  '2030-01-02T24:00:00Z',
  '2030-01-02T23:59:60Z',
  '2030-01-02T23:59:60+01:00',
  '2030-00-10T03:04:05Z',
  '2030-01-02t03:04:05z',
  'user',
  'retired',
  'optional',
  'required',
  'a..b',
  'a.b',
  'a.',
  '1a',
];

/** Every way of changing one place of `root`: each value, and deleting it; plus an extra key per object. */
function* mutations(): Generator<[string, Record<string, unknown>]> {
  const paths: string[][] = [];
  const walk = (node: unknown, at: string[]) => {
    if (typeof node !== 'object' || node === null) return;
    // Inside schemas any value is allowed; do not walk into them.
    if (['input_schema', 'output_schema', 'expect'].includes(at[at.length - 1] ?? '')) return;
    for (const [k, v] of Object.entries(node)) {
      paths.push([...at, k]);
      walk(v, [...at, k]);
    }
  };
  const base = full();
  walk(base, []);
  for (const p of paths) {
    for (const v of VALUES) {
      const m = structuredClone(base);
      let o: Record<string, unknown> = m;
      for (const k of p.slice(0, -1)) o = o[k] as Record<string, unknown>;
      const last = p[p.length - 1] ?? '';
      if (v === undefined) delete o[last];
      else o[last] = structuredClone(v);
      yield [`${p.join('/')} = ${JSON.stringify(v)}`, m];
    }
  }
  for (const p of [[], ...paths]) {
    const m = structuredClone(base);
    let o: unknown = m;
    for (const k of p) o = (o as Record<string, unknown>)[k];
    if (
      typeof o === 'object' &&
      o !== null &&
      !Array.isArray(o) &&
      !['input_schema', 'output_schema', 'input'].includes(p[p.length - 1] ?? '')
    ) {
      (o as Record<string, unknown>).surplus = 1;
      yield [`${p.join('/')}/surplus`, m];
    }
  }
  const dup = full();
  (dup.meta as { secrets: string[] }).secrets = ['A', 'A'];
  yield ['meta/secrets duplicates', dup];
  const many = full();
  many.examples = Array.from({ length: 65 }, () => ({ input: {} }));
  yield ['65 examples', many];
}

describe('storedShapeProblem', () => {
  it('accepts a full stored tool', () => {
    expect(bySchema(full())).toBe(true);
    expect(storedShapeProblem(full())).toBeUndefined();
  });

  it('agrees with the published schema on every single mutation', () => {
    let n = 0;
    const disagreements: string[] = [];
    for (const [label, value] of mutations()) {
      n++;
      const schemaSays = bySchema(value);
      const handSays = storedShapeProblem(value);
      if (schemaSays !== (handSays === undefined)) {
        disagreements.push(
          `${label}: schema ${schemaSays ? 'accepts' : `refuses (${ajv.errorsText(bySchema.errors)})`}, hand check ${handSays ?? 'accepts'}`,
        );
      }
    }
    expect(disagreements).toEqual([]);
    expect(n).toBeGreaterThan(900);
  });

  it('names the place and the problem', () => {
    expect(storedShapeProblem({ ...full(), runtime: 3 })).toBe('runtime: must be string');
    expect(storedShapeProblem({ ...full(), created_at: 'yesterday' })).toBe('created_at: must match format "date-time"');
    expect(storedShapeProblem({ ...full(), meta: { timeout: 5 } })).toBe(
      'meta: must NOT have the property "timeout"; remove it or check its spelling',
    );
    expect(storedShapeProblem([])).toBe('spec: must be object');
  });
});
