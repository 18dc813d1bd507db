import { readFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join, resolve } from 'node:path';
import type { Gateway, ServerReport, ToolDiff, ToolState } from '@forge/gateway';
import { EnvironmentError, UsageError } from '../args.js';
import type { Command } from '../command.js';
import { createEngine, type Engine } from '../context.js';
import { refusalLine } from '../format.js';
import { clip, type Style, table } from '../output.js';
import type { Where } from '../where.js';

type Refusal = { ok: false; kind: string; message: string };

/** The gateway's files for this home and project (ForgePaths.userGateway, workspaceGateway, gatewayDir). */
function gatewayPaths(w: Where) {
  return {
    userFile: join(w.home, 'gateway.json'),
    workspaceFile: join(w.project, '.forge', 'gateway.json'),
    gatewayDir: join(w.home, 'gateway'),
  };
}

/**
 * Runs `fn` with a gateway attached to an engine (so pins are checked against, and approvals
 * written to, forge's audit log), closing both afterwards, whatever happens.
 */
export async function withGateway<T>(w: Where, fn: (g: Gateway) => Promise<T>): Promise<T> {
  const { createGateway } = await import('@forge/gateway');
  // bind_roots default: a project-level server's binds stay inside the project (as `forge serve` has it).
  const gateway = createGateway(gatewayPaths(w));
  let engine: Engine;
  try {
    // With its toolsmith: a server that cannot start is a service gap (an operator signal).
    engine = await createEngine({ home: w.home, project: w.project, env: w.env, sources: [gateway] });
  } catch (err) {
    await gateway.close();
    throw new EnvironmentError(`cannot open forge (home ${w.home}, project ${w.project}): ${(err as Error).message}`);
  }
  try {
    return await fn(gateway);
  } finally {
    await engine.close();
  }
}

/** Who approves: the persona when one is set, else the operator's login. */
function approver(env: NodeJS.ProcessEnv): string {
  if (env.FORGE_PERSONA) return env.FORGE_PERSONA;
  try {
    return `operator:${userInfo().username}`;
  } catch {
    return 'operator';
  }
}

function isRefusal(v: unknown): v is Refusal {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && (v as { ok?: unknown }).ok === false;
}

/** Prints a refusal (JSON or a line on stderr); exit 1. */
function refuse(out: Parameters<Command['run']>[1]['out'], r: Refusal): number {
  if (out.json) out.data(r);
  else out.note(refusalLine(r, out.style));
  return 1;
}

const short = (d: string | undefined) => (d ? `${d.slice(0, 19)}…` : '-');

export const gatewayList: Command = {
  words: 'gateway list',
  usage: 'forge gateway list [--probe]',
  summary: 'the upstream MCP servers of gateway.json (user and project), sandboxed or not, and their tools',
  details: [
    '--probe   start each server and count the tools it offers now, approved and withheld (otherwise nothing is',
    '          started, and the count is of the tools approved for it)',
  ],
  options: { probe: { type: 'boolean' } },
  async run({ values }, { out, where }) {
    const w = await where();
    const r = await withGateway(w, async (g) => {
      const config = g.config();
      if (!config.ok) return config;
      const probe = values.probe === true;
      const servers = await (probe ? out.progress('starting the servers', g.servers({ probe })) : g.servers());
      return { ok: true as const, servers, config: config.config };
    });
    if (!r.ok) return refuse(out, r);
    if (out.json) {
      out.data(
        r.servers.map((s) => {
          const c = r.config.servers.get(s.name);
          return {
            ...s,
            ...(c ? { file: c.file, ...(c.command ? { command: c.command, args: c.args } : {}), ...(c.url ? { url: c.url } : {}) } : {}),
          };
        }),
      );
      return 0;
    }
    for (const l of serverRows(r.servers, out.style)) out.line(l);
    return 0;
  },
};

function serverRows(servers: readonly ServerReport[], s: Style): string[] {
  if (servers.length === 0)
    return [s.dim('no gateway servers (declare them in $FORGE_HOME/gateway.json or .forge/gateway.json, or: forge gateway import <file>)')];
  const rows = servers.map((x) => [
    s.bold(x.name),
    x.transport,
    x.sandboxed ? 'sandboxed' : s.yellow(x.transport === 'http' ? 'remote' : 'UNSANDBOXED'),
    x.from,
    x.state === 'failed' || x.state === 'breaker_open' ? s.red(x.state) : x.state,
    x.tools.withheld !== undefined ? `${x.tools.approved} approved, ${x.tools.withheld} withheld` : `${x.tools.approved} approved`,
    x.error ? s.red(clip(x.error, 80)) : '',
  ]);
  return table([[s.dim('SERVER'), s.dim('TRANSPORT'), s.dim('SANDBOX'), s.dim('FROM'), s.dim('STATE'), s.dim('TOOLS'), ''], ...rows]);
}

