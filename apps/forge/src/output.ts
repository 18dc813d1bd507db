import type { Writable } from 'node:stream';
import { inertJson, inertText } from '@forge/registry/inert';
import { guardStream } from './stdout.js';

/**
 * Where a command prints, and how: JSON for scripts, short colour lines for people on a TTY.
 * Everything printed goes through one rule (`inertText` of @forge/registry): text an agent, a tool
 * or an upstream wrote is shown with its terminal escapes, invisible and bidi characters made
 * visible, and only forge's own colour codes pass (docs/security.md, invariant 5). No command
 * writes to the terminal any other way.
 */
export interface Output {
  readonly json: boolean;
  /**
   * Aborts when stdout's reader has gone (`forge audit tail | head -1`): what is printed after it is
   * dropped, and a command that would go on printing (a follow) should stop.
   */
  readonly gone: AbortSignal;
  /** A line on stdout. */
  line(text?: string): void;
  /** A line on stderr (notes, progress, problems), never on stdout. */
  note(text: string): void;
  /** One JSON document on stdout (pretty on a TTY). */
  data(value: unknown): void;
  /** One JSON document as one line on stdout (`--json` streams), or indented by `indent`. */
  jsonLine(value: unknown, indent?: number): void;
  readonly style: Style;
  /** A progress line on stderr while `work` runs, on a TTY only; cleared when it settles. */
  progress<T>(label: string, work: Promise<T>): Promise<T>;
}

export interface Style {
  bold(s: string): string;
  dim(s: string): string;
  red(s: string): string;
  green(s: string): string;
  yellow(s: string): string;
  cyan(s: string): string;
}

const CODES = { bold: [1, 22], dim: [2, 22], red: [31, 39], green: [32, 39], yellow: [33, 39], cyan: [36, 39] } as const;

/** The exact escape sequences {@link createStyle} writes: set or reset a colour, bold or dim, nothing else. */
export const STYLE_SEQUENCES: readonly string[] = [...new Set(Object.values(CODES).flat())].map((n) => `\x1b[${n}m`);

/** ANSI styles when `enabled`, identity functions otherwise. */
export function createStyle(enabled: boolean): Style {
  const wrap =
    (open: number, close: number) =>
    (s: string): string =>
      enabled ? `\x1b[${open}m${s}\x1b[${close}m` : s;
  return Object.fromEntries(Object.entries(CODES).map(([k, [o, c]]) => [k, wrap(o, c)])) as unknown as Style;
}

/** Colour only on a TTY, never when NO_COLOR is set (https://no-color.org) or TERM is dumb. */
export function wantsColor(stream: { isTTY?: boolean }, env: NodeJS.ProcessEnv = process.env): boolean {
  return stream.isTTY === true && !env.NO_COLOR && env.TERM !== 'dumb';
}

export interface OutputOptions {
  json: boolean;
  stdout?: Writable & { isTTY?: boolean };
  stderr?: Writable & { isTTY?: boolean };
  env?: NodeJS.ProcessEnv;
}

export function createOutput(o: OutputOptions): Output {
  const stdout = o.stdout ?? process.stdout;
  const stderr = o.stderr ?? process.stderr;
  const env = o.env ?? process.env;
  const style = createStyle(!o.json && wantsColor(stdout, env));
  const errStyleOn = wantsColor(stderr, env);
  const err = guardStream(stderr, { name: 'stderr' });
  const out = guardStream(stdout, { name: 'stdout', report: (m) => err.write(`${m}\n`) });
  // forge's own colour codes pass only where forge writes them (a colour TTY); elsewhere every ESC is shown.
  const keepOut = !o.json && wantsColor(stdout, env) ? STYLE_SEQUENCES : [];
  const keepErr = wantsColor(stdout, env) || errStyleOn ? STYLE_SEQUENCES : [];
  return {
    json: o.json,
    gone: out.gone,
    style,
    line: (text = '') => out.write(`${inertText(text, keepOut)}\n`),
    note: (text) => err.write(`${inertText(text, keepErr)}\n`),
    data: (value) => out.write(`${inertJson(JSON.stringify(value, null, stdout.isTTY ? 2 : undefined))}\n`),
    jsonLine: (value, indent) => out.write(`${inertJson(JSON.stringify(value, null, indent))}\n`),
    progress: (label, work) => (errStyleOn ? spin(err, label, work) : work),
  };
}

const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

async function spin<T>(stream: { write(text: string): void }, label: string, work: Promise<T>): Promise<T> {
  let i = 0;
  const started = Date.now();
  const draw = () => {
    const s = ((Date.now() - started) / 1000).toFixed(1);
    stream.write(`\r\x1b[2K${FRAMES[i++ % FRAMES.length]} ${label} ${s}s`);
  };
  // Only operations that take a while get a line: a quick one would just flicker.
  const timer = setInterval(draw, 80);
  timer.unref();
  try {
    return await work;
  } finally {
    clearInterval(timer);
    if (i > 0) stream.write('\r\x1b[2K');
  }
}

/** `12 ms`, `1.4 s`. */
export function ms(x: number): string {
  return x < 1000 ? `${x < 10 ? x.toFixed(1) : Math.round(x)} ms` : `${(x / 1000).toFixed(1)} s`;
}

/** Rows as aligned columns (the last column is not padded). */
export function table(rows: readonly (readonly string[])[], visibleLength: (s: string) => number = stripLength): string[] {
  const widths: number[] = [];
  for (const r of rows) for (const [i, c] of r.entries()) widths[i] = Math.max(widths[i] ?? 0, visibleLength(c));
  return rows.map((r) =>
    r
      .map((c, i) => (i === r.length - 1 ? c : c + ' '.repeat((widths[i] ?? 0) - visibleLength(c))))
      .join('  ')
      .trimEnd(),
  );
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: matching ANSI escapes is the point
const ANSI = /\x1b\[[0-9;]*m/g;
/** `s` without its ANSI styles. */
export function unstyled(s: string): string {
  return s.replace(ANSI, '');
}

function stripLength(s: string): number {
  return s.replace(ANSI, '').length;
}

/** At most `n` characters, with an ellipsis when cut. */
export function clip(s: string, n: number): string {
  return s.length <= n ? s : `${s.slice(0, n - 1)}…`;
}

/**
 * How a command that lists records prints them: a line each (`line`); with --json, one JSON array
 * at the end (one document, as every command's --json), or, when following (`follow`: no end to
 * wait for), one record per line as it comes (JSON Lines).
 */
export function recordPrinter<T>(out: Output, follow: boolean, line: (record: T) => string): { add(record: T): void; end(): void } {
  const all: T[] = [];
  return {
    add(record) {
      if (!out.json) out.line(line(record));
      else if (follow) out.jsonLine(record);
      else all.push(record);
    },
    end() {
      if (out.json && !follow && !out.gone.aborted) out.data(all);
    },
  };
}
