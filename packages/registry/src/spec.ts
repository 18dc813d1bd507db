import type { ValidateFunction } from 'ajv';
import toolSpecSchema from '../schema/tool-spec.schema.json' with { type: 'json' };
import { newAjv } from './ajv-lazy.js';
import { digestSpec, STAMP_FIELDS } from './digest.js';
import { ajvProblems, compileToolSchema, validationFailure } from './json-schema.js';
import { toolNameProblem } from './name.js';
import { storedShapeProblem } from './stored-check.js';
import type { SpecProblem, ToolSpec, ValidationFailure } from './types.js';

/** Runtime names accepted when the caller gives no list. */
export const DEFAULT_RUNTIMES: readonly string[] = Object.freeze(['python3', 'node', 'bash', 'sh']);

/** The published JSON Schema of a tool spec (also at `@forge/registry/schema/tool-spec.schema.json`). */
export const TOOL_SPEC_SCHEMA: Readonly<Record<string, unknown>> = toolSpecSchema;

let specShape: ValidateFunction | undefined;

/**
 * The submitted spec's shape, compiled on first use. The schema is ours and tested, so ajv does
 * not meta-validate it (that would compile the whole 2020-12 meta-schema).
 */
function specValidator(): ValidateFunction {
  if (!specShape) {
    const ajv = newAjv('2020-12', { allErrors: true, strict: true, logger: false, validateSchema: false });
    specShape = ajv.compile(toolSpecSchema);
  }
  return specShape;
}

/** Options of `validateSpec`. */
export interface ValidateSpecOptions {
  /** Runtime names the host can run (default `DEFAULT_RUNTIMES`). */
  runtimes?: readonly string[];
}

/** A valid spec: the digest it will be stored under. */
export interface SpecOk {
  ok: true;
  spec: ToolSpec;
  digest: string;
}

/**
 * Checks a submitted tool spec completely: its shape against `schema/tool-spec.schema.json`, the
 * name grammar, the runtime against `runtimes`, that `input_schema` (an object schema) and
 * `output_schema` compile as JSON Schema (2020-12 unless `$schema` says draft-07; any other
 * `$schema` is refused), forge's `x-bind`/`x-redact` annotations, and that every example's input
 * matches `input_schema`. Stamp fields, when present, are checked for shape and ignored
 * otherwise. On success returns the spec without stamps and its digest. Never throws.
 */
export function validateSpec(spec: unknown, options: ValidateSpecOptions = {}): SpecOk | ValidationFailure {
  if (typeof spec !== 'object' || spec === null || Array.isArray(spec)) {
    return validationFailure([{ path: '', message: 'must be a JSON object with name, description, input_schema, impl and runtime' }]);
  }
  const s = spec as Record<string, unknown>;
  const problems: SpecProblem[] = [];
  const nameProblem = 'name' in s ? toolNameProblem(s.name) : undefined;
  if (nameProblem) problems.push({ path: 'name', message: nameProblem });
  const v = specValidator();
  if (!v(spec)) {
    // The name's own message above is clearer than the schema's pattern error.
    for (const p of ajvProblems(v.errors, '')) if (!(nameProblem && p.path === 'name')) problems.push(p);
  }
  if (problems.length > 0) return validationFailure(problems);
  const tool = spec as unknown as ToolSpec;
  const runtimes = options.runtimes ?? DEFAULT_RUNTIMES;
  if (!runtimes.includes(tool.runtime)) {
    problems.push({
      path: 'runtime',
      message: `${JSON.stringify(tool.runtime)} is not a known runtime; use one of: ${runtimes.join(', ') || '(none configured)'}`,
    });
  }
  const input = compileToolSchema(tool.input_schema, { path: 'input_schema' });
  if (!input.ok) problems.push(...input.problems);
  if (tool.output_schema !== undefined) {
    const output = compileToolSchema(tool.output_schema, { path: 'output_schema' });
    if (!output.ok) problems.push(...output.problems);
  }
  if (input.ok && tool.examples) {
    tool.examples.forEach((ex, i) => {
      const r = input.validate(ex.input);
      if (!r.ok) for (const p of r.problems) problems.push({ path: `examples/${i}/${p.path}`, message: p.message });
    });
  }
  if (problems.length > 0) return validationFailure(problems);
  const bare = { ...tool } as Record<string, unknown>;
  for (const f of STAMP_FIELDS) delete bare[f];
  return { ok: true, spec: bare as unknown as ToolSpec, digest: digestSpec(bare) };
}

/**
 * The fast check a stored file gets when it is loaded: shape and stamps only (the published
 * schema with the stamps required). It compiles no tool schema and recomputes no digest; see
 * `toolValidators` and `verifyToolDigest` for those. Returns why the value is not a stored
 * tool, or `undefined`.
 */
export function storedToolProblem(value: unknown): string | undefined {
  const p = storedShapeProblem(value);
  return p && `not a valid tool spec: ${p}`;
}
