import { createRequire } from 'node:module';
import type { Context, Script } from 'node:vm';
import type { Ajv, ErrorObject, Options, ValidateFunction } from 'ajv';
import stableStringify from 'fast-json-stable-stringify';
import { newAjv } from './ajv-lazy.js';
import { linearPatternProblem, linearRegExpEngine, PatternRefusal } from './linear-pattern.js';
import makeMeta202012 from './meta-2020-12.generated.js';
import makeMetaDraft07 from './meta-draft-07.generated.js';
import type { JsonSchema, SpecProblem, ValidationFailure } from './types.js';

/** The JSON Schema dialects a tool schema may use. */
export type SchemaDialect = '2020-12' | 'draft-07';

/** `$schema` values accepted for each dialect (with or without the trailing `#`, http or https). */
const DIALECTS: ReadonlyArray<{ dialect: SchemaDialect; ids: string[]; canonical: string }> = [
  {
    dialect: '2020-12',
    ids: ['https://json-schema.org/draft/2020-12/schema', 'http://json-schema.org/draft/2020-12/schema'],
    canonical: 'https://json-schema.org/draft/2020-12/schema',
  },
  {
    dialect: 'draft-07',
    ids: ['http://json-schema.org/draft-07/schema', 'https://json-schema.org/draft-07/schema'],
    canonical: 'http://json-schema.org/draft-07/schema',
  },
];

/**
 * The ajv settings every tool schema is compiled with, here and in the runner:
 * - `strict: false`: unknown keywords and unknown `format`s are ignored, as the JSON Schema
 *   specification says, so a schema written for another validator still compiles. Formats that
 *   ajv-formats knows (`date-time`, `email`, `uri`, `ipv4`, …) are checked.
 * - `allErrors: true`: a failed input reports every problem, not only the first.
 * - forge's annotations are known keywords: `x-bind` (`"ro"` | `"rw"`) and `x-redact` (boolean).
 * - `$ref` resolves only inside the schema; nothing is fetched.
 * - `code.regExp`: every `pattern` and `patternProperties` key (so `propertyNames` patterns too)
 *   runs on a linear-time engine (re2js, through `linear-pattern.ts`) with ECMAScript's meaning;
 *   a pattern that needs backtracking (backreferences, lookaround) does not compile.
 */
export const TOOL_SCHEMA_AJV_OPTIONS: Readonly<Options> = Object.freeze({
  allErrors: true,
  strict: false,
  logger: false,
  code: Object.freeze({ regExp: linearRegExpEngine }),
});

const ajvs = new Map<SchemaDialect, Ajv>();

/**
 * Each dialect's meta-schema, compiled ahead of time with the options below (scripts/
 * generate-validator.mjs) and made at its first use: a tool's schema is checked against it without
 * compiling the meta-schema in this process, and ajv itself then skips that check.
 */
const META_MAKERS: Record<SchemaDialect, () => unknown> = { '2020-12': makeMeta202012, 'draft-07': makeMetaDraft07 };
const metas = new Map<SchemaDialect, ValidateFunction>();
function metaFor(dialect: SchemaDialect): ValidateFunction {
  let v = metas.get(dialect);
  if (!v) {
    v = META_MAKERS[dialect]() as ValidateFunction;
    metas.set(dialect, v);
  }
  return v;
}

/** The shared ajv instance of a dialect, created on first use (never at import). */
function ajvFor(dialect: SchemaDialect): Ajv {
  let ajv = ajvs.get(dialect);
  if (!ajv) {
    ajv = newAjv(dialect, { ...TOOL_SCHEMA_AJV_OPTIONS, validateSchema: false });
    ajv.addKeyword({ keyword: 'x-bind', metaSchema: { enum: ['ro', 'rw'] } });
    ajv.addKeyword({ keyword: 'x-redact', metaSchema: { type: 'boolean' } });
    ajvs.set(dialect, ajv);
  }
  return ajv;
}

/** The dialect `schema.$schema` names (2020-12 when absent), or a problem naming the accepted ones. */
export function schemaDialect(schema: JsonSchema, path: string): { dialect: SchemaDialect; canonical: string } | SpecProblem {
  const declared = schema.$schema;
  if (declared === undefined) return { dialect: '2020-12', canonical: DIALECTS[0]?.canonical ?? '' };
  if (typeof declared === 'string') {
    const bare = declared.endsWith('#') ? declared.slice(0, -1) : declared;
    for (const d of DIALECTS) if (d.ids.includes(bare)) return { dialect: d.dialect, canonical: d.canonical };
  }
  return {
    path: `${path}/$schema`,
    message: `${JSON.stringify(declared)} is not a supported JSON Schema dialect; use "https://json-schema.org/draft/2020-12/schema" (the default when $schema is absent) or "http://json-schema.org/draft-07/schema#"`,
  };
}

