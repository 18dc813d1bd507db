/**
 * A forged tool as the MCP client sees it. forge's own schema annotations (`x-bind`, `x-redact`,
 * any `x-*` keyword) are stripped from `inputSchema` and `outputSchema`: strict clients reject
 * unknown keywords, and the annotations mean nothing to them. What the agent needs to know from
 * them (which inputs name host paths mounted into the sandbox) is appended to the description.
 */
import { type AnnotatedSpec, type SandboxFacts, type SourcedTool, toolAnnotations, wireName } from '@forge/runner';
import type { Tool } from '@modelcontextprotocol/server';
import { X_MCP_HEADER } from './paramHeaders.js';

/** The parts of a stored tool this module reads (a `StoredTool` of @forge/registry). */
export interface ToolRecord {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
  output_schema?: Record<string, unknown>;
  runtime: string;
  version: number;
  digest: string;
  scope: string;
  meta?: {
    deterministic?: boolean;
    secrets?: string[];
    annotations?: Record<string, unknown>;
    task_support?: 'forbidden' | 'optional' | 'required';
  };
}

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
 * A copy of `schema` without `x-*` keywords, and the `x-bind` annotations found on the way. Only
 * schema positions are walked: property names, `const`, `enum`, `default` and `examples` are data
 * and are copied as they are.
 */
export function stripAnnotations(schema: unknown): { schema: unknown; binds: BindAt[] } {
  const binds: BindAt[] = [];
  const walk = (s: unknown, at: string, depth: number): unknown => {
    if (s === null || typeof s !== 'object' || Array.isArray(s) || depth > MAX_DEPTH) return s;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(s)) {
      // x-mcp-header is meant for clients (SEP-2243 parameter headers): kept where it may stand.
      if (k === X_MCP_HEADER && typeof v === 'string') {
        out[k] = v;
        continue;
      }
      if (k.startsWith('x-')) {
        if (k === 'x-bind' && (v === 'ro' || v === 'rw') && !binds.some((b) => b.path === at && b.mode === v))
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

/** The MCP view of a forged tool, and whether its results carry `data` as `structuredContent`. */
export interface ToolView {
  tool: Tool;
  /** True when `outputSchema` is exposed (the output schema is an object schema). */
  structuredData: boolean;
  /** The record it was made from (identity is how views are cached). */
  record: ToolRecord;
}

const views = [new WeakMap<object, ToolView>(), new WeakMap<object, ToolView>()];

/**
 * The MCP tool definition of a forged tool (memoised per stored tool object), its annotations
 * for a caller whose runs get `facts` (network or not): derived by `toolAnnotations`, never
 * claiming more safety than the sandbox enforces.
 */
export function toolView(record: ToolRecord, facts: SandboxFacts = { network: true }): ToolView {
  const memo = views[facts.network ? 1 : 0] as WeakMap<object, ToolView>;
  const hit = memo.get(record);
  if (hit) return hit;
  const input = stripAnnotations(record.input_schema);
  const inputSchema = { ...(input.schema as Record<string, unknown>) };
  // MCP requires an object schema at the root; forge input schemas describe an object already.
  if (inputSchema.type !== 'object') inputSchema.type = 'object';
  let outputSchema: Record<string, unknown> | undefined;
  if (record.output_schema && record.output_schema.type === 'object') {
    const { $schema: _dialect, ...rest } = stripAnnotations(record.output_schema).schema as Record<string, unknown>;
    // The SDK client validates structuredContent with a draft-07 Ajv, which does not know the 2020-12 meta-schema URI.
    outputSchema = rest;
  }
  const { title, ...hints } = toolAnnotations(record as AnnotatedSpec, facts);
  const tool: Tool = {
    name: wireName(record.name),
    title: title ?? record.name,
    description: describe(record, input.binds),
    inputSchema: inputSchema as Tool['inputSchema'],
    ...(outputSchema ? { outputSchema: outputSchema as Tool['outputSchema'] } : {}),
    annotations: { title: title ?? record.name, ...hints },
    _meta: { forge: { name: record.name, scope: record.scope, version: record.version, digest: record.digest, runtime: record.runtime } },
  };
  const view = { tool, structuredData: outputSchema !== undefined, record };
  memo.set(record, view);
  return view;
}

const sourcedViews = new WeakMap<object, ToolView>();

/**
 * The MCP view of a tool a source serves (an upstream MCP server's, through the gateway): the
 * upstream's schemas and annotations as approved (annotations are the upstream's hints, not
 * forge's facts), its description prefixed with where it comes from, and `_meta.forge` naming
 * the server, the upstream tool and the pinned digest.
 */
export function sourcedView(t: SourcedTool): ToolView {
  const hit = sourcedViews.get(t);
  if (hit) return hit;
  const record: ToolRecord = {
    name: t.name,
    description: t.description,
    input_schema: t.input_schema,
    ...(t.output_schema ? { output_schema: t.output_schema } : {}),
    runtime: 'mcp',
    version: 1,
    digest: t.digest,
    scope: t.origin.kind,
  };
  const inputSchema = { ...t.input_schema };
  if (inputSchema.type !== 'object') inputSchema.type = 'object';
  let outputSchema: Record<string, unknown> | undefined;
  if (t.output_schema && t.output_schema.type === 'object') {
    const { $schema: _dialect, ...rest } = t.output_schema;
    outputSchema = rest;
  }
  const upstreamTitle = typeof t.annotations?.title === 'string' ? t.annotations.title : undefined;
  const where = `${t.origin.kind} server "${t.origin.server}"${t.origin.sandboxed ? ', sandboxed' : ', NOT sandboxed'}`;
  const tool: Tool = {
    name: wireName(t.name),
    title: upstreamTitle ?? t.name,
    description: `${t.description.trim()}\n\n(${t.origin.tool} of the ${where}; pinned ${t.digest.slice(0, 19)}…)`.trim(),
    inputSchema: inputSchema as Tool['inputSchema'],
    ...(outputSchema ? { outputSchema: outputSchema as Tool['outputSchema'] } : {}),
    ...(t.annotations ? { annotations: { ...t.annotations, title: upstreamTitle ?? t.name } } : {}),
    _meta: {
      forge: {
        name: t.name,
        source: t.origin.kind,
        server: t.origin.server,
        upstream_tool: t.origin.tool,
        digest: t.digest,
        sandboxed: t.origin.sandboxed,
        transport: t.origin.transport,
      },
    },
  };
  const view = { tool, structuredData: outputSchema !== undefined, record };
  sourcedViews.set(t, view);
  return view;
}

/** The view of the tool `name` names in `views` (keyed by wire name), in either form. */
export function findView(views: ReadonlyMap<string, ToolView>, name: string): ToolView | undefined {
  const hit = views.get(name);
  if (hit) return hit;
  for (const v of views.values()) if (v.record.name === name) return v;
  return undefined;
}

function describe(record: ToolRecord, binds: BindAt[]): string {
  const parts = [record.description.trim()];
  if (binds.length > 0) {
    const list = binds.map((b) => `${b.path} (${b.mode === 'rw' ? 'read-write' : 'read-only'})`).join(', ');
    parts.push(
      `Host paths: ${list} name files or directories mounted into the sandbox at the same path; they must lie inside the policy's bind_roots.`,
    );
  }
  parts.push(
    `Forged tool (${record.runtime}, ${record.scope} scope, v${record.version}); answers with a forge envelope {ok, data | error, meta}.`,
  );
  return parts.join('\n\n');
}
