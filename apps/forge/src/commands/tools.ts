import type { Scope } from '@forge/registry';
import type { Forge, SourcedTool } from '@forge/runner';
import { UsageError } from '../args.js';
import type { Command } from '../command.js';
import { callContext, openForge, withForge } from '../context.js';
import { envelopeHeadline, refusalLine, toolDetail, toolRows } from '../format.js';
import type { Style } from '../output.js';
import { readInput, readSpec } from '../spec-input.js';
import { openStore } from '../store.js';
import type { Where } from '../where.js';

const SCOPES = ['task', 'session', 'project', 'user'] as const;

function scopeOf(v: unknown, usage: string): Scope | undefined {
  if (v === undefined) return undefined;
  if (!SCOPES.includes(v as Scope)) throw new UsageError(`--scope must be one of ${SCOPES.join(', ')} (got "${String(v)}")`, usage);
  return v as Scope;
}

const scopeOption = { scope: { type: 'string' } } as const;

export const toolsList: Command = {
  words: 'tools list',
  usage: 'forge tools list [--scope task|session|project|user]',
  summary:
    "the forged tools visible here, damaged tool files marked, then the gateway's approved upstream tools (or every tool of one scope)",
  options: scopeOption,
  async run({ values }, { out, where }) {
    const scope = scopeOf(values.scope, this.usage);
    const w = await where();
    const ctx = callContext(w.env);
    // The gateway's approved upstream tools belong to no scope: listed when no scope is asked for.
    const { tools, damaged, sourced } = await withForge(
      w,
      async (f) => ({
        tools: await f.listTools({ ...ctx, ...(scope ? { scope } : {}) }),
        damaged: await f.listDamaged({ ...ctx, ...(scope ? { scope } : {}) }),
        // As approved, starting no upstream: `forge gateway list --probe` checks them live.
        sourced: scope ? [] : await f.listSourced({ ...ctx, offline: true }),
      }),
      { calls: false },
    );
    if (out.json)
      out.data([
        ...tools.map((t) => ({ ...summary(t.tool), scope: t.scope, ...(t.shadowedBy ? { shadowed_by: t.shadowedBy } : {}) })),
        ...damaged.map((d) => ({ name: d.name, scope: d.scope, damaged: true, where: d.path, problem: d.reason })),
        ...sourced.map((t) => ({
          name: t.name,
          source: t.origin.kind,
          server: t.origin.server,
          upstream_tool: t.origin.tool,
          sandboxed: t.origin.sandboxed,
          description: t.description,
          digest: t.digest,
        })),
      ]);
    else for (const l of toolRows(tools, out.style, process.stdout.columns ?? 100, sourced, damaged)) out.line(l);
    return 0;
  },
};

function summary(t: { name: string; version: number; runtime: string; description?: string; digest: string }) {
  return { name: t.name, version: t.version, runtime: t.runtime, description: t.description, digest: t.digest };
}

export const toolsShow: Command = {
  words: 'tools show',
  usage: 'forge tools show <name>',
  summary: 'one tool in full: schemas, meta, implementation (a gateway tool: its server, upstream name and pin)',
  positionals: [1, 1],
  async run({ positionals }, { out, where }) {
    const name = positionals[0] as string;
    const w = await where();
    const ctx = callContext(w.env);
    const { tools, damaged, sourced } = await withForge(
      w,
      async (f) => {
        const tools = await f.listTools(ctx);
        const damaged = await f.listDamaged(ctx);
        // The gateway's tools (as approved, starting no upstream) when no forged tool has the name.
        const hit = tools.some((t) => t.tool.name === name) || damaged.some((d) => d.name === name);
        return { tools, damaged, sourced: hit ? [] : await f.listSourced({ ...ctx, offline: true }) };
      },
      { calls: false },
    );
    const hit = tools.find((t) => t.tool.name === name);
    const broken = damaged.find((d) => d.name === name);
    const source = sourced.find((t) => t.name === name);
    if (!hit && source) {
      if (out.json) out.data(sourcedDetail(source));
      else for (const l of sourcedLines(source, out.style)) out.line(l);
      return 0;
    }
    if (!hit) {
      const r = broken
        ? {
            ok: false,
            kind: 'tool_damaged',
            message: `"${name}" (${broken.scope} scope) is damaged: ${broken.path}: ${broken.reason}; remove it (forge tools remove ${name} --scope ${broken.scope}) and forge it again, or restore the file from a copy`,
          }
        : { ok: false, kind: 'unknown_tool', message: `no tool named "${name}" is visible here (forge tools list shows what is)` };
      if (out.json) out.data(r);
      else out.note(refusalLine(r, out.style));
      return 1;
    }
    if (out.json) out.data({ ...hit.tool, scope: hit.scope });
    else for (const l of toolDetail(hit.tool, hit.scope, out.style)) out.line(l);
    return 0;
  },
};

