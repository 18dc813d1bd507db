/**
 * One framework-neutral view of the tools a caller may use, forged and served by a source (the
 * gateway) alike: what an agent framework's tool needs (a name its function-calling API accepts,
 * a description, the input and output schemas, hints) and an `execute` that goes through
 * `Forge.callTool`, so every call meets the same gates, sandbox and audit as an MCP call. The
 * adapters of `@forge/adapters` turn it into each framework's tool.
 */
import { type StoredTool, wireName } from '@forge/registry';
import type { AgentTool, CallContext, Forge } from './api.js';
import type { SourcedTool } from './sources.js';
import { type AnnotatedSpec, type SandboxFacts, type ToolAnnotations, toolAnnotations } from './toolHints.js';
import { bindsNote, callerInputSchema, callerOutputSchema } from './toolSchemas.js';

/** The part of a tool's view that does not depend on who calls: kept per stored tool and grant. */
type Shape = Omit<AgentTool, 'execute'>;

const forgedShapes = [new WeakMap<object, Shape>(), new WeakMap<object, Shape>()];
const sourcedShapes = new WeakMap<object, Shape>();

/** The tools `ctx`'s caller may use, forged first, then the sources', by forge name. */
export async function agentTools(
  forge: Pick<Forge, 'listTools' | 'listSourced' | 'sandboxFacts' | 'callTool'>,
  ctx: CallContext = {},
): Promise<AgentTool[]> {
  const { signal: _listing, ...caller } = ctx;
  const facts = forge.sandboxFacts(caller);
  const out: AgentTool[] = [];
  const wires = new Set<string>();
  const bind = (shape: Shape): AgentTool => ({
    ...shape,
    execute: (input, o = {}) => forge.callTool(shape.name, input, { ...caller, ...o.caller, ...(o.signal ? { signal: o.signal } : {}) }),
  });
  for (const listed of await forge.listTools(caller)) {
    // A tool whose wire name another one shares is reached by its forge name only: not offered.
    if (listed.wireConflict !== undefined) continue;
    const shape = forgedShape(listed.tool, facts);
    wires.add(shape.wireName);
    out.push(bind(shape));
  }
  for (const t of await forge.listSourced(caller)) {
    const shape = sourcedShape(t);
    if (wires.has(shape.wireName)) continue;
    wires.add(shape.wireName);
    out.push(bind(shape));
  }
  return out;
}

function forgedShape(record: StoredTool, facts: SandboxFacts): Shape {
  const memo = forgedShapes[facts.network ? 1 : 0] as WeakMap<object, Shape>;
  const hit = memo.get(record);
  if (hit) return hit;
  const input = callerInputSchema(record.input_schema);
  const outputSchema = callerOutputSchema(record.output_schema);
  const { title, ...hints } = toolAnnotations(record as AnnotatedSpec, facts);
  const note = bindsNote(input.binds);
  const shape: Shape = {
    name: record.name,
    wireName: wireName(record.name),
    ...(title ? { title } : {}),
    description: [record.description.trim(), ...(note ? [note] : [])].join('\n\n'),
    inputSchema: input.schema,
    ...(outputSchema ? { outputSchema } : {}),
    annotations: title ? { title, ...hints } : hints,
    origin: { kind: 'forged', scope: record.scope, version: record.version, digest: record.digest, runtime: record.runtime },
  };
  memo.set(record, shape);
  return shape;
}

function sourcedShape(t: SourcedTool): Shape {
  const hit = sourcedShapes.get(t);
  if (hit) return hit;
  const title = typeof t.annotations?.title === 'string' ? t.annotations.title : undefined;
  const outputSchema = callerOutputSchema(t.output_schema, false);
  const where = `${t.origin.kind} server "${t.origin.server}"${t.origin.sandboxed ? ', sandboxed' : ', NOT sandboxed'}`;
  const shape: Shape = {
    name: t.name,
    wireName: wireName(t.name),
    ...(title ? { title } : {}),
    description: `${t.description.trim()}\n\n(${t.origin.tool} of the ${where}; pinned ${t.digest.slice(0, 19)}…)`.trim(),
    inputSchema: t.input_schema.type === 'object' ? t.input_schema : { ...t.input_schema, type: 'object' },
    ...(outputSchema ? { outputSchema } : {}),
    annotations: hintsOf(t.annotations),
    origin: { kind: t.origin.kind, server: t.origin.server, tool: t.origin.tool, digest: t.digest, sandboxed: t.origin.sandboxed },
  };
  sourcedShapes.set(t, shape);
  return shape;
}

/** An upstream's hints, only those of the known names and types. */
function hintsOf(a: Record<string, unknown> | undefined): Partial<ToolAnnotations> {
  const out: Partial<ToolAnnotations> = {};
  if (!a) return out;
  if (typeof a.title === 'string') out.title = a.title;
  for (const k of ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint'] as const)
    if (typeof a[k] === 'boolean') out[k] = a[k];
  return out;
}
