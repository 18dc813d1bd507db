import { fullFormats } from 'ajv-formats/dist/formats.js';
import { TOOL_STATES } from './types.js';

/**
 * The load path's shape check of a stored tool: the same verdict as
 * `schema/tool-spec.schema.json` with the stamps required (a test holds the two together), written
 * out by hand because it runs once per file on every load. Compiling the schema with ajv costs a
 * cold process tens of milliseconds, and its generated validator runs interpreted for most of a
 * 10 000-file load before V8 optimizes it. Messages follow ajv's wording.
 */

const dateTimeFormat = fullFormats['date-time'];
const fullDateTime: (s: string) => boolean =
  typeof dateTimeFormat === 'object' && 'validate' in dateTimeFormat && typeof dateTimeFormat.validate === 'function'
    ? (dateTimeFormat.validate as (s: string) => boolean)
    : () => false;

/** What `Date.prototype.toISOString` writes (the registry's own stamps). */
const ISO_UTC = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.\d+)?Z$/;
const DAYS = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/**
 * RFC 3339 date-time exactly as ajv-formats' full `date-time` decides it, with a fast path for
 * the registry's own `toISOString()` stamps; anything else (offsets, a leap second, lower-case
 * letters) goes to ajv-formats itself.
 */
function isDateTime(s: string): boolean {
  const m = ISO_UTC.exec(s);
  if (!m || m[6] === '60') return fullDateTime(s);
  const year = Number(m[1]);
  const month = Number(m[2]);
  const day = Number(m[3]);
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const days = month === 2 && leap ? 29 : (DAYS[month] ?? 0);
  return month >= 1 && month <= 12 && day >= 1 && day <= days && Number(m[4]) <= 23 && Number(m[5]) <= 59 && Number(m[6]) <= 59;
}

const NAME = /^[A-Za-z](?:[A-Za-z0-9_-]|\.(?=[A-Za-z0-9_-]))*$/;
const RUNTIME = /^[A-Za-z][A-Za-z0-9_.+-]{0,63}$/;
const DIGEST = /^sha256:[0-9a-f]{64}$/;
const SECRET = /^[A-Za-z_][A-Za-z0-9_.-]{0,127}$/;

const TOP = new Set([
  'name',
  'description',
  'input_schema',
  'output_schema',
  'impl',
  'runtime',
  'meta',
  'examples',
  'version',
  'digest',
  'created_at',
  'created_by',
  'scope',
  'state',
  'origin',
]);
const REQUIRED = [
  'name',
  'description',
  'input_schema',
  'impl',
  'runtime',
  'version',
  'digest',
  'created_at',
  'created_by',
  'scope',
  'state',
];
const META = new Set(['deterministic', 'secrets', 'timeout_ms', 'cpu_s', 'output_cap', 'task_support', 'annotations']);
const TASK_SUPPORT = new Set(['forbidden', 'optional', 'required']);
const HINTS = new Set(['title', 'readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint']);
const SCOPES = new Set(['task', 'session', 'project', 'user']);
const STATES: ReadonlySet<string> = new Set(TOOL_STATES);

type Obj = Record<string, unknown>;