export const gatewayTools: Command = {
  words: 'gateway tools',
  usage: 'forge gateway tools <server>',
  summary: 'start a server and list its tools with their pin status (approved, new, changed, removed, not_allowed)',
  positionals: [1, 1],
  async run({ positionals }, { out, where }) {
    const server = positionals[0] as string;
    const w = await where();
    const r = await withGateway(w, (g) => out.progress(`listing ${server}`, g.tools(server)));
    if (isRefusal(r)) return refuse(out, r);
    const states = r as ToolState[];
    if (out.json) out.data(states);
    else for (const l of stateRows(states, out.style)) out.line(l);
    return 0;
  },
};

function stateRows(states: readonly ToolState[], s: Style): string[] {
  if (states.length === 0) return [s.dim('the server lists no tools')];
  const colour = (st: ToolState['status']) =>
    st === 'approved' ? s.green(st) : st === 'changed' ? s.red(st) : st === 'new' ? s.yellow(st) : s.dim(st);
  const rows = states.map((t) => [
    s.bold(t.name),
    colour(t.status),
    short(t.digest ?? t.pinned),
    clip(t.definition?.description ?? '', 60),
  ]);
  const lines = table([[s.dim('TOOL'), s.dim('STATUS'), s.dim('DIGEST'), s.dim('DESCRIPTION')], ...rows]);
  const waiting = states.filter((t) => t.status === 'new' || t.status === 'changed');
  if (waiting.length > 0)
    lines.push(
      '',
      s.dim(
        `${waiting.length} withheld until approved: forge gateway diff ${states[0]?.server}, then forge gateway approve ${states[0]?.server} <tool>…`,
      ),
    );
  return lines;
}

export const gatewayApprove: Command = {
  words: 'gateway approve',
  usage: 'forge gateway approve <server> [<tool>…]',
  summary: "pin the tools' current definitions (all the server lists when none is named); audited",
  details: ['Asks nothing: running the command is the approval. Prints each pin with its digest.'],
  positionals: [1, 1000],
  async run({ positionals }, { out, where }) {
    const [server, ...tools] = positionals as [string, ...string[]];
    const w = await where();
    const r = await withGateway(w, (g) => out.progress(`approving ${server}`, g.approve(server, tools, approver(w.env))));
    if (!r.ok) return refuse(out, r);
    if (out.json) out.data(r);
    else {
      if (r.approved.length === 0) out.line(out.style.dim(`nothing to approve: ${server} lists no tool that may be pinned`));
      for (const t of r.approved) out.line(`${out.style.green('✓')} pinned ${out.style.bold(t.name)} ${out.style.dim(t.digest ?? '')}`);
    }
    return 0;
  },
};

export const gatewayDiff: Command = {
  words: 'gateway diff',
  usage: 'forge gateway diff <server>',
  summary: 'what the server lists now against the pins: new, changed (field by field) and removed tools',
  positionals: [1, 1],
  async run({ positionals }, { out, where }) {
    const server = positionals[0] as string;
    const w = await where();
    const r = await withGateway(w, (g) => out.progress(`listing ${server}`, g.diff(server)));
    if (isRefusal(r)) return refuse(out, r);
    const diffs = r as ToolDiff[];
    if (out.json) out.data(diffs);
    else for (const l of diffLines(server, diffs, out.style)) out.line(l);
    return 0;
  },
};

function diffLines(server: string, diffs: readonly ToolDiff[], s: Style): string[] {
  if (diffs.length === 0) return [`${s.green('✓')} every tool ${server} lists matches its pin`];
  const lines: string[] = [];
  for (const d of diffs) {
    const name = s.bold(`${server}.${d.tool}`);
    if (d.status === 'new') lines.push(`${s.yellow('+ new')}      ${name} ${s.dim(short(d.new?.digest))}`);
    else if (d.status === 'removed') lines.push(`${s.dim('- removed')}  ${name} ${s.dim(`(pinned ${short(d.old?.digest)})`)}`);
    else {
      lines.push(`${s.red('~ changed')}  ${name} ${s.dim(`${short(d.old?.digest)} → ${short(d.new?.digest)}`)}`);
      for (const f of d.fields) {
        const before = (d.old?.definition as unknown as Record<string, unknown> | undefined)?.[f];
        const after = (d.new?.definition as unknown as Record<string, unknown> | undefined)?.[f];
        lines.push(`    ${s.cyan(f)}`);
        lines.push(`      ${s.red('-')} ${before === undefined ? s.dim('(absent)') : JSON.stringify(before)}`);
        lines.push(`      ${s.green('+')} ${after === undefined ? s.dim('(absent)') : JSON.stringify(after)}`);
      }
    }
  }
  return lines;
}

