/**
 * A forged tool as the MCP client sees it. forge's own schema annotations (`x-bind`, `x-redact`,
 * any `x-*` keyword but SEP-2243's `x-mcp-header`) are stripped from `inputSchema` and
 * `outputSchema` (the runner's `callerInputSchema`, as every front-end does); which inputs name
 * host paths mounted into the sandbox is appended to the description.
 */
import {
  type AnnotatedSpec,
  type BindAt,
  bindsNote,
  callerInputSchema,
  callerOutputSchema,
  type SandboxFacts,
  type SourcedTool,
  toolAnnotations,
  wireName,
} from '@forge/runner';
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
  // x-mcp-header is meant for clients (SEP-2243 parameter headers): kept where it may stand.
  const input = callerInputSchema(record.input_schema, (k, v) => k === X_MCP_HEADER && typeof v === 'string');
  const inputSchema = input.schema;
  const outputSchema = callerOutputSchema(record.output_schema);
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
  const outputSchema = callerOutputSchema(t.output_schema, false);
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
  const note = bindsNote(binds);
  if (note) parts.push(note);
  parts.push(
    `Forged tool (${record.runtime}, ${record.scope} scope, v${record.version}); answers with a forge envelope {ok, data | error, meta}.`,
  );
  return parts.join('\n\n');
}
