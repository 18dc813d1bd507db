import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Ajv, ValidateFunction } from 'ajv';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain script, no declarations
import { DIALECTS, generateValidator } from '../scripts/generate-validator.mjs';
import makeMeta202012 from '../src/meta-2020-12.generated.js';
import makeMetaDraft07 from '../src/meta-draft-07.generated.js';

const require = createRequire(import.meta.url);

/** A live Ajv of `dialect` with the options tool schemas are compiled with, meta-schema compiled now. */
function liveAjv(dialect: '2020-12' | 'draft-07'): Ajv {
  const options = { allErrors: true, strict: false, logger: false as const };
  const ajv: Ajv = dialect === '2020-12' ? new (require('ajv/dist/2020.js').Ajv2020)(options) : new (require('ajv').Ajv)(options);
  require('ajv-formats').default(ajv);
  return ajv;
}

const PAIRS = [
  { dialect: '2020-12' as const, generated: makeMeta202012() as unknown as ValidateFunction, live: liveAjv('2020-12') },
  { dialect: 'draft-07' as const, generated: makeMetaDraft07() as unknown as ValidateFunction, live: liveAjv('draft-07') },
];

/** Schema-shaped values: JSON Schema keywords with values of the right and of the wrong type, nested. */
const KEYWORDS = [
  'type',
  'properties',
  'items',
  'prefixItems',
  'required',
  'enum',
  'const',
  'minimum',
  'exclusiveMaximum',
  'maxLength',
  'pattern',
  'format',
  '$ref',
  '$defs',
  'definitions',
  '$id',
  '$anchor',
  '$dynamicAnchor',
  '$comment',
  'anyOf',
  'allOf',
  'oneOf',
  'not',
  'if',
  'then',
  'else',
  'additionalProperties',
  'unevaluatedProperties',
  'dependentRequired',
  'propertyNames',
  'contains',
  'minItems',
  'uniqueItems',
  'title',
  'description',
  'default',
  'examples',
  'x-bind',
];
const leaf = fc.oneof(
  fc.constantFrom(
    'object',
    'string',
    'integer',
    'number',
    'array',
    'boolean',
    'null',
    'strin',
    '#/$defs/a',
    'a b',
    '^[a-z]+$',
    '(',
    'uri',
    'ro',
  ),
  fc.integer({ min: -3, max: 5 }),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.boolean(),
  fc.constant(null),
);
const schemaLike = fc.letrec((tie) => ({
  schema: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.boolean(),
    fc.dictionary(fc.constantFrom(...KEYWORDS), tie('value'), { maxKeys: 5 }),
  ),
  value: fc.oneof(
    { depthSize: 'small' },
    leaf,
    tie('schema'),
    fc.array(fc.oneof(leaf, tie('schema')), { maxLength: 3 }),
    fc.dictionary(fc.string({ maxLength: 3 }), tie('schema'), { maxKeys: 3 }),
  ),
}));
const schemaValue = schemaLike.value;
const jsonCopy = <T>(v: T): T => JSON.parse(JSON.stringify(v));

describe('the precompiled meta-schema validators', () => {
  it('are what the meta-schemas and the installed Ajv generate now (run `pnpm --filter @forge/registry generate` if not)', () => {
    for (const d of DIALECTS) expect(readFileSync(d.file, 'utf8') === generateValidator(d), `${d.file} is stale`).toBe(true);
  });

  it('give the verdict and the errors a live Ajv gives, for schemas good and bad', () => {
    fc.assert(
      // A tool's schema is an object (compileUncached refuses anything else before this check),
      // and JSON data: parsed from a file or a request, or a JSON copy of what an embedder gave.
      fc.property(fc.dictionary(fc.constantFrom(...KEYWORDS), schemaValue, { maxKeys: 6 }).map(jsonCopy), (schema) => {
        for (const { generated, live } of PAIRS) {
          const ok = live.validateSchema(schema as object);
          expect(generated(schema)).toBe(ok);
          expect(generated.errors ?? null).toEqual(live.errors ?? null);
        }
      }),
      { numRuns: 2000 },
    );
  });
});
