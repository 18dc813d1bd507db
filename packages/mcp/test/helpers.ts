import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { type CallContext, createForge, type Envelope, type Forge, type ForgeOptions } from '@forge/runner';
import { scaled } from '@forge/test-utils';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { type CallToolResult, type ClientCapabilities, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { expect, onTestFinished } from 'vitest';
import { createForgeMcpServer, type ForgeMcpServerOptions } from '../src/index.js';

const here = dirname(fileURLToPath(import.meta.url));
export const PACKAGE_DIR = resolve(here, '..');
const EXAMPLES = resolve(here, '../../../examples/index.mjs');

/** What the server declares to a 2025-era client (the 2026 era adds the tasks extension). */
export const CAPABILITIES = {
  tools: { listChanged: true },
  resources: { subscribe: true, listChanged: true },
  prompts: { listChanged: false },
  completions: {},
  logging: {},
  extensions: { 'io.modelcontextprotocol/skills': { directoryRead: true } },
};

/** A tool spec as these tests write it. */
export type Spec = {
  name: string;
  description: string;
  runtime: string;
  input_schema: Record<string, unknown>;
  output_schema?: Record<string, unknown>;
  impl: string;
  meta?: Record<string, unknown>;
  examples?: unknown[];
};

let examples: Promise<{ loadExample(name: string): Spec }> | undefined;
/** A canonical example tool (examples/<name>) through examples/index.mjs. */
export async function example(name: string): Promise<Spec> {
  examples ??= import(pathToFileURL(EXAMPLES).href) as Promise<{ loadExample(name: string): Spec }>;
  return (await examples).loadExample(name);
}

/** A python3 tool whose impl is `body` after `import json, sys` and `args = json.load(sys.stdin)`. */
export function py(name: string, body: string, extra: Partial<Spec> = {}): Spec {
  return {
    name,
    description: `test tool ${name}`,
    runtime: 'python3',
    input_schema: { type: 'object' },
    impl: `import json, sys\nargs = json.load(sys.stdin)\n${body}\n`,
    ...extra,
  };
}

let sandboxChecked = false;
/** Fails (never skips) without bwrap: forge refuses to run tools unsandboxed. */
export function requireSandbox(): void {
  if (sandboxChecked) return;
  const r = spawnSync('bwrap', ['--unshare-all', '--ro-bind', '/', '/', 'true'], { encoding: 'utf8' });
  if (r.error || r.status !== 0)
    throw new Error(
      `these tests need a working bubblewrap sandbox (apt-get install -y bubblewrap; user namespaces enabled): ${r.error?.message ?? r.stderr}`,
    );
  sandboxChecked = true;
}

/** A temp FORGE home and project (removed after the test), with breakers out of the way. */
export function tempDirs(): { root: string; home: string; project: string } {
  const root = mkdtempSync(join(tmpdir(), 'forge-mcp-test-'));
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  const home = join(root, 'home');
  const project = join(root, 'project');
  mkdirSync(home, { recursive: true });
  mkdirSync(join(project, '.forge'), { recursive: true });
  writeFileSync(join(home, 'policy.json'), JSON.stringify({ breakers: { per_tool_rpm: 100000, per_session_forge_count: 100000 } }));
  return { root, home, project };
}

/**
 * How many runs the project has started: each run makes its directory under `.forge/runs` before
 * its sandbox starts, so a count past the one before a call says the call is in flight.
 */
export function runsStarted(project: string): number {
  try {
    return readdirSync(join(project, '.forge', 'runs')).filter((d) => !d.endsWith('.jsonl')).length;
  } catch {
    return 0;
  }
}

/** A Forge over temp dirs, closed after the test. */
export async function newForge(dirs = tempDirs(), extra: Partial<ForgeOptions> = {}): Promise<Forge> {
  requireSandbox();
  const forge = await createForge({ home: dirs.home, project: dirs.project, env: {}, ...extra });
  onTestFinished(() => forge.close({ graceMs: 1000 }));
  return forge;
}

/** Counts `notifications/tools/list_changed` on a client and lets a test wait for the next one. */
export function listChanges(client: Client): { count(): number; next(timeoutMs?: number): Promise<void> } {
  let n = 0;
  const waiters: (() => void)[] = [];
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
    n++;
    for (const w of waiters.splice(0)) w();
  });
  return {
    count: () => n,
    next(timeoutMs = 10_000) {
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`no tools/list_changed within ${scaled(timeoutMs)} ms`)), scaled(timeoutMs));
        waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    },
  };
}

/**
 * An SDK Client connected in-process (InMemoryTransport) to a forge MCP server; both closed after
 * the test. `options` are the server's (a toolsmith) and the client's (its capabilities, and a
 * hook to set its handlers before it connects).
 */
export async function connect(
  forge: Forge,
  ctx?: CallContext,
  options: {
    server?: Omit<ForgeMcpServerOptions, 'ctx'>;
    capabilities?: ClientCapabilities;
    before?: (client: Client) => void;
  } = {},
): Promise<{ client: Client; changes: ReturnType<typeof listChanges> }> {
  const server = createForgeMcpServer(forge, { ...(ctx ? { ctx } : {}), ...options.server });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const client = new Client(
    { name: 'forge-mcp-test', version: '1.0.0' },
    options.capabilities ? { capabilities: options.capabilities } : {},
  );
  options.before?.(client);
  const changes = listChanges(client);
  await server.connect(serverSide);
  await client.connect(clientSide);
  onTestFinished(async () => {
    await client.close();
    await server.close();
  });
  return { client, changes };
}

/** The envelope in a tool result's text content. */
export function envelopeOf(r: unknown): Envelope {
  const content = (r as CallToolResult).content;
  const first = content[0];
  expect(first?.type).toBe('text');
  return JSON.parse((first as { text: string }).text) as Envelope;
}

/** Calls a tool and returns the result and its envelope. */
export async function call(
  client: Client,
  name: string,
  args: Record<string, unknown> = {},
): Promise<{ result: CallToolResult; envelope: Envelope }> {
  const result = (await client.callTool({ name, arguments: args })) as CallToolResult;
  return { result, envelope: envelopeOf(result) };
}

/** forge_tool with `spec` (plus scope/overwrite), expecting success. */
export async function forgeOk(client: Client, spec: Spec, extra: Record<string, unknown> = {}): Promise<Envelope> {
  const { result, envelope } = await call(client, 'forge_tool', { ...spec, ...extra });
  expect(result.isError, JSON.stringify(envelope)).toBe(false);
  return envelope;
}

/** A word counter blueprint for forge_propose (python3, two examples, deterministic); `extra` overrides fields. */
export function wordCountBlueprint(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    capability: 'text.word_count',
    description: 'Counts the words of a text (split on whitespace).',
    input_schema: {
      type: 'object',
      properties: { text: { type: 'string', maxLength: 200 } },
      required: ['text'],
      additionalProperties: false,
    },
    output_schema: {
      type: 'object',
      properties: { words: { type: 'integer', minimum: 0 } },
      required: ['words'],
      additionalProperties: false,
    },
    impl: py('x', 'print(json.dumps({"ok": True, "data": {"words": len(args["text"].split())}}))').impl,
    runtime: 'python3',
    deterministic: true,
    examples: [
      { input: { text: 'one two three' }, expect: { words: 3 } },
      { input: { text: '' }, expect: { words: 0 } },
    ],
    ...extra,
  };
}
