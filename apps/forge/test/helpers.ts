import { type ChildProcess, type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { probe } from '@forge/sandbox';
import { requireSandbox, scaled, waitFor } from '@forge/test-utils';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { type CallToolResult, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { onTestFinished } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));
/** The built CLI: these tests run what users run. */
export const CLI = resolve(here, '../dist/cli.js');
export const EXAMPLES = resolve(here, '../../../examples');

export { asRoot } from '@forge/test-utils';

/**
 * An example tool's whole spec (tool.json with its impl), with a wall-clock limit that scales
 * (30 s, times FORGE_TEST_SCALE): fib's own 5 s is its example's budget, and on a host whose
 * cores another process saturates, with a PostgreSQL and four forge processes starting beside it,
 * a cold run of it has been seen to pass 5 s.
 */
export function exampleSpec(name: string): Record<string, unknown> {
  const dir = join(EXAMPLES, name);
  const s = JSON.parse(readFileSync(join(dir, 'tool.json'), 'utf8')) as Record<string, unknown>;
  const main = readdirSync(dir).find((f) => f.startsWith('main.')) as string;
  const meta = { ...(s.meta as Record<string, unknown> | undefined), timeout_ms: scaled(30_000) };
  return { ...s, meta, impl: readFileSync(join(dir, main), 'utf8') };
}