/** Appends an ajv instance path (`/a/b`, already a JSON pointer) to a spec path. */
function joinPath(prefix: string, instancePath: string): string {
  if (!instancePath) return prefix;
  return prefix ? `${prefix}${instancePath}` : instancePath.slice(1);
}

function describe(e: ErrorObject): string {
  const p = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case 'enum':
      return `${e.message} (${(p.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')})`;
    case 'const':
      return `must be ${JSON.stringify(p.allowedValue)}`;
    case 'additionalProperties':
      return `must NOT have the property ${JSON.stringify(p.additionalProperty)}; remove it or check its spelling`;
    case 'unevaluatedProperties':
      return `must NOT have the property ${JSON.stringify(p.unevaluatedProperty)}`;
    default:
      return e.message ?? `fails "${e.keyword}"`;
  }
}

/**
 * ajv errors as problems under `prefix`. ajv reports a failed `anyOf`/`oneOf` once per branch
 * plus once for itself, all at the same place; there only the first error is kept.
 */
export function ajvProblems(errors: readonly ErrorObject[] | null | undefined, prefix: string): SpecProblem[] {
  const list = errors ?? [];
  const branched = new Set(list.filter((e) => e.keyword === 'anyOf' || e.keyword === 'oneOf').map((e) => e.instancePath));
  const out: SpecProblem[] = [];
  const seen = new Set<string>();
  for (const e of list) {
    const key = branched.has(e.instancePath) ? e.instancePath : `${e.instancePath}\0${e.schemaPath}\0${JSON.stringify(e.params)}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push({ path: joinPath(prefix, e.instancePath), message: describe(e) });
  }
  return out;
}

/** How many problems a failure's `message` spells out (all are in `problems`). */
const MESSAGE_PROBLEMS = 5;

/** A `validation_failed` failure from problems; the message lists them as `path: message; …`. */
export function validationFailure(problems: SpecProblem[], subject = 'spec'): ValidationFailure {
  const shown = problems.slice(0, MESSAGE_PROBLEMS).map((p) => `${p.path || subject}: ${p.message}`);
  if (problems.length > MESSAGE_PROBLEMS) shown.push(`and ${problems.length - MESSAGE_PROBLEMS} more`);
  return { ok: false, kind: 'validation_failed', message: shown.join('; '), problems };
}

/** Keywords whose value is a map of name → subschema. */
const SCHEMA_MAPS = ['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas', 'dependencies'];
/** Keywords whose value is a subschema. */
const SCHEMA_VALUES = [
  'items',
  'additionalItems',
  'additionalProperties',
  'unevaluatedItems',
  'unevaluatedProperties',
  'contains',
  'propertyNames',
  'not',
  'if',
  'then',
  'else',
];
/** Keywords whose value is an array of subschemas. */
const SCHEMA_ARRAYS = ['allOf', 'anyOf', 'oneOf', 'prefixItems', 'items'];

/**
 * The keywords through which the runner finds the input values that `x-bind` and `x-redact`
 * mark (it walks the schema along the input). An annotation under any other keyword
 * (`patternProperties`, `if`/`then`, `not`, …) would be silently ignored at call time: a path
 * not bound, a value shown unredacted in run manifests. So it is refused here instead.
 */
const FOLLOWED = new Set(['properties', 'additionalProperties', 'items', 'prefixItems', 'allOf', 'anyOf', 'oneOf', '$defs', 'definitions']);

/**
 * Checks forge's annotations wherever they appear in a schema: `x-bind` must be `"ro"` or `"rw"`
 * on a string schema (its value is a host path), `x-redact` must be a boolean, and both must sit
 * where the runner looks for them (`via` is the first keyword on the way down it does not follow).
 */
function annotationProblems(node: unknown, path: string, out: SpecProblem[], via?: string): void {
  if (typeof node !== 'object' || node === null || Array.isArray(node)) return;
  const s = node as JsonSchema;
  if (via !== undefined) {
    for (const a of ['x-bind', 'x-redact'] as const) {
      if (a in s) {
        out.push({
          path: `${path}/${a}`,
          message: `is not read under "${via}": forge finds ${a} through properties, additionalProperties, items, prefixItems, allOf, anyOf, oneOf and $ref; move it there`,
        });
      }
    }
  }
  if ('x-bind' in s) {
    if (s['x-bind'] !== 'ro' && s['x-bind'] !== 'rw') {
      out.push({ path: `${path}/x-bind`, message: `must be "ro" or "rw" (got ${JSON.stringify(s['x-bind'])})` });
    } else if (!(s.type === 'string' || (Array.isArray(s.type) && s.type.includes('string')))) {
      out.push({ path: `${path}/x-bind`, message: 'may only mark a string property (its value is a host path); add "type": "string"' });
    }
  }
  if ('x-redact' in s && typeof s['x-redact'] !== 'boolean') {
    out.push({ path: `${path}/x-redact`, message: `must be true or false (got ${JSON.stringify(s['x-redact'])})` });
  }
  // Patterns run on every call's input in the server's own thread; the linear-time engine they
  // compile to has no spelling for backreferences and lookaround, so those are refused here,
  // where the path can be named (ajv would refuse them too, without it).
  if (typeof s.pattern === 'string') {
    const why = linearPatternProblem(s.pattern);
    if (why) out.push({ path: `${path}/pattern`, message: why });
  }
  const pp = s.patternProperties;
  if (typeof pp === 'object' && pp !== null && !Array.isArray(pp)) {
    for (const key of Object.keys(pp)) {
      const why = linearPatternProblem(key);
      if (why) out.push({ path: `${path}/patternProperties/${escapePointer(key)}`, message: `the key ${why}` });
    }
  }
  for (const k of SCHEMA_MAPS) {
    const m = s[k];
    if (typeof m === 'object' && m !== null && !Array.isArray(m)) {
      for (const [name, sub] of Object.entries(m)) annotationProblems(sub, `${path}/${k}/${escapePointer(name)}`, out, below(via, k));
    }
  }
  for (const k of SCHEMA_VALUES) if (!Array.isArray(s[k])) annotationProblems(s[k], `${path}/${k}`, out, below(via, k));
  for (const k of SCHEMA_ARRAYS) {
    const a = s[k];
    if (Array.isArray(a)) {
      a.forEach((sub, i) => {
        annotationProblems(sub, `${path}/${k}/${i}`, out, below(via, k));
      });
    }
  }
}

/** The first keyword on the way down that the runner does not follow, if any. */
function below(via: string | undefined, keyword: string): string | undefined {
  return via ?? (FOLLOWED.has(keyword) ? undefined : keyword);
}

function escapePointer(token: string): string {
  return token.replaceAll('~', '~0').replaceAll('/', '~1');
}

/** Checks a tool's data against a compiled schema. */
export type ToolDataValidator = (data: unknown) => { ok: true } | ValidationFailure;

/** The result of compiling a tool schema. */
export type CompiledToolSchema = { ok: true; dialect: SchemaDialect; validate: ToolDataValidator } | ValidationFailure;

/** Options of `compileToolSchema`. */
export interface CompileToolSchemaOptions {
  /**
   * Where the schema sits, for problem paths (`input_schema`, the default, or `output_schema`).
   * `input_schema` must describe an object.
   */
  path?: 'input_schema' | 'output_schema';
  /** The prefix of data problem paths when validating (default `input` or `output`). */
  dataLabel?: string;
}

/**
 * Compiles a tool's `input_schema` or `output_schema` with the settings described at
 * `TOOL_SCHEMA_AJV_OPTIONS` and returns a validator whose failures name JSON pointers
 * (`input/n: must be integer`). A schema that does not compile is a `validation_failed` result:
 * an unsupported `$schema`, a meta-schema violation (`input_schema/properties/n/type: must be
 * equal to one of the allowed values (…)`), a misplaced `x-bind`, an unresolvable `$ref`, a bad
 * `pattern`. Never throws for a bad schema. Does not cache; see `toolValidators`.
 */
export function compileToolSchema(schema: unknown, options: CompileToolSchemaOptions = {}): CompiledToolSchema {
  const path = options.path ?? 'input_schema';
  const label = options.dataLabel ?? (path === 'input_schema' ? 'input' : 'output');
  // The same schema (a tool forged again with a new impl, a spec checked then stored) compiles
  // once: compiling is most of the cost of checking a spec.
  let key: string | undefined;
  try {
    key = `${path}\0${label}\0${stableStringify(schema)}`;
  } catch {
    key = undefined; // not serialisable (a cycle): compile it, and let that report the problem
  }
  const hit = key === undefined ? undefined : compiled.get(key);
  if (hit) {
    compiled.delete(key as string);
    compiled.set(key as string, hit);
    return hit;
  }
  const result = compileUncached(schema, path, label);
  if (key !== undefined) {
    if (compiled.size >= COMPILED_LIMIT) compiled.delete(compiled.keys().next().value as string);
    compiled.set(key, result);
  }
  return result;
}

const COMPILED_LIMIT = 1000;
/** Compiled schemas (and refusals) by canonical text, least recently used first. */
const compiled = new Map<string, CompiledToolSchema>();

function compileUncached(schema: unknown, path: 'input_schema' | 'output_schema', label: string): CompiledToolSchema {
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
    return validationFailure([{ path, message: 'must be a JSON Schema object' }]);
  }
  const s = schema as JsonSchema;
  const d = schemaDialect(s, path);
  if ('path' in d) return validationFailure([d]);
  const problems: SpecProblem[] = [];
  if (path === 'input_schema' && s.type !== 'object') {
    problems.push({
      path: `${path}/type`,
      message: `must be "object": a tool's input is a JSON object of named arguments (got ${s.type === undefined ? 'no type' : JSON.stringify(s.type)})`,
    });
  }
  annotationProblems(s, path, problems);
  const ajv = ajvFor(d.dialect);
  // Compile a copy whose $schema is the id ajv knows (the spellings accepted above differ).
  const copy = s.$schema === undefined ? s : { ...s, $schema: d.canonical };
  const meta = metaFor(d.dialect);
  if (!meta(copy)) problems.push(...ajvProblems(meta.errors, path));
  if (problems.length > 0) return validationFailure(problems);
  let fn: ValidateFunction;
  try {
    fn = ajv.compile(copy);
  } catch (err) {
    if (err instanceof PatternRefusal) return validationFailure([{ path, message: `has a pattern that ${err.message}` }]);
    const why = err instanceof Error ? err.message : String(err);
    return validationFailure([{ path, message: `does not compile: ${why}; $ref may only point inside the schema` }]);
  } finally {
    // Forget the schema by identity and $id: two tools may use the same $id, and the cache
    // would otherwise grow with every compile. The compiled function stays valid.
    try {
      ajv.removeSchema(copy);
    } catch {
      // Nothing was registered.
    }
  }
  // A schema that may be costly always runs under the budget; a tree-shaped one only when the
  // data is large enough that schema × data could approach it (the budget's watchdog thread
  // costs ~50 µs a call, more than a small validation itself).
  const directLimit = mayBeCostly(s) ? -1 : Math.floor(DIRECT_COST / schemaWeight(s));
  const validate: ToolDataValidator = (data) => {
    const direct = directLimit >= 0 && weightAtMost(data, directLimit);
    const verdict = direct ? fn(data) && { ok: true as const } : withinBudget(fn, data, label);
    if (verdict !== false) return verdict;
    return validationFailure(ajvProblems(fn.errors, label), label);
  };
  return { ok: true, dialect: d.dialect, validate };
}

