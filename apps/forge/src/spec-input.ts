import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { EnvironmentError, UsageError } from './args.js';

/** Reads all of stdin as text. */
export async function readStdin(stream: NodeJS.ReadableStream = process.stdin): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(typeof c === 'string' ? Buffer.from(c) : (c as Buffer));
  return Buffer.concat(chunks).toString('utf8');
}

/** Parses JSON text, naming where it came from when it is not JSON. */
export function parseJson(text: string, from: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new UsageError(`${from} is not valid JSON: ${(err as Error).message}`);
  }
}

/**
 * A tool spec from the command line: `-` (JSON on stdin), a JSON file, or a directory holding
 * `tool.json` and one `main.*` (the layout of `examples/`). A spec without `impl` takes the
 * `main.*` beside its file. What is in the spec is checked by forge, not here.
 */
export async function readSpec(arg: string, stdin: () => Promise<string> = () => readStdin()): Promise<unknown> {
  if (arg === '-') return parseJson(await stdin(), 'the spec on stdin');
  if (!existsSync(arg)) throw new EnvironmentError(`${arg}: no such file or directory`);
  const isDir = statSync(arg).isDirectory();
  const file = isDir ? join(arg, 'tool.json') : arg;
  if (!existsSync(file))
    throw new EnvironmentError(`${arg} is a directory without tool.json (expected tool.json and main.py, main.js or main.sh)`);
  const spec = parseJson(readFileSync(file, 'utf8'), file);
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec))
    throw new UsageError(`${file} must hold a JSON object (a tool spec)`);
  if ('impl' in spec) return spec;
  const dir = isDir ? arg : dirname(file);
  const mains = readdirSync(dir).filter((f) => /^main\.[A-Za-z0-9]+$/.test(f));
  if (mains.length > 1) throw new UsageError(`${dir} holds ${mains.join(', ')}: keep one main.* beside ${basename(file)}`);
  if (mains.length === 0) return spec; // forge answers with the missing field
  return { ...spec, impl: readFileSync(join(dir, mains[0] as string), 'utf8') };
}

/** A tool's input from the command line: JSON text, `-` for stdin, or nothing for `{}`. */
export async function readInput(arg: string | undefined, stdin: () => Promise<string> = () => readStdin()): Promise<unknown> {
  if (arg === undefined) return {};
  if (arg === '-') return parseJson(await stdin(), 'the input on stdin');
  return parseJson(arg, 'the input');
}
