/**
 * forge's annotations in a tool's input schema: `x-bind: "ro" | "rw"` on a string that names a
 * host path the tool may use, and `x-redact: true` on a value that must not appear in run
 * manifests. They are found by walking the schema along the input: `properties`,
 * `additionalProperties`, `items`/`prefixItems`, `allOf`/`anyOf`/`oneOf` and local `$ref`s.
 * A value that several branches annotate gets the safer reading: redacted if any says so,
 * read-only unless every branch says `rw`.
 */

export interface BindRequestAt {
  /** JSON pointer of the value in the input. */
  pointer: string;
  path: string;
  mode: 'ro' | 'rw';
}

type Schema = Record<string, unknown> | boolean;

const MAX_DEPTH = 32;

/** The redaction mark for `x-redact` values in manifests. */
export const REDACTED = '<redacted>';

/** Finds the `x-bind` requests in `input` and returns a copy of it with `x-redact` values replaced. */
export function readAnnotations(schema: unknown, input: unknown): { binds: BindRequestAt[]; redacted: unknown } {
  // Most schemas carry neither annotation: then there is nothing to find or replace.
  if (schema !== null && typeof schema === 'object' && !annotated(schema)) return { binds: [], redacted: input };
  const binds: BindRequestAt[] = [];
  const root = (schema ?? true) as Schema;
  const walk = (schemas: Schema[], value: unknown, pointer: string, depth: number): unknown => {
    const all = expand(root, schemas, 0);
    if (all.some((s) => typeof s === 'object' && s['x-redact'] === true)) return REDACTED;
    const modes = all.flatMap((s) => (typeof s === 'object' && (s['x-bind'] === 'ro' || s['x-bind'] === 'rw') ? [s['x-bind']] : []));
    if (modes.length > 0 && typeof value === 'string') {
      binds.push({ pointer, path: value, mode: modes.every((m) => m === 'rw') ? 'rw' : 'ro' });
    }
    if (depth >= MAX_DEPTH || value === null || typeof value !== 'object') return value;
    if (Array.isArray(value)) {
      return value.map((v, i) => {
        const subs: Schema[] = [];
        for (const s of all) {
          if (typeof s !== 'object') continue;
          const prefix = s.prefixItems;
          if (Array.isArray(prefix) && i < prefix.length) subs.push(prefix[i] as Schema);
          else if (s.items !== undefined && !Array.isArray(s.items)) subs.push(s.items as Schema);
          else if (Array.isArray(s.items) && i < s.items.length) subs.push(s.items[i] as Schema); // draft-07 tuples
        }
        return walk(subs, v, `${pointer}/${i}`, depth + 1);
      });
    }
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const subs: Schema[] = [];
      for (const s of all) {
        if (typeof s !== 'object') continue;
        const props = s.properties as Record<string, Schema> | undefined;
        if (props && Object.hasOwn(props, k)) subs.push(props[k] as Schema);
        else if (s.additionalProperties !== undefined && typeof s.additionalProperties !== 'boolean')
          subs.push(s.additionalProperties as Schema);
      }
      const token = k.replaceAll('~', '~0').replaceAll('/', '~1');
      Object.defineProperty(out, k, {
        value: walk(subs, v, `${pointer}/${token}`, depth + 1),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return out;
  };
  const redacted = walk([root], input, '', 0);
  return { binds, redacted };
}

/** The schemas that apply to one value: each given schema, its local `$ref`s and its combinator branches. */
function expand(root: Schema, schemas: Schema[], depth: number): Schema[] {
  const out: Schema[] = [];
  for (const s of schemas) {
    if (typeof s !== 'object' || s === null) continue;
    out.push(s);
    if (depth >= 8) continue;
    const more: Schema[] = [];
    if (typeof s.$ref === 'string') {
      const target = resolveLocal(root, s.$ref);
      if (target !== undefined) more.push(target);
    }
    for (const k of ['allOf', 'anyOf', 'oneOf'] as const) {
      const branches = s[k];
      if (Array.isArray(branches)) more.push(...(branches as Schema[]));
    }
    out.push(...expand(root, more, depth + 1));
  }
  return out;
}

function resolveLocal(root: Schema, ref: string): Schema | undefined {
  if (!ref.startsWith('#')) return undefined;
  let v: unknown = root;
  for (const t of ref.slice(1).split('/').slice(1)) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<string, unknown>)[decodeURIComponent(t).replaceAll('~1', '/').replaceAll('~0', '~')];
  }
  return typeof v === 'object' || typeof v === 'boolean' ? (v as Schema) : undefined;
}

const annotatedCache = new WeakMap<object, boolean>();

/** Whether `schema` mentions `x-bind` or `x-redact` anywhere (remembered per schema object). */
function annotated(schema: object): boolean {
  let a = annotatedCache.get(schema);
  if (a === undefined) {
    const text = JSON.stringify(schema);
    a = text.includes('"x-bind"') || text.includes('"x-redact"');
    annotatedCache.set(schema, a);
  }
  return a;
}