/**
 * How long one validation may run, in milliseconds. Patterns are linear, but a schema's shape
 * alone can make validation exponential or quadratic whatever the input's size: `anyOf` branches
 * reaching the same `$ref` (2^n paths on a one-character input), `uniqueItems` over objects
 * (n² comparisons). A validation still running at this budget is stopped (V8 terminates it from a
 * watchdog thread) and the data is refused, so no call holds the event loop longer than this.
 */
export const VALIDATION_BUDGET_MS = 500;

let sandbox: { context: Context; script: Script } | undefined;

/** Keywords under which validation may cost more than one visit per (subschema, value) pair. */
const COSTLY = new Set(['$ref', '$dynamicRef', '$recursiveRef', 'uniqueItems', 'format']);

/**
 * Whether validating against `schema` may cost more than linear time in the data, so that it
 * must run under the budget. Without these keywords a schema is a tree: ajv visits each value
 * at most once per subschema and each pattern is linear (re2js), so validation costs
 * O(schema × data), the order of parsing the data, which the server has already done. `$ref` (and
 * its dynamic kin) can reach one subschema by many paths or recurse with the data, `uniqueItems`
 * compares items pairwise, and `format` runs ajv-formats' own V8 expressions. Every key is looked
 * at, even inside `const` or `default`: a false alarm only costs the budget's watchdog (~50 µs).
 */