/** A gateway tool as `tools show --json` prints it: the fields `tools list` gives, and its schemas. */
function sourcedDetail(t: SourcedTool): Record<string, unknown> {
  return {
    name: t.name,
    source: t.origin.kind,
    server: t.origin.server,
    upstream_tool: t.origin.tool,
    transport: t.origin.transport,
    sandboxed: t.origin.sandboxed,
    description: t.description,
    digest: t.digest,
    input_schema: t.input_schema,
    ...(t.output_schema ? { output_schema: t.output_schema } : {}),
    ...(t.annotations ? { annotations: t.annotations } : {}),
    ...(t.meta && Object.keys(t.meta).length > 0 ? { meta: t.meta } : {}),
  };
}

function sourcedLines(t: SourcedTool, s: Style): string[] {
  const lines = [
    `${s.bold(t.name)} ${s.dim(`(${t.origin.kind} server ${t.origin.server}, its tool "${t.origin.tool}", ${t.origin.sandboxed ? 'sandboxed' : 'not sandboxed'})`)}`,
    t.description,
    '',
    `${s.dim('pinned ')} ${t.digest}`,
  ];
  if (t.annotations) lines.push(`${s.dim('hints  ')} ${JSON.stringify(t.annotations)}`);
  if (t.meta && Object.keys(t.meta).length > 0) lines.push(`${s.dim('meta   ')} ${JSON.stringify(t.meta)}`);
  lines.push('', s.dim('input_schema'), JSON.stringify(t.input_schema, null, 2));
  if (t.output_schema) lines.push('', s.dim('output_schema'), JSON.stringify(t.output_schema, null, 2));
  return lines;
}

export const toolsForge: Command = {
  words: 'tools forge',
  usage: 'forge tools forge <spec.json|dir|-> [--scope S] [--overwrite]',
  summary: 'forge a tool from a spec file, a directory (tool.json + main.*), or stdin',
  details: ['--scope S     where the tool goes (default project)', '--overwrite   replace a tool of that name in that scope (version + 1)'],
  options: { ...scopeOption, overwrite: { type: 'boolean' } },
  positionals: [1, 1],
  async run({ values, positionals }, { out, where, stdin }) {
    const scope = scopeOf(values.scope, this.usage);
    const spec = await readSpec(positionals[0] as string, stdin);
    const w = await where();
    const r = await withForge(
      w,
      (f) => f.forgeTool(spec, { ...callContext(w.env), ...(scope ? { scope } : {}), ...(values.overwrite ? { overwrite: true } : {}) }),
      { calls: false },
    );
    if (out.json)
      out.data(r.ok ? { ok: true, tool: summary(r.tool), scope: r.tool.scope, ...(r.previous ? { previous: r.previous } : {}) } : r);
    else if (r.ok)
      out.line(
        `${out.style.green('✓')} forged ${out.style.bold(r.tool.name)} v${r.tool.version} ${out.style.dim(`(${r.tool.scope} scope, ${r.tool.digest.slice(0, 19)}…)`)}`,
      );
    else out.note(refusalLine(r, out.style));
    return r.ok ? 0 : 1;
  },
};

