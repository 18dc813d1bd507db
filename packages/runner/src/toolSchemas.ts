/**
 * A tool's schemas as a client outside forge sees them. forge's own schema annotations
 * (`x-bind`, `x-redact`, any `x-*` keyword) are stripped: strict clients reject unknown keywords,
 * and the annotations mean nothing to them. What a caller needs to know from them (which inputs
 * name host paths mounted into the sandbox) goes into the description instead.
 */

/** An input value the schema marks with `x-bind`, by its path in the input (`src`, `files[]`). */
export interface BindAt {
  path: string;
  mode: 'ro' | 'rw';
}

// Keywords whose value is a map of name → subschema (the names are data, never stripped).
const SCHEMA_MAPS = new Set(['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas']);
// Keywords whose value is one subschema.
const SCHEMA_ONE = new Set([
  'additionalProperties',
  'items',
  'contains',
  'propertyNames',
  'not',
  'if',
  'then',
  'else',
  'unevaluatedItems',
  'unevaluatedProperties',
  'additionalItems',
]);
// Keywords whose value is a list of subschemas (`items` as a draft-07 tuple too).
const SCHEMA_LISTS = new Set(['allOf', 'anyOf', 'oneOf', 'prefixItems', 'items']);

const MAX_DEPTH = 64;

/**
 * A copy of `schema` without `x-*` keywords (but those `keep` accepts), and the `x-bind`
 * annotations found on the way. Only schema positions are walked: property names, `const`,
 * `enum`, `default` and `examples` are data and are copied as they are.
 */
export function stripAnnotations(
  schema: unknown,
  keep: (keyword: string, value: unknown) => boolean = () => false,
): { schema: unknown; binds: BindAt[] } {
  const binds: BindAt[] = [];
  const walk = (s: unknown, at: string, depth: number): unknown => {
    if (s === null || typeof s !== 'object' || Array.isArray(s) || depth > MAX_DEPTH) return s;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(s)) {
      if (k.startsWith('x-')) {
        if (keep(k, v)) out[k] = v;
        else if (k === 'x-bind' && (v === 'ro' || v === 'rw') && !binds.some((b) => b.path === at && b.mode === v))
          binds.push({ path: at || '(the input)', mode: v });
        continue;
      }
      if (SCHEMA_MAPS.has(k) && v && typeof v === 'object' && !Array.isArray(v)) {
        const m: Record<string, unknown> = {};
        for (const [name, sub] of Object.entries(v)) {
          const next = k === 'properties' ? (at ? `${at}.${name}` : name) : k === 'patternProperties' ? `${at}.*` : at;
          // $defs are reached through $ref from anywhere: their binds have no fixed path.
          m[name] = k === '$defs' || k === 'definitions' ? walk(sub, at ? `${at}.…` : '…', depth + 1) : walk(sub, next, depth + 1);
        }
        out[k] = m;
      } else if (SCHEMA_LISTS.has(k) && Array.isArray(v)) {
        const item = k === 'prefixItems' || k === 'items' ? `${at}[]` : at;
        out[k] = v.map((sub) => walk(sub, item, depth + 1));
      } else if (SCHEMA_ONE.has(k)) {
        const next =
          k === 'items' || k === 'contains' || k === 'unevaluatedItems' || k === 'additionalItems'
            ? `${at}[]`
            : k === 'additionalProperties' || k === 'unevaluatedProperties'
              ? `${at}.*`
              : at;
        out[k] = walk(v, next, depth + 1);
      } else {
        out[k] = v;
      }
    }
    return out;
  };
  return { schema: walk(schema, '', 0), binds };
}

/** The input schema as a caller gets it: annotations stripped, an object schema at the root. */
export function callerInputSchema(
  schema: unknown,
  keep?: (keyword: string, value: unknown) => boolean,
): { schema: Record<string, unknown>; binds: BindAt[] } {
  const stripped = stripAnnotations(schema, keep);
  const out = { ...(stripped.schema as Record<string, unknown>) };
  // Function-calling APIs and MCP require an object schema at the root; forge's input schemas describe one already.
  if (out.type !== 'object') out.type = 'object';
  return { schema: out, binds: stripped.binds };
}

/**
 * The output schema as a caller gets it, only when it describes an object (the shape of
 * structured results), without `$schema`: common clients validate with a draft-07 validator that
 * does not know the 2020-12 meta-schema URI.
 */
export function callerOutputSchema(schema: unknown, strip = true): Record<string, unknown> | undefined {
  if (!schema || typeof schema !== 'object' || (schema as { type?: unknown }).type !== 'object') return undefined;
  const { $schema: _dialect, ...rest } = (strip ? stripAnnotations(schema).schema : schema) as Record<string, unknown>;
  return rest;
}

/** The sentence on host paths a description gains when the input names some (none: undefined). */
export function bindsNote(binds: readonly BindAt[]): string | undefined {
  if (binds.length === 0) return undefined;
  const list = binds.map((b) => `${b.path} (${b.mode === 'rw' ? 'read-write' : 'read-only'})`).join(', ');
  return `Host paths: ${list} name files or directories mounted into the sandbox at the same path; they must lie inside the policy's bind_roots.`;
}
