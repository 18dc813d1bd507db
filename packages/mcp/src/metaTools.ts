/** The five meta-tools of forging: their MCP definitions and what each does on the Forge (the toolsmith's two are in toolsmithTools.ts). */
import type { CallContext, Envelope, Forge } from '@forge/runner';
import type { Tool } from '@modelcontextprotocol/server';

const NAME = {
  type: 'string',
  description: 'Tool name: 1-64 of [A-Za-z0-9_.-], starting with a letter; dots make namespaces (code.csv_filter).',
} as const;

const FORGE_TOOL: Tool = {
  name: 'forge_tool',
  title: 'Forge a tool',
  description: [
    'Create a new tool at runtime: a name, a JSON Schema for its input and a short python3/node/bash/sh program. From the next tools/list it is a tool like any other (call it now through forge_call); every call is schema-validated, runs in a bubblewrap sandbox with no network and only the host paths its input names, and is audited.',
    'Forge when: you are about to run the same snippet again with different parameters; the answer needs exact numbers computed over data (counts, sums, statistics, parsing) rather than estimates; or a file output must be reproducible.',
    'Do not forge for: a one-off command, pure language work (summarising, rewriting, explaining), or something an existing tool already does — call forge_list first and reuse what is there.',
    'The program reads its input as one JSON object on stdin and prints exactly one JSON envelope on stdout: {"ok": true, "data": ...} or {"ok": false, "error": {"kind": "...", "message": "..."}}. Files it writes to /forge/artifacts are kept.',
    'A refusal (bad name, schema that does not compile, static check, policy) comes back as an error result whose message says what to fix.',
  ].join('\n\n'),
  inputSchema: {
    type: 'object',
    properties: {
      name: NAME,
      description: { type: 'string', description: 'What the tool does and what it returns, for the agents that will call it.' },
      runtime: {
        type: 'string',
        description: 'python3, node, bash or sh (a versioned alias such as python3.11 works when installed).',
        examples: ['python3', 'node', 'bash', 'sh'],
      },
      input_schema: {
        type: 'object',
        description:
          'JSON Schema (2020-12; draft-07 accepted) of the input object. Annotate a string property naming a host file or directory with "x-bind": "ro" (read-only) or "rw" (read-write; created empty if missing) to mount it into the sandbox at the same path; mark a sensitive value with "x-redact": true to keep it out of run records.',
      },
      output_schema: {
        type: 'object',
        description:
          'Optional JSON Schema of "data". Results are checked against it; an object schema is also published as the MCP outputSchema.',
      },
      impl: { type: 'string', description: 'The program source: reads JSON on stdin, prints one envelope on stdout.' },
      meta: {
        type: 'object',
        description: 'Hints and budget requests (policy clamps them).',
        properties: {
          deterministic: { type: 'boolean', description: 'Same input, same output: results are cached and the tool is marked idempotent.' },
          secrets: {
            type: 'array',
            items: { type: 'string' },
            description: 'Names of vault secrets passed as environment variables (when policy allows).',
          },
          timeout_ms: { type: 'integer', minimum: 1, description: 'Wall-clock limit.' },
          cpu_s: { type: 'number', exclusiveMinimum: 0, description: 'CPU-time limit.' },
          output_cap: { type: 'integer', minimum: 1, description: 'Largest stdout in bytes.' },
        },
      },
      examples: {
        type: 'array',
        description: 'Sample calls: [{input, expect?}]; input must match input_schema.',
        items: { type: 'object', properties: { input: { type: 'object' }, expect: {} }, required: ['input'] },
      },
      scope: {
        type: 'string',
        enum: ['project', 'session', 'task'],
        default: 'project',
        description:
          'project: every session in this project; session: this conversation only; task: this task only. Use forge_promote to share a tool with every project.',
      },
      overwrite: { type: 'boolean', default: false, description: 'Replace a tool of that name in that scope (its version goes up).' },
    },
    required: ['name', 'description', 'runtime', 'input_schema', 'impl'],
  },
  annotations: { title: 'Forge a tool', readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
};

const FORGE_CALL: Tool = {
  name: 'forge_call',
  title: 'Call a forged tool',
  description:
    "Call a forged tool by name with its input. Use it right after forge_tool (your client may not have refreshed its tool list yet), or whenever a forged tool is missing from your tool list. Returns the tool's envelope {ok, data | error, meta}.",
  inputSchema: {
    type: 'object',
    properties: {
      name: NAME,
      input: { type: 'object', description: "The tool's input, matching its input_schema.", default: {} },
    },
    required: ['name'],
  },
  annotations: { title: 'Call a forged tool', readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
};

const FORGE_LIST: Tool = {
  name: 'forge_list',
  title: 'List forged tools',
  description:
    "List the forged tools you can call (not the built-in meta-tools): name, scope, version, description, runtime and how often each was called, then the approved tools of the gateway's upstream MCP servers (source, server). A tool whose stored file is damaged is listed with damaged: true and the problem; it cannot be called until it is removed (forge_remove) or forged again. Call it before forging or proposing a tool, to reuse one that already does the job.",
  inputSchema: {
    type: 'object',
    properties: {
      scope: {
        type: 'string',
        enum: ['task', 'session', 'project', 'user'],
        description:
          'Only this scope (including tools a more specific scope hides). Default: every tool as it resolves, task → session → project → user.',
      },
    },
  },
  annotations: { title: 'List forged tools', readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
};

const FORGE_PROMOTE: Tool = {
  name: 'forge_promote',
  title: 'Promote a tool to every project',
  description:
    'Copy a project-scope tool to the user scope, so every project on this machine sees it. Promote tools that proved useful and general; force replaces a different user tool of the same name.',
  inputSchema: {
    type: 'object',
    properties: {
      name: NAME,
      force: { type: 'boolean', default: false, description: 'Replace a different user-scope tool of that name.' },
    },
    required: ['name'],
  },
  annotations: { title: 'Promote a tool', readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
};

const FORGE_REMOVE: Tool = {
  name: 'forge_remove',
  title: 'Remove a forged tool',
  description:
    'Remove a forged tool that is wrong or no longer needed. Without scope, removes it from the scope it resolves to (a tool it was hiding becomes visible again).',
  inputSchema: {
    type: 'object',
    properties: {
      name: NAME,
      scope: { type: 'string', enum: ['task', 'session', 'project', 'user'], description: 'The scope to remove it from.' },
    },
    required: ['name'],
  },
  annotations: { title: 'Remove a forged tool', readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
};

/** The five meta-tools as MCP tool definitions, in the order `tools/list` shows them. */
export const META_TOOL_DEFINITIONS: readonly Tool[] = Object.freeze([FORGE_TOOL, FORGE_CALL, FORGE_LIST, FORGE_PROMOTE, FORGE_REMOVE]);

const META_NAMES = new Set(META_TOOL_DEFINITIONS.map((t) => t.name));

/** True for the names the server answers itself. */
export function isMetaTool(name: string): boolean {
  return META_NAMES.has(name);
}

type Scope = 'user' | 'project' | 'session' | 'task';
const SCOPES: readonly string[] = ['user', 'project', 'session', 'task'];

const refusal = (kind: string, message: string, detail: Record<string, unknown> = {}): Envelope => ({
  ok: false,
  error: { kind, message, ...detail },
  meta: {},
});

/** A runner refusal `{ok: false, kind, message, …detail}` as an envelope. */
function fromRefusal(r: { kind: string; message: string; [k: string]: unknown }): Envelope {
  const { ok: _ok, kind, message, ...detail } = r;
  return refusal(kind, message, detail);
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

function scopeArg(v: unknown, allowed: readonly string[]): { scope?: Scope } | Envelope {
  if (v === undefined) return {};
  if (typeof v !== 'string' || !allowed.includes(v))
    return refusal('validation_failed', `scope: must be one of ${allowed.join(', ')} (got ${JSON.stringify(v)})`);
  return { scope: v as Scope };
}

function nameArg(args: Record<string, unknown>): string | Envelope {
  if (typeof args.name !== 'string' || args.name === '')
    return refusal('validation_failed', `name: required, a tool name string (got ${JSON.stringify(args.name ?? null)})`);
  return args.name;
}

/**
 * Runs meta-tool `name` for `ctx`. Every outcome is an envelope (refusals included);
 * `forge_call` returns the called tool's envelope unchanged.
 */
export async function runMetaTool(forge: Forge, name: string, rawArgs: unknown, ctx: CallContext): Promise<Envelope> {
  const args = isObject(rawArgs) ? rawArgs : {};
  switch (name) {
    case 'forge_tool': {
      const { scope: rawScope, overwrite, ...spec } = args;
      const s = scopeArg(rawScope, ['project', 'session', 'task']);
      if ('ok' in s) return s;
      if (overwrite !== undefined && typeof overwrite !== 'boolean')
        return refusal('validation_failed', `overwrite: must be true or false (got ${JSON.stringify(overwrite)})`);
      const r = await forge.forgeTool(spec, { ...ctx, ...s, ...(overwrite ? { overwrite: true } : {}) });
      if (!r.ok) return fromRefusal(r);
      const t = r.tool;
      return {
        ok: true,
        data: {
          name: t.name,
          version: t.version,
          scope: t.scope,
          digest: t.digest,
          runtime: t.runtime,
          ...(r.previous ? { replaced: r.previous } : {}),
          next: `"${t.name}" is in tools/list from now on; call it now with forge_call {"name": "${t.name}", "input": {…}}`,
        },
        meta: {},
      };
    }
    case 'forge_call': {
      const n = nameArg(args);
      if (typeof n !== 'string') return n;
      if (args.input !== undefined && !isObject(args.input))
        return refusal(
          'validation_failed',
          `input: must be a JSON object matching the tool's input_schema (got ${JSON.stringify(args.input)})`,
        );
      return forge.callTool(n, args.input ?? {}, ctx);
    }
    case 'forge_list': {
      const s = scopeArg(args.scope, SCOPES);
      if ('ok' in s) return s;
      const listed = await forge.listTools({ ...ctx, ...s });
      // Damaged records are no tools (tools/list leaves them out), but the agent learns why a
      // name it knew is refused, and that forge_remove takes it away.
      const damaged = await forge.listDamaged({ ...ctx, ...s });
      // The sources' tools (the gateway's) belong to no scope: listed when no scope is asked for.
      const sourced = s.scope === undefined ? await forge.listSourced(ctx) : [];
      return {
        ok: true,
        data: {
          tools: [
            ...listed.map((l) => ({
              name: l.tool.name,
              scope: l.scope,
              version: l.tool.version,
              description: l.tool.description,
              runtime: l.tool.runtime,
              deterministic: l.tool.meta?.deterministic === true,
              calls: forge.callCount(l.tool.name),
              ...(l.shadows.length > 0 ? { shadows: l.shadows } : {}),
              ...(l.shadowedBy ? { shadowed_by: l.shadowedBy } : {}),
            })),
            ...damaged.map((d) => ({ name: d.name, scope: d.scope, damaged: true, where: d.path, problem: d.reason })),
            ...sourced.map((t) => ({
              name: t.name,
              source: t.origin.kind,
              server: t.origin.server,
              upstream_tool: t.origin.tool,
              sandboxed: t.origin.sandboxed,
              description: t.description,
              digest: t.digest,
              calls: forge.callCount(t.name),
            })),
          ],
        },
        meta: {},
      };
    }
    case 'forge_promote': {
      const n = nameArg(args);
      if (typeof n !== 'string') return n;
      if (args.force !== undefined && typeof args.force !== 'boolean')
        return refusal('validation_failed', `force: must be true or false (got ${JSON.stringify(args.force)})`);
      const r = await forge.promoteTool(n, { ...ctx, ...(args.force ? { force: true } : {}) });
      if (!r.ok) return fromRefusal(r);
      return {
        ok: true,
        data: { name: r.tool.name, scope: 'user', version: r.tool.version, digest: r.tool.digest, outcome: r.outcome },
        meta: {},
      };
    }
    case 'forge_remove': {
      const n = nameArg(args);
      if (typeof n !== 'string') return n;
      const s = scopeArg(args.scope, SCOPES);
      if ('ok' in s) return s;
      const r = await forge.removeTool(n, { ...ctx, ...s });
      if (!r.ok) return fromRefusal(r);
      if (r.damaged) return { ok: true, data: { name: r.damaged.name, scope: r.damaged.scope, damaged: true, removed: true }, meta: {} };
      return { ok: true, data: { name: r.tool.name, scope: r.tool.scope, version: r.tool.version, removed: true }, meta: {} };
    }
    default:
      throw new Error(`not a meta-tool: ${name}`);
  }
}
