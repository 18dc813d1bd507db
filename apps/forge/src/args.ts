import { type ParseArgsConfig, parseArgs } from 'node:util';

/** A command line that cannot be run as written: exit 2 with the usage line of the command. */
export class UsageError extends Error {
  readonly exitCode = 2;
  constructor(
    message: string,
    /** The usage line of the command that was misused (`forge tools call <name> [<json>|-]`). */
    readonly usage?: string,
  ) {
    super(message);
    this.name = 'UsageError';
  }
}

/** The host or the configuration is not usable (a missing file, an unreadable home): exit 2. */
export class EnvironmentError extends Error {
  readonly exitCode = 2;
  constructor(message: string) {
    super(message);
    this.name = 'EnvironmentError';
  }
}

type Options = NonNullable<ParseArgsConfig['options']>;

/**
 * Options every command takes. The ones that configure forge are the flag form of an environment
 * variable (see {@link envFromFlags}).
 */
export const GLOBAL_OPTIONS = {
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  home: { type: 'string' },
  project: { type: 'string' },
  persona: { type: 'string' },
  session: { type: 'string' },
  task: { type: 'string' },
  vault: { type: 'string' },
  store: { type: 'string' },
  'allowed-tools': { type: 'string' },
} as const satisfies Options;

/** Each configuring flag and the environment variable it sets. */
export const FLAG_ENV = {
  home: 'FORGE_HOME',
  persona: 'FORGE_PERSONA',
  session: 'FORGE_SESSION_ID',
  task: 'FORGE_TASK_ID',
  vault: 'FORGE_SECRET_VAULT',
  store: 'FORGE_STORE',
  'allowed-tools': 'FORGE_ALLOWED_TOOLS',
} as const;

export interface Parsed {
  values: Record<string, string | boolean | string[] | undefined>;
  positionals: string[];
}

/** One command: how it is written, what it does, its own options and how many positionals it takes. */
export interface CommandSpec {
  /** `forge tools call <name> [<json>|-]` */
  usage: string;
  summary: string;
  /** Lines of `--help` after the usage line: each option and what it does. */
  details?: string[];
  options?: Options;
  /** [min, max] positionals. */
  positionals?: [number, number];
  /**
   * Options are read only before the first positional (or `--`): it and everything after it are
   * positionals as written (`forge run NAME --n 5` hands `--n 5` to the tool).
   */
  passThrough?: boolean;
}

/**
 * Parses `argv` (after the command words) strictly: unknown options, a missing option value and
 * a wrong number of positionals are {@link UsageError}s naming what was wrong.
 */
export function parseCommand(spec: CommandSpec, argv: readonly string[]): Parsed {
  if (spec.passThrough) {
    const at = firstPositional(argv, { ...GLOBAL_OPTIONS, ...spec.options });
    const head = parseCommand({ ...spec, passThrough: false, positionals: [0, 0] }, argv.slice(0, at));
    const tail = argv.slice(argv[at] === '--' ? at + 1 : at);
    if (head.values.help && tail.length === 0) return head;
    const [min] = spec.positionals ?? [0, 0];
    if (tail.length < min) throw new UsageError(`missing ${missingName(spec.usage, tail.length)}`, spec.usage);
    return { values: { ...head.values, help: undefined }, positionals: tail };
  }
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: [...argv],
      options: { ...GLOBAL_OPTIONS, ...spec.options },
      allowPositionals: true,
      strict: true,
    });
  } catch (err) {
    throw new UsageError(cleanParseError((err as Error).message), spec.usage);
  }
  const values = parsed.values as Parsed['values'];
  if (values.help) return { values, positionals: parsed.positionals };
  const [min, max] = spec.positionals ?? [0, 0];
  const n = parsed.positionals.length;
  if (n < min) throw new UsageError(`missing ${missingName(spec.usage, n)}`, spec.usage);
  if (n > max) throw new UsageError(`unexpected argument "${parsed.positionals[max]}"`, spec.usage);
  return { values, positionals: parsed.positionals };
}

/** Where the positionals start in `argv`: the first argument that is neither an option nor an option's value, or `--`. */
function firstPositional(argv: readonly string[], options: Options): number {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (a === '--' || !a.startsWith('-') || a === '-') return i;
    const name = a.startsWith('--') ? a.slice(2).split('=')[0] : Object.entries(options).find(([, o]) => o.short === a.slice(1))?.[0];
    const o = name === undefined ? undefined : options[name];
    if (o?.type === 'string' && !a.includes('=')) i++;
  }
  return argv.length;
}

/** The name of the first missing positional, from the usage line (`<name>`), else "an argument". */
function missingName(usage: string, given: number): string {
  const required = usage.match(/<[^>]+>/g) ?? [];
  const name = required[given];
  return name ? `argument ${name}` : 'an argument';
}

/** node:util's messages carry advice meant for programmers ("To specify a positional argument…"). */
function cleanParseError(message: string): string {
  return message
    .replace(/\. To specify a positional argument.*$/s, '')
    .replace(/^Unknown option '([^']+)'.*$/s, 'unknown option $1')
    .replace(/^Option '([^']+)' argument missing$/s, 'option $1 needs a value');
}

/**
 * The environment forge runs with: the process environment with each configuring flag applied
 * over its variable (`--home D` is `FORGE_HOME=D`).
 */
export function envFromFlags(values: Parsed['values'], base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const env = { ...base };
  for (const [flag, name] of Object.entries(FLAG_ENV)) {
    const v = values[flag];
    if (typeof v === 'string') env[name] = v;
  }
  return env;
}

/** `[host:]port` of `--http`: host defaults to 127.0.0.1; an IPv6 host is written in brackets. */
export function parseListen(value: string): { host: string; port: number } {
  const m = /^(?:(\[[^\]]+\]|[^:]+):)?(\d{1,5})$/.exec(value.trim());
  const port = m ? Number(m[2]) : Number.NaN;
  if (!m || port > 65535) throw new UsageError(`--http expects [host:]port, like 8080 or 127.0.0.1:8080 (got "${value}")`);
  const host = m[1] ? m[1].replace(/^\[|\]$/g, '') : '127.0.0.1';
  return { host, port };
}

/** `--token T=persona` values into the tokens map of the HTTP transport. */
export function parseTokens(values: readonly string[]): Record<string, { persona: string; allowedTools?: string }> {
  const out: Record<string, { persona: string; allowedTools?: string }> = {};
  for (const v of values) {
    const i = v.indexOf('=');
    const token = v.slice(0, i);
    const rest = v.slice(i + 1);
    if (i < 1 || rest === '') throw new UsageError(`--token expects TOKEN=persona[:tool,tool…] (got "${v}")`);
    const [persona, tools] = rest.split(':', 2) as [string, string | undefined];
    if (!/^[A-Za-z][A-Za-z0-9_-]{0,63}$/.test(persona))
      throw new UsageError(`--token ${token.slice(0, 4)}…: "${persona}" is not a persona name`);
    out[token] = { persona, ...(tools ? { allowedTools: tools } : {}) };
  }
  return out;
}