function mayBeCostly(node: unknown): boolean {
  if (typeof node !== 'object' || node === null) return false;
  if (Array.isArray(node)) return node.some(mayBeCostly);
  for (const [k, v] of Object.entries(node)) if (COSTLY.has(k) || mayBeCostly(v)) return true;
  return false;
}

/**
 * The most (schema weight × data weight) a tree-shaped schema validates without the budget: at a
 * few hundred nanoseconds a unit (a pattern's step on one character, in the worst case), a few
 * tens of milliseconds at worst, well under a millisecond for an ordinary call's input.
 */
const DIRECT_COST = 100_000;

/** The objects and arrays in a schema: a bound on the subschemas that can apply to one value. */
function schemaWeight(node: unknown): number {
  if (typeof node !== 'object' || node === null) return 0;
  let n = 1;
  for (const v of Array.isArray(node) ? node : Object.values(node)) n += schemaWeight(v);
  return n;
}

/** Whether `data` weighs at most `limit`: one per value and per key, plus every string's length. */
function weightAtMost(data: unknown, limit: number): boolean {
  let weight = 0;
  const stack: unknown[] = [data];
  while (stack.length > 0) {
    const v = stack.pop();
    weight += 1;
    if (typeof v === 'string') weight += v.length;
    else if (Array.isArray(v)) {
      // Counted before pushed, so a huge array is refused without walking it.
      weight += v.length;
      if (weight > limit) return false;
      for (const x of v) stack.push(x);
    } else if (typeof v === 'object' && v !== null) {
      const keys = Object.keys(v);
      weight += keys.length;
      if (weight > limit) return false;
      for (const k of keys) {
        weight += k.length;
        stack.push((v as Record<string, unknown>)[k]);
      }
    }
    if (weight > limit) return false;
  }
  return true;
}

