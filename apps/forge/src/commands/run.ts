import { spawn } from 'node:child_process';
import { accessSync, constants, statSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { delimiter, isAbsolute, join } from 'node:path';
import type { Forge } from '@forge/runner';
import type { Command } from '../command.js';
import { callContext, withForge } from '../context.js';
import { envelopeHeadline, refusalLine } from '../format.js';
import type { Output } from '../output.js';
import { inputFromArgs, toolHelp } from '../tool-args.js';

export const run: Command = {
  words: 'run',
  usage: 'forge run <name> [<json> | - | --flag value…]',
  summary: 'call a tool as a program: its data on stdout, a refusal on stderr with a non-zero exit',
  details: [
    "The input: one JSON object, '-' or piped stdin (JSON), or flags from a flat input schema:",
    '--n 5, --n=5, --verbose / --no-verbose, an array by repeating its flag; <name> --help lists them.',
    'Prints the data (a string as it is, anything else as JSON), or the whole envelope with --json.',
    'Exit 0 when the call succeeded, 1 when it was refused or failed (stderr names the error kind),',
    '2 for a usage error. Everything after <name> belongs to the tool, except --json and --help.',
    'With FORGE_TOOL_PATH (directories, like PATH), <name> is the first executable of that name',
    'in them (an exported tool directory: forge tools export), run with the same arguments.',
  ],
  positionals: [1, Number.POSITIVE_INFINITY],
  passThrough: true,
  async run({ positionals }, { out, where, stdin }) {
    const [name, ...rest] = positionals as [string, ...string[]];
    const toolArgs = rest.filter((a) => a !== '--json');
    const w = await where();
    const path = w.env.FORGE_TOOL_PATH;
    if (path && !name.includes('/')) return runFromPath(name, path, rest, out);
    const ctx = callContext(w.env);
    return withForge(w, async (f) => {
      const needsSchema = toolArgs.some((a) => a.startsWith('-') && a !== '-');
      const described = needsSchema ? await describe(f, name, ctx) : undefined;
      if (needsSchema && !described) {
        const r = { ok: false, kind: 'unknown_tool', message: `no tool named "${name}" is visible here (forge tools list shows what is)` };
        if (out.json) out.data(r);
        else out.note(refusalLine(r, out.style));
        return 1;
      }
      const intent = await inputFromArgs(name, described?.schema ?? {}, toolArgs, stdin, process.stdin.isTTY === true);
      if ('help' in intent) {
        for (const l of toolHelp(name, described?.description ?? '', described?.schema ?? {})) out.line(l);
        return 0;
      }
      const env = await out.progress(`calling ${name}`, f.callTool(name, intent.input, ctx));
      if (out.json) {
        out.data(env);
        return env.ok ? 0 : 1;
      }
      if (!env.ok) {
        out.note(envelopeHeadline(name, env, out.style));
        return 1;
      }
      const data = env.data;
      if (typeof data === 'string') out.line(data.endsWith('\n') ? data.slice(0, -1) : data);
      else out.data(data);
      return 0;
    });
  },
};

/** The schema and description of the tool `name` resolves to for `ctx` (forged first, then the sources'). */
async function describe(f: Forge, name: string, ctx: ReturnType<typeof callContext>) {
  const forged = (await f.listTools(ctx)).find((t) => t.tool.name === name);
  if (forged) return { schema: forged.tool.input_schema, description: forged.tool.description ?? '' };
  const sourced = (await f.listSourced(ctx)).find((t) => t.name === name);
  return sourced ? { schema: sourced.input_schema, description: sourced.description } : undefined;
}

/** Runs the first executable `name` in the directories of `path`, with `args`, stdio inherited; resolves to its exit code. */
async function runFromPath(name: string, path: string, args: readonly string[], out: Output): Promise<number> {
  const dirs = path.split(delimiter).filter(Boolean);
  // As PATH would, a relative entry would find what the working directory holds: a planted file.
  const relative = dirs.find((d) => !isAbsolute(d));
  if (relative !== undefined) {
    out.note(`forge: FORGE_TOOL_PATH entry "${relative}" is not an absolute directory; give absolute directories only (nothing was run)`);
    return 2;
  }
  const hit = dirs.map((d) => join(d, name)).find(isExecutableFile);
  if (!hit) {
    out.note(
      `forge: no executable "${name}" in FORGE_TOOL_PATH (${dirs.join(', ')}): export the tools there (forge tools export DIR), or unset FORGE_TOOL_PATH to call by name`,
    );
    return 1;
  }
  const child = spawn(hit, [...args], { stdio: 'inherit' });
  return new Promise<number>((resolve) => {
    child.on('error', (err) => {
      out.note(`forge: cannot run ${hit}: ${err.message}`);
      resolve(2);
    });
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 + signalNumber(signal) : 1)));
  });
}

/** A regular file the current user may execute (a directory or a non-executable file is no hit, as the ABI says). */
function isExecutableFile(p: string): boolean {
  try {
    if (!statSync(p).isFile()) return false;
    accessSync(p, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function signalNumber(signal: NodeJS.Signals): number {
  return osConstants.signals[signal] ?? 0;
}
