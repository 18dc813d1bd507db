import { UsageError } from './args.js';
import { parseJson } from './spec-input.js';

/**
 * A tool's input from a command line (`forge run NAME ARG…`, `DIR/NAME ARG…`): one JSON object
 * argument, `-` or no argument with stdin not a terminal (JSON on stdin; empty is `{}`), or flags
 * mapped onto a flat input schema (the terminal mode): `--n 5`, `--n=5`, `--verbose` /
 * `--no-verbose` for booleans, an array by repeating its flag, `--max-rows` for `max_rows`.
 * What the schema allows is checked by forge's validation, not here; here only the spelling.
 */

type Schema = Record<string, unknown>;

/** One flag of the terminal mode: the property, and the scalar type its values take. */
interface Flag {
  property: string;
  type: 'string' | 'number' | 'integer' | 'boolean';
  array: boolean;
  required: boolean;
  description?: string;
  enum?: unknown[];
  default?: unknown;
}

/** The flags of a flat input schema, or why it is not flat (a property that is an object, or untyped). */
export function flagsOf(schema: unknown): { ok: true; flags: Flag[] } | { ok: false; why: string } {
  if (schema === true || (typeof schema === 'object' && schema !== null && Object.keys(schema).length === 0))
    return { ok: true, flags: [] };
  if (typeof schema !== 'object' || schema === null) return { ok: false, why: 'its input schema is not an object schema' };
  const s = schema as Schema;
  const props = (s.properties ?? {}) as Record<string, unknown>;
  if (typeof props !== 'object' || props === null) return { ok: false, why: 'its input schema has no properties' };
  const required = new Set(Array.isArray(s.required) ? (s.required as string[]) : []);
  const flags: Flag[] = [];
  for (const [property, raw] of Object.entries(props)) {
    const p = (typeof raw === 'object' && raw !== null ? raw : {}) as Schema;
    let array = false;
    let t = scalarType(p);
    if (!t && typeOf(p) === 'array') {
      array = true;
      t = scalarType((typeof p.items === 'object' && p.items !== null ? p.items : {}) as Schema);
    }
    if (!t) return { ok: false, why: `its property "${property}" is not a string, number, integer or boolean (or an array of them)` };
    flags.push({
      property,
      type: t,
      array,
      required: required.has(property),
      ...(typeof p.description === 'string' ? { description: p.description } : {}),
      ...(Array.isArray(p.enum) ? { enum: p.enum } : {}),
      ...(p.default !== undefined ? { default: p.default } : {}),
    });
  }
  return { ok: true, flags };
}

/** A schema's one type (`["string", "null"]` is string), or undefined. */
function typeOf(p: Schema): string | undefined {
  if (typeof p.type === 'string') return p.type;
  if (Array.isArray(p.type)) {
    const real = (p.type as unknown[]).filter((x) => x !== 'null');
    return real.length === 1 && typeof real[0] === 'string' ? real[0] : undefined;
  }
  if (Array.isArray(p.enum) && p.enum.length > 0) {
    const kinds = new Set(p.enum.map((v) => (Number.isInteger(v) ? 'integer' : typeof v)));
    return kinds.size === 1 ? ([...kinds][0] as string) : undefined;
  }
  return undefined;
}

function scalarType(p: Schema): Flag['type'] | undefined {
  const t = typeOf(p);
  return t === 'string' || t === 'number' || t === 'integer' || t === 'boolean' ? t : undefined;
}

/** What the arguments ask for: the input, or the tool's help. */
export type ArgsIntent = { input: unknown } | { help: true };

/**
 * The input `args` give for a tool named `name` with `schema`. `stdin` reads all of stdin;
 * `stdinIsTerminal` says whether no arguments means `{}` (a terminal) or JSON on stdin.
 */
export async function inputFromArgs(
  name: string,
  schema: unknown,
  args: readonly string[],
  stdin: () => Promise<string>,
  stdinIsTerminal: boolean,
): Promise<ArgsIntent> {
  if (args.includes('--help') || args.includes('-h')) return { help: true };
  if (args.length === 0) {
    if (stdinIsTerminal) return { input: {} };
    const text = await stdin();
    return { input: text.trim() === '' ? {} : parseJson(text, `the input of ${name} on stdin`) };
  }
  if (args.length === 1 && args[0] === '-') return { input: parseJson(await stdin(), `the input of ${name} on stdin`) };
  const first = (args[0] as string).trimStart();
  if (first.startsWith('{')) {
    if (args.length > 1) throw new UsageError(`${name}: after the JSON input, unexpected argument "${args[1]}"`, usageOf(name, schema));
    return { input: parseJson(args[0] as string, `the input of ${name}`) };
  }
  const flat = flagsOf(schema);
  if (!flat.ok)
    throw new UsageError(`${name} takes no flags: ${flat.why}; give its input as JSON: ${name} '{…}'`, `${name} '<json>' | ${name} -`);
  return { input: parseFlags(name, flat.flags, args, schema) };
}