export const gatewayRemove: Command = {
  words: 'gateway remove',
  usage: 'forge gateway remove <server> [<tool>…]',
  summary: "unpin a server's tools (all when none is named); audited. The server entry stays in gateway.json",
  positionals: [1, 1000],
  async run({ positionals }, { out, where }) {
    const [server, ...tools] = positionals as [string, ...string[]];
    const w = await where();
    const r = await withGateway(w, async (g) => {
      const res = await g.unpin(server, tools, approver(w.env));
      const c = g.config();
      return { res, file: c.ok ? c.config.servers.get(server)?.file : undefined };
    });
    if (!r.res.ok) return refuse(out, r.res);
    const note = `the server entry stays in ${r.file ?? 'gateway.json'}: its tools are withheld until approved again; delete the entry there to stop serving it`;
    if (out.json) out.data({ ...r.res, note });
    else {
      for (const t of r.res.removed) out.line(`${out.style.green('✓')} unpinned ${out.style.bold(`${server}.${t}`)}`);
      out.note(out.style.dim(note));
    }
    return 0;
  },
};

export const gatewayImport: Command = {
  words: 'gateway import',
  usage: 'forge gateway import <file> [--scope user|project]',
  summary:
    'add the servers of an MCP client config (Claude Desktop, Claude Code, Cursor, VS Code) to gateway.json, without any secret value',
  details: [
    "--scope S   user: $FORGE_HOME/gateway.json (default); project: the project's .forge/gateway.json",
    'Every env and Authorization value is replaced by a vault name; fill those in the vault.',
    'Refuses to overwrite a server already declared in either gateway.json.',
  ],
  options: { scope: { type: 'string' } },
  positionals: [1, 1],
  async run({ values, positionals }, { out, where }) {
    if (values.scope !== undefined && values.scope !== 'user' && values.scope !== 'project')
      throw new UsageError(`--scope must be user or project (got "${String(values.scope)}")`, this.usage);
    const source = resolve(positionals[0] as string);
    let text: string;
    try {
      text = readFileSync(source, 'utf8');
    } catch (err) {
      throw new EnvironmentError(
        `${positionals[0]}: cannot be read (${(err as NodeJS.ErrnoException).code}); name the MCP client config to import`,
      );
    }
    const w = await where();
    const { importMcpConfig, addGatewayServers } = await import('@forge/gateway');
    const imported = importMcpConfig(text, source);
    if (!imported.ok) return refuse(out, imported);
    const paths = gatewayPaths(w);
    const toProject = values.scope === 'project';
    const file = toProject ? paths.workspaceFile : paths.userFile;
    const names = Object.keys(imported.servers);
    const written =
      names.length === 0
        ? ({ ok: true, file, added: [] } as const)
        : addGatewayServers({
            file,
            level: toProject ? 'project' : 'user',
            servers: imported.servers,
            otherFile: toProject ? paths.userFile : paths.workspaceFile,
          });
    if (!written.ok) return refuse(out, written);
    const result = { ok: true, file, added: written.added, vault: imported.vault, skipped: imported.skipped, notes: imported.notes };
    if (out.json) {
      out.data(result);
      return 0;
    }
    const s = out.style;
    if (written.added.length === 0) out.line(s.dim(`no server of ${source} could be imported`));
    else out.line(`${s.green('✓')} added ${written.added.map((n) => s.bold(n)).join(', ')} to ${file}`);
    if (imported.vault.length > 0) {
      out.line();
      out.line('fill these vault entries (forge never copied a value):');
      for (const v of imported.vault) out.line(`  ${s.bold(v.vault)}  ${s.dim(`${v.server}: ${v.env ?? v.header} — ${v.hint}`)}`);
    }
    for (const k of imported.skipped) out.note(`${s.yellow('skipped')} ${k.server}: ${k.reason}`);
    for (const n of imported.notes) out.note(s.dim(n));
    if (written.added.length > 0) {
      out.line();
      out.line(s.dim('next: forge gateway tools <server>, then forge gateway approve <server>'));
    }
    return 0;
  },
};

export const GATEWAY_COMMANDS: readonly Command[] = [gatewayList, gatewayTools, gatewayApprove, gatewayDiff, gatewayRemove, gatewayImport];