/**
 * `fn(data)` under `VALIDATION_BUDGET_MS`: `true` when valid, `false` when invalid (the errors
 * are on `fn.errors`), a failure when validation could not finish (over budget, or data nested
 * deeper than the stack).
 */
function withinBudget(fn: ValidateFunction, data: unknown, label: string): { ok: true } | false | ValidationFailure {
  // The validator stays a function of this realm; only the call runs as a script, because only
  // a script can be given a timeout. The context is made once and holds nothing between calls.
  if (!sandbox) {
    // node:vm is required here, at the first costly validation: a process that validates nothing
    // (listing) never loads it.
    const vm = createRequire(import.meta.url)('node:vm') as typeof import('node:vm');
    sandbox = { context: vm.createContext({}), script: new vm.Script('__validate(__data)') };
  }
  const g = sandbox.context as { __validate?: ValidateFunction; __data?: unknown };
  g.__validate = fn;
  g.__data = data;
  try {
    return sandbox.script.runInContext(sandbox.context, { timeout: VALIDATION_BUDGET_MS }) === true ? { ok: true } : false;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    const message =
      code === 'ERR_SCRIPT_EXECUTION_TIMEOUT'
        ? `validation was stopped after ${VALIDATION_BUDGET_MS} ms: this schema is too costly to check against this ${label} (anyOf/oneOf branches reaching the same $ref, uniqueItems over a large array of objects); simplify the schema or send a smaller ${label}`
        : err instanceof RangeError
          ? `could not be validated: it is nested too deeply for the schema's $ref recursion (${err.message}); send a flatter ${label}`
          : `could not be validated: ${err instanceof Error ? err.message : String(err)}`;
    return validationFailure([{ path: label, message }], label);
  } finally {
    g.__validate = undefined;
    g.__data = undefined;
  }
}

/** Compiled validators of one tool. */
export interface ToolValidators {
  input: ToolDataValidator;
  /** Absent when the tool declares no `output_schema`. */
  output?: ToolDataValidator;
}

const CACHE_LIMIT = 1000;
const cache = new Map<string, ToolValidators | ValidationFailure>();

/**
 * The validators of a stored tool, compiled on first use and cached by its digest (at most
 * 1000 tools; the oldest is dropped first). Loading a registry compiles nothing; this is what
 * the caller uses to validate a call's input and output. A schema that no longer compiles (a
 * hand-edited file) is a `validation_failed` result.
 */
export function toolValidators(tool: {
  digest: string;
  input_schema: unknown;
  output_schema?: unknown;
}): ToolValidators | ValidationFailure {
  const hit = cache.get(tool.digest);
  if (hit) return hit;
  let result: ToolValidators | ValidationFailure;
  const input = compileToolSchema(tool.input_schema, { path: 'input_schema' });
  if (!input.ok) result = input;
  else if (tool.output_schema === undefined) result = { input: input.validate };
  else {
    const output = compileToolSchema(tool.output_schema, { path: 'output_schema' });
    result = output.ok ? { input: input.validate, output: output.validate } : output;
  }
  if (cache.size >= CACHE_LIMIT) {
    const oldest = cache.keys().next();
    if (!oldest.done) cache.delete(oldest.value);
  }
  cache.set(tool.digest, result);
  return result;
}