function parseFlags(name: string, flags: readonly Flag[], args: readonly string[], schema: unknown): Record<string, unknown> {
  const usage = usageOf(name, schema);
  const find = (key: string) => flags.find((f) => f.property === key) ?? flags.find((f) => f.property === key.replaceAll('-', '_'));
  const input: Record<string, unknown> = {};
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (!arg.startsWith('--') || arg === '--')
      throw new UsageError(`${name}: unexpected argument "${arg}": give flags (--name value) or one JSON object`, usage);
    const eq = arg.indexOf('=');
    let key = eq < 0 ? arg.slice(2) : arg.slice(2, eq);
    let value: string | undefined = eq < 0 ? undefined : arg.slice(eq + 1);
    let flag = find(key);
    let negated = false;
    if (!flag && key.startsWith('no-') && value === undefined) {
      const f = find(key.slice(3));
      if (f?.type === 'boolean' && !f.array) {
        flag = f;
        negated = true;
        key = key.slice(3);
      }
    }
    if (!flag)
      throw new UsageError(
        `${name}: unknown flag --${key}${flags.length > 0 ? ` (it takes ${flags.map((f) => `--${f.property}`).join(', ')})` : ' (it takes none)'}`,
        usage,
      );
    if (flag.type === 'boolean' && !flag.array && value === undefined) {
      input[flag.property] = !negated;
      continue;
    }
    if (value === undefined) {
      const next = args[i + 1];
      if (next === undefined) throw new UsageError(`${name}: --${key} needs a value (${flag.type})`, usage);
      value = next;
      i++;
    }
    const v = coerce(name, key, flag.type, value, usage);
    if (flag.array) input[flag.property] = [...((input[flag.property] as unknown[] | undefined) ?? []), v];
    else if (flag.property in input) throw new UsageError(`${name}: --${key} given twice (it takes one value)`, usage);
    else input[flag.property] = v;
  }
  return input;
}

function coerce(name: string, key: string, type: Flag['type'], value: string, usage: string): unknown {
  if (type === 'string') return value;
  if (type === 'boolean') {
    if (value === 'true') return true;
    if (value === 'false') return false;
    throw new UsageError(`${name}: --${key} is true or false (got "${value}")`, usage);
  }
  const n = value.trim() === '' ? Number.NaN : Number(value);
  if (!Number.isFinite(n) || (type === 'integer' && !Number.isInteger(n)))
    throw new UsageError(`${name}: --${key} expects ${type === 'integer' ? 'an integer' : 'a number'} (got "${value}")`, usage);
  return n;
}

/** The usage line of a tool in the terminal mode. */
export function usageOf(name: string, schema: unknown): string {
  const flat = flagsOf(schema);
  if (!flat.ok) return `${name} '<json>' | ${name} -`;
  const parts = flat.flags.map((f) => {
    const one = f.type === 'boolean' && !f.array ? `--${f.property}` : `--${f.property} <${f.type}>`;
    const word = f.array ? `${one}…` : one;
    return f.required ? word : `[${word}]`;
  });
  return [name, ...parts].join(' ');
}

/** `--help` of a tool: usage, description, one line per flag, and the other ways to give input. */
export function toolHelp(name: string, description: string, schema: unknown): string[] {
  const lines = [`usage: ${usageOf(name, schema)}`, `       ${name} '<json>'   or   echo '<json>' | ${name}`, ''];
  if (description) lines.push(description, '');
  const flat = flagsOf(schema);
  if (!flat.ok) {
    lines.push(`Its input is not flat (${flat.why}): give it as JSON.`);
    return lines;
  }
  for (const f of flat.flags) {
    const facts = [
      f.array ? `${f.type}, repeat for more` : f.type,
      ...(f.required ? ['required'] : []),
      ...(f.enum ? [`one of ${f.enum.map((v) => JSON.stringify(v)).join(', ')}`] : []),
      ...(f.default !== undefined ? [`default ${JSON.stringify(f.default)}`] : []),
    ];
    lines.push(`  --${f.property}  (${facts.join('; ')})${f.description ? ` ${f.description}` : ''}`);
  }
  lines.push('', 'Forge options: --json (print the whole envelope), --help.');
  return lines;
}
