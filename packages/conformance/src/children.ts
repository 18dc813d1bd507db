import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { onTestFinished } from 'vitest';

/**
 * How a child process opens a store over the same storage as the test: it calls
 * `await (await import(module))[export](...args)`. `module` is an absolute path or a package
 * specifier; `args` are JSON.
 */
export interface StoreChildOpen {
  module: string;
  export: string;
  args: unknown[];
}

const CHILD = new URL('./store-child.mjs', import.meta.url).pathname;

/** A running child of store-child.mjs: its JSON lines so far, and its end. */
export interface StoreChild {
  child: ChildProcess;
  lines: Record<string, unknown>[];
  /** Resolves once `n` lines have come (or rejects when the child ends first). */
  linesAtLeast(n: number): Promise<void>;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null; err: string }>;
}

/** Starts store-child.mjs with `args` (killed with SIGKILL when the test ends, if still running). */
export function startStoreChild(open: StoreChildOpen, args: Record<string, unknown>): StoreChild {
  const child = spawn(process.execPath, [CHILD, JSON.stringify({ open, ...args })], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: Record<string, unknown>[] = [];
  let partial = '';
  let err = '';
  const waiters = new Set<() => void>();
  child.stdout?.setEncoding('utf8').on('data', (s: string) => {
    partial += s;
    let i = partial.indexOf('\n');
    while (i >= 0) {
      lines.push(JSON.parse(partial.slice(0, i)) as Record<string, unknown>);
      partial = partial.slice(i + 1);
      i = partial.indexOf('\n');
    }
    for (const w of waiters) w();
  });
  child.stderr?.setEncoding('utf8').on('data', (s: string) => (err += s));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null; err: string }>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      for (const w of waiters) w();
      resolve({ code, signal, err });
    });
  });
  onTestFinished(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  const linesAtLeast = (n: number) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (lines.length >= n) {
          waiters.delete(check);
          resolve();
        } else if (child.exitCode !== null || child.signalCode !== null) {
          waiters.delete(check);
          reject(new Error(`the child ended (${child.exitCode ?? child.signalCode}) after ${lines.length} of ${n} lines: ${err}`));
        }
      };
      waiters.add(check);
      check();
    });
  return { child, lines, linesAtLeast, exit };
}

/** Runs a child to its end; fails with its stderr unless it exits 0 having printed `{done: true}`. */
export async function runStoreChild(open: StoreChildOpen, args: Record<string, unknown>): Promise<Record<string, unknown>[]> {
  const c = startStoreChild(open, args);
  const r = await c.exit;
  if (r.code !== 0 || c.lines.at(-1)?.done !== true) throw new Error(`child exited with ${r.code ?? r.signal}: ${r.err}`);
  return c.lines.slice(0, -1);
}

/** Waits until `n` children wait at the barrier file `go`, then creates it (releasing them). */
export async function startTogether(go: string, n: number): Promise<void> {
  const prefix = `${basename(go)}.ready.`;
  for (;;) {
    const ready = (await readdir(dirname(go))).filter((f) => f.startsWith(prefix)).length;
    if (ready >= n) break;
    await sleep(5);
  }
  writeFileSync(go, '');
}

/** Kills `c` with SIGKILL and waits for it to be gone. */
export async function kill9(c: StoreChild): Promise<void> {
  c.child.kill('SIGKILL');
  const r = await c.exit;
  if (r.signal !== 'SIGKILL' && r.code !== 0) throw new Error(`the child ended on its own (${r.code}): ${r.err}`);
}