function isObject(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Length in code points, as JSON Schema counts it (only computed when UTF-16 units exceed `max`). */
function tooLong(s: string, max: number): boolean {
  if (s.length <= max) return false;
  let n = 0;
  for (const _ of s) if (++n > max) return true;
  return false;
}

function str(v: unknown, path: string, min: number, max: number, pattern?: RegExp): string | undefined {
  if (typeof v !== 'string') return `${path}: must be string`;
  if (v.length < min) return `${path}: must NOT have fewer than ${min} characters`;
  if (tooLong(v, max)) return `${path}: must NOT have more than ${max} characters`;
  if (pattern && !pattern.test(v)) return `${path}: must match pattern "${pattern.source}"`;
  return undefined;
}

function onlyKeys(o: Obj, allowed: ReadonlySet<string>, path: string): string | undefined {
  for (const k in o)
    if (!allowed.has(k)) return `${path}: must NOT have the property ${JSON.stringify(k)}; remove it or check its spelling`;
  return undefined;
}

function positiveInteger(v: unknown, path: string): string | undefined {
  if (typeof v !== 'number' || !Number.isInteger(v)) return `${path}: must be integer`;
  if (v < 1) return `${path}: must be >= 1`;
  return undefined;
}

function checkMeta(m: unknown): string | undefined {
  if (!isObject(m)) return 'meta: must be object';
  const extra = onlyKeys(m, META, 'meta');
  if (extra) return extra;
  if ('deterministic' in m && typeof m.deterministic !== 'boolean') return 'meta/deterministic: must be boolean';
  if ('secrets' in m) {
    const s = m.secrets;
    if (!Array.isArray(s)) return 'meta/secrets: must be array';
    if (s.length > 64) return 'meta/secrets: must NOT have more than 64 items';
    for (let i = 0; i < s.length; i++) {
      const p = str(s[i], `meta/secrets/${i}`, 0, Number.POSITIVE_INFINITY, SECRET);
      if (p) return p;
    }
    if (new Set(s).size !== s.length) return 'meta/secrets: must NOT have duplicate items';
  }
  if ('timeout_ms' in m) {
    const p = positiveInteger(m.timeout_ms, 'meta/timeout_ms');
    if (p) return p;
  }
  if ('cpu_s' in m && (typeof m.cpu_s !== 'number' || !(m.cpu_s > 0))) return 'meta/cpu_s: must be a number > 0';
  if ('output_cap' in m) {
    const p = positiveInteger(m.output_cap, 'meta/output_cap');
    if (p) return p;
  }
  if ('task_support' in m && !TASK_SUPPORT.has(m.task_support as string))
    return 'meta/task_support: must be one of forbidden, optional, required';
  if ('annotations' in m) return checkHints(m.annotations);
  return undefined;
}

function checkHints(a: unknown): string | undefined {
  if (!isObject(a)) return 'meta/annotations: must be object';
  const extra = onlyKeys(a, HINTS, 'meta/annotations');
  if (extra) return extra;
  if ('title' in a) {
    const p = str(a.title, 'meta/annotations/title', 1, 128);
    if (p) return p;
  }
  for (const k of ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint'])
    if (k in a && typeof a[k] !== 'boolean') return `meta/annotations/${k}: must be boolean`;
  return undefined;
}

const EXAMPLE = new Set(['input', 'expect']);

function checkExamples(e: unknown): string | undefined {
  if (!Array.isArray(e)) return 'examples: must be array';
  if (e.length > 64) return 'examples: must NOT have more than 64 items';
  for (let i = 0; i < e.length; i++) {
    const x: unknown = e[i];
    if (!isObject(x)) return `examples/${i}: must be object`;
    if (!('input' in x)) return `examples/${i}: must have required property 'input'`;
    const extra = onlyKeys(x, EXAMPLE, `examples/${i}`);
    if (extra) return extra;
    if (!isObject(x.input)) return `examples/${i}/input: must be object`;
  }
  return undefined;
}

const BY = new Set(['persona', 'session']);
const ORIGIN = new Set(['project', 'digest']);

/** Why `value` is not a stored tool (`path: what`), or undefined when it is one. */
export function storedShapeProblem(value: unknown): string | undefined {
  if (!isObject(value)) return 'spec: must be object';
  const v = value;
  for (const k of REQUIRED) if (!(k in v)) return `spec: must have required property '${k}'`;
  const extra = onlyKeys(v, TOP, 'spec');
  if (extra) return extra;
  let p =
    str(v.name, 'name', 1, 64, NAME) ??
    str(v.description, 'description', 1, 8192) ??
    (isObject(v.input_schema) ? undefined : 'input_schema: must be object') ??
    ('output_schema' in v && !isObject(v.output_schema) ? 'output_schema: must be object' : undefined) ??
    str(v.impl, 'impl', 1, 1048576) ??
    str(v.runtime, 'runtime', 0, Number.POSITIVE_INFINITY, RUNTIME);
  if (p) return p;
  if ('meta' in v && (p = checkMeta(v.meta))) return p;
  if ('examples' in v && (p = checkExamples(v.examples))) return p;
  if ((p = positiveInteger(v.version, 'version'))) return p;
  if ((p = str(v.digest, 'digest', 0, Number.POSITIVE_INFINITY, DIGEST))) return p;
  if (typeof v.created_at !== 'string') return 'created_at: must be string';
  if (!isDateTime(v.created_at)) return 'created_at: must match format "date-time"';
  const by = v.created_by;
  if (!isObject(by)) return 'created_by: must be object';
  if (!('persona' in by)) return "created_by: must have required property 'persona'";
  if (!('session' in by)) return "created_by: must have required property 'session'";
  if ((p = onlyKeys(by, BY, 'created_by'))) return p;
  if (typeof by.persona !== 'string') return 'created_by/persona: must be string';
  if (typeof by.session !== 'string') return 'created_by/session: must be string';
  if (typeof v.scope !== 'string' || !SCOPES.has(v.scope))
    return 'scope: must be equal to one of the allowed values ("task", "session", "project", "user")';
  if (typeof v.state !== 'string' || !STATES.has(v.state)) {
    return 'state: must be equal to one of the allowed values ("active", "pending", "validated", "retired")';
  }
  if ('origin' in v) {
    const o = v.origin;
    if (!isObject(o)) return 'origin: must be object';
    if (!('project' in o)) return "origin: must have required property 'project'";
    if (!('digest' in o)) return "origin: must have required property 'digest'";
    if ((p = onlyKeys(o, ORIGIN, 'origin'))) return p;
    if (typeof o.project !== 'string') return 'origin/project: must be string';
    if ((p = str(o.digest, 'origin/digest', 0, Number.POSITIVE_INFINITY, DIGEST))) return p;
  }
  return undefined;
}