export const toolsCall: Command = {
  words: 'tools call',
  usage: 'forge tools call <name> [<json>|-] [--dispatch]',
  summary: 'call a tool with a JSON input (default {}); prints the envelope',
  details: [
    "--dispatch   hand the call to a worker through the job queue (this project's, or the database's",
    '             with --store postgres://…) instead of running it here, as forge serve --dispatch does',
  ],
  options: { dispatch: { type: 'boolean' } },
  positionals: [1, 2],
  async run({ values, positionals }, { out, where, stdin }) {
    const name = positionals[0] as string;
    const input = await readInput(positionals[1], stdin);
    const w = await where();
    const call = (f: Forge) => out.progress(`calling ${name}`, f.callTool(name, input, callContext(w.env)));
    const env = values.dispatch === true ? await viaWorker(w, call) : await withForge(w, call);
    if (!out.json) out.note(envelopeHeadline(name, env, out.style));
    out.data(env);
    return env.ok ? 0 : 1;
  },
};

export const toolsPromote: Command = {
  words: 'tools promote',
  usage: 'forge tools promote <name> [--force]',
  summary: 'copy a project tool to the user scope (visible in every project)',
  details: ['--force   replace a different user tool of that name (the old one stays recoverable)'],
  options: { force: { type: 'boolean' } },
  positionals: [1, 1],
  async run({ values, positionals }, { out, where }) {
    const w = await where();
    const r = await withForge(
      w,
      (f) => f.promoteTool(positionals[0] as string, { ...callContext(w.env), ...(values.force ? { force: true } : {}) }),
      { calls: false },
    );
    if (out.json) out.data(r.ok ? { ok: true, tool: summary(r.tool), outcome: r.outcome } : r);
    else if (r.ok)
      out.line(
        `${out.style.green('✓')} ${out.style.bold(r.tool.name)} v${r.tool.version} is in the user scope ${out.style.dim(`(${r.outcome})`)}`,
      );
    else out.note(refusalLine(r, out.style));
    return r.ok ? 0 : 1;
  },
};

export const toolsRemove: Command = {
  words: 'tools remove',
  usage: 'forge tools remove <name> [--scope S]',
  summary: 'remove a tool, or a damaged tool file (from the scope it resolves to, or the one given)',
  options: scopeOption,
  positionals: [1, 1],
  async run({ values, positionals }, { out, where }) {
    const scope = scopeOf(values.scope, this.usage);
    const w = await where();
    const r = await withForge(w, (f) => f.removeTool(positionals[0] as string, { ...callContext(w.env), ...(scope ? { scope } : {}) }), {
      calls: false,
    });
    if (out.json) {
      if (!r.ok) out.data(r);
      else if (r.damaged)
        out.data({ ok: true, damaged: { name: r.damaged.name, where: r.damaged.path, problem: r.damaged.reason }, scope: r.damaged.scope });
      else out.data({ ok: true, tool: summary(r.tool), scope: r.tool.scope });
    } else if (r.ok && r.damaged)
      out.line(
        `${out.style.green('✓')} removed the damaged ${out.style.bold(r.damaged.name)} from the ${r.damaged.scope} scope ${out.style.dim('(its file is kept in the version history)')}`,
      );
    else if (r.ok)
      out.line(`${out.style.green('✓')} removed ${out.style.bold(r.tool.name)} v${r.tool.version} from the ${r.tool.scope} scope`);
    else out.note(refusalLine(r, out.style));
    return r.ok ? 0 : 1;
  },
};

/** Runs `fn` with an engine that hands forged tools' calls to the workers on the store's queue. */
async function viaWorker<T>(w: Where, fn: (forge: Forge) => Promise<T>): Promise<T> {
  const store = await openStore(w);
  try {
    const engine = await openForge(w, { store, dispatch: await store.queue() });
    try {
      return await fn(engine.forge);
    } finally {
      await engine.close();
    }
  } finally {
    await store.close();
  }
}