/** Fails (never skips) without the built CLI or a working sandbox, with the fix. */
export async function requireCliAndSandbox(): Promise<void> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: build first (pnpm turbo run build --filter=forge...)`);
  await requireSandbox(probe);
}

/** A scratch forge home and project (with .forge/), removed when the test finishes. */
export interface Scratch {
  root: string;
  home: string;
  project: string;
  /** The environment for the CLI: this home, no FORGE_* from the host, no colour. */
  env: Record<string, string>;
  /** A file in the project (directories created). */
  file(rel: string, text: string): string;
  /** Another project under the same root (for two-project tests). */
  otherProject(name: string): string;
}

export function scratch(prefix = 'forge-cli-test-'): Scratch {
  const root = mkdtempSync(join(tmpdir(), prefix));
  const home = join(root, 'home');
  const project = join(root, 'project');
  mkdirSync(home, { mode: 0o700 });
  mkdirSync(join(project, '.forge'), { recursive: true });
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('FORGE_')) env[k] = v;
  Object.assign(env, { FORGE_HOME: home, NO_COLOR: '1' });
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  return {
    root,
    home,
    project,
    env,
    file(rel, text) {
      const p = join(project, rel);
      mkdirSync(dirname(p), { recursive: true });
      writeFileSync(p, text);
      return p;
    },
    otherProject(name) {
      const p = join(root, name);
      mkdirSync(join(p, '.forge'), { recursive: true });
      return p;
    },
  };
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the built CLI to completion. */
export function runCli(
  args: string[],
  o: { cwd: string; env: Record<string, string>; input?: string; timeoutMs?: number },
): Promise<CliResult> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: o.cwd, env: o.env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const limit = scaled(o.timeoutMs ?? 60_000);
    let killed = false;
    const timer = setTimeout(() => {
      killed = true;
      child.kill('SIGKILL');
    }, limit);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      // A kill is said where every assertion on the result shows it (code null alone says nothing).
      if (killed) stderr += `\n[test] forge ${args.join(' ')} was still running after ${limit} ms and was killed`;
      resolvePromise({ code, stdout, stderr });
    });
    child.stdin.end(o.input ?? '');
  });
}

/** A connected SDK client over stdio to `forge serve` in `cwd`. */
export interface Connected {
  client: Client;
  transport: StdioClientTransport;
  /** Everything the server wrote to stderr. */
  stderr(): string;
  /** How many notifications/tools/list_changed arrived. */
  listChanged(): number;
  /** Resolves at the next list_changed (rejects after `ms`). */
  nextListChanged(ms?: number): Promise<void>;
  /** Calls a tool and parses the envelope from its text content. */
  call(name: string, args?: Record<string, unknown>): Promise<{ result: CallToolResult; env: Envelope }>;
}

export interface Envelope {
  ok: boolean;
  data?: unknown;
  error?: { kind: string; message: string };
  meta?: Record<string, unknown>;
}

export async function connect(s: Scratch, o: { cwd?: string; env?: Record<string, string>; args?: string[] } = {}): Promise<Connected> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [CLI, 'serve', ...(o.args ?? [])],
    cwd: o.cwd ?? s.project,
    env: { ...s.env, ...o.env },
    stderr: 'pipe',
  });
  let err = '';
  transport.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  const client = new Client({ name: 'forge-cli-test', version: '1.0.0' });
  let count = 0;
  const waiters: (() => void)[] = [];
  client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
    count++;
    for (const w of waiters.splice(0)) w();
  });
  await client.connect(transport);
  onTestFinished(() => client.close().catch(() => {}));
  return {
    client,
    transport,
    stderr: () => err,
    listChanged: () => count,
    nextListChanged: (ms = 5000) =>
      new Promise<void>((res, rej) => {
        const t = setTimeout(() => rej(new Error(`no list_changed within ${scaled(ms)} ms; server stderr: ${err}`)), scaled(ms));
        waiters.push(() => {
          clearTimeout(t);
          res();
        });
      }),
    async call(name, args = {}) {
      // The SDK's own 60 s default is not the machine's: the limit scales. A failure (the server
      // gone, say) carries what the server said on stderr, which is where its reason is.
      const result = (await client.callTool({ name, arguments: args }, undefined, { timeout: scaled(120_000) }).catch((e: Error) => {
        throw new Error(`${name}: ${e.message}; server stderr: ${err || '(nothing)'}`, { cause: e });
      })) as CallToolResult;
      const first = result.content[0];
      return { result, env: JSON.parse(first?.type === 'text' ? first.text : 'null') as Envelope };
    },
  };
}

/** `forge serve` as a raw child process, for feeding it bytes a well-behaved client never sends. */
export interface RawServer {
  child: ChildProcessWithoutNullStreams;
  send(line: string): void;
  /** The next JSON-RPC message on stdout whose id is `id` (or the next one at all, for undefined). */
  next(id?: number | string | null, ms?: number): Promise<Record<string, unknown>>;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stdout(): string;
  stderr(): string;
}

export function rawServer(s: Scratch, args: string[] = []): RawServer {
  const child = spawn(process.execPath, [CLI, 'serve', ...args], { cwd: s.project, env: s.env, stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  const messages: Record<string, unknown>[] = [];
  let buf = '';
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
    buf += d.toString();
    let i = buf.indexOf('\n');
    while (i >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.trim()) messages.push(JSON.parse(line) as Record<string, unknown>);
      i = buf.indexOf('\n');
    }
  });
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    child.on('exit', (code, signal) => r({ code, signal })),
  );
  onTestFinished(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  return {
    child,
    send: (line) => child.stdin.write(`${line}\n`),
    next(id, ms = 30_000) {
      return waitFor(
        () => `a message with id ${String(id)}; stdout: ${out}; stderr: ${err}`,
        () => {
          const i = messages.findIndex((m) => id === undefined || m.id === id);
          return i >= 0 ? (messages.splice(i, 1)[0] as Record<string, unknown>) : undefined;
        },
        { timeoutMs: ms },
      );
    },
    exit,
    stdout: () => out,
    stderr: () => err,
  };
}

export const INIT = JSON.stringify({
  jsonrpc: '2.0',
  id: 0,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
});

/** A python3 tool spec: `body` runs after `import json, sys` and `args = json.load(sys.stdin)`. */
export function py(name: string, body: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    name,
    description: `test tool ${name}`,
    runtime: 'python3',
    input_schema: { type: 'object' },
    impl: `import json, sys\nargs = json.load(sys.stdin)\n${body}\n`,
    ...extra,
  };
}

/** `forge serve --http 127.0.0.1:0 --json …` until it prints its URL; stopped with SIGTERM when the test finishes. */
export async function serveHttp(
  s: Scratch,
  extra: string[] = [],
  o: { files?: number } = {},
): Promise<{ url: URL; child: ChildProcessWithoutNullStreams; stderr: () => string }> {
  const argv = [CLI, 'serve', '--http', '127.0.0.1:0', '--json', ...extra];
  // With `files`, at most that many open descriptors (`ulimit -n`), as a small host allows.
  const child =
    o.files === undefined
      ? spawn(process.execPath, argv, { cwd: s.project, env: s.env })
      : spawn('bash', ['-c', `ulimit -n ${o.files} && exec "$0" "$@"`, process.execPath, ...argv], { cwd: s.project, env: s.env });
  onTestFinished(async () => {
    if (child.exitCode !== null) return;
    const exited = new Promise((r) => child.on('exit', r));
    child.kill('SIGTERM');
    await exited;
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      const line = out.split('\n')[0];
      if (out.includes('\n') && line) resolve((JSON.parse(line) as { url: string }).url);
    });
    child.on('exit', (code) => reject(new Error(`forge serve --http exited ${code}: ${err}`)));
  });
  return { url: new URL(url), child, stderr: () => err };
}

/** Waits until `check` holds (looking every `everyMs`, default 100 ms) for at most `ms` (scaled), then fails with `what()`. */
export async function until(check: () => boolean | Promise<boolean>, ms: number, what: () => string, everyMs = 100): Promise<void> {
  await waitFor(what, check, { timeoutMs: ms, intervalMs: everyMs });
}

/**
 * The gateway test upstream (fixtures/gateway-upstream.mjs) as server "rug" in the scratch home's
 * gateway.json, unsandboxed; returns its description file. Each start of it appends a line to
 * `<root>/rug-starts`.
 */
export function rugGateway(s: Scratch, description = 'Says hello.'): string {
  const desc = join(s.root, 'desc.txt');
  writeFileSync(desc, description);
  const upstream = resolve(here, 'fixtures/gateway-upstream.mjs');
  writeFileSync(
    join(s.home, 'gateway.json'),
    JSON.stringify({
      servers: {
        rug: {
          command: process.execPath,
          args: [upstream],
          env: { HELLO_DESC_FILE: desc, HELLO_STARTS_FILE: join(s.root, 'rug-starts') },
          unsandboxed: true,
        },
      },
    }),
  );
  return desc;
}

/** A `forge worker` child for `s`'s project, started and waited for (stopped after the test, waited for too). */
export async function startWorker(s: Scratch, env: Record<string, string> = s.env): Promise<ChildProcess> {
  const worker = spawn(process.execPath, [CLI, 'worker'], { cwd: s.project, env });
  const exited = new Promise((r) => worker.on('exit', r));
  onTestFinished(async () => {
    worker.kill('SIGKILL');
    await exited;
  });
  let said = '';
  worker.stderr?.on('data', (d) => (said += d));
  await waitFor(
    () => `the worker to start (stderr: ${said})`,
    () => said.includes('worker on'),
    { timeoutMs: 60_000 },
  );
  return worker;
}
