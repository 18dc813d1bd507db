import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { verifyLog } from '@forge/audit-chain';
import { createGateway, type Gateway } from '@forge/gateway';
import { createForge, type Envelope, type Forge, type ForgeOptions } from '@forge/runner';
import { probe } from '@forge/sandbox';
import { requireSandbox, scaled, tempDirSync } from '@forge/test-utils';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect, onTestFinished } from 'vitest';

export { asRoot, asUser } from '@forge/test-utils';

/** A scratch directory under the system temp dir, removed when the test finishes. */
export const scratchDir = (prefix = 'forge-attack-'): string => tempDirSync(prefix);

/**
 * How long a gateway listing waits for an upstream still starting: the product's 3 s, scaled with
 * the machine, so a hostile server slow to start on a loaded host is listed, not offered pinned.
 */
export const listWaitMs = (): number => scaled(3_000);

export interface Target {
  forge: Forge;
  /** The gateway the engine serves, when `servers` were given. */
  gateway?: Gateway;
  root: string;
  home: string;
  project: string;
  /** Writes a file under the project (directories created) and returns its path. */
  file(rel: string, text: string): string;
}

/**
 * The engine under attack over a fresh home and project. `userPolicy` is the operator's policy.
 * When the test finishes the engine closes, its audit log must verify, and everything is removed.
 */
export async function target(
  o: {
    userPolicy?: Record<string, unknown>;
    forge?: Omit<ForgeOptions, 'home' | 'project'>;
    /** The operator's gateway.json servers: the engine then serves a gateway over them. */
    servers?: Record<string, unknown>;
    /** The repository's .forge/gateway.json servers. */
    projectServers?: Record<string, unknown>;
  } = {},
): Promise<Target> {
  await requireSandbox(probe);
  const root = scratchDir();
  const home = join(root, 'home');
  const project = join(root, 'project');
  mkdirSync(home, { recursive: true, mode: 0o700 });
  mkdirSync(join(project, '.forge'), { recursive: true, mode: 0o700 });
  if (o.userPolicy) writeFileSync(join(home, 'policy.json'), JSON.stringify(o.userPolicy));
  let gateway: Gateway | undefined;
  if (o.servers || o.projectServers) {
    const userFile = join(home, 'gateway.json');
    const workspaceFile = join(project, '.forge', 'gateway.json');
    if (o.servers) writeFileSync(userFile, JSON.stringify({ servers: o.servers }));
    if (o.projectServers) writeFileSync(workspaceFile, JSON.stringify({ servers: o.projectServers }));
    gateway = createGateway({ userFile, workspaceFile, gatewayDir: join(home, 'gateway'), listWaitMs: listWaitMs() });
  }
  const forge = await createForge({ env: {}, ...o.forge, ...(gateway ? { sources: [gateway] } : {}), home, project });
  onTestFinished(async () => {
    await forge.close({ graceMs: 2000 });
    const v = await verifyLog(forge.paths.auditLog);
    expect(v.first_bad, 'the audit log must verify after an attack').toBeUndefined();
  });
  return {
    forge,
    ...(gateway ? { gateway } : {}),
    root,
    home,
    project,
    file(rel, text) {
      const p = join(project, rel);
      mkdirSync(join(p, '..'), { recursive: true });
      writeFileSync(p, text);
      return p;
    },
  };
}

/** A python3 tool: `body` runs after `import json, os, sys` and `args = json.load(sys.stdin)`. */
export function py(name: string, body: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    name,
    description: `attack tool ${name}`,
    runtime: 'python3',
    input_schema: { type: 'object' },
    impl: `import json, os, sys\nargs = json.load(sys.stdin)\n${body}\n`,
    ...extra,
  };
}

/** Asserts a refusal of `kind` and returns its error. */
export function refused(env: Envelope, kind: string): { kind: string; message: string } {
  if (env.ok) throw new Error(`expected a ${kind} refusal, got ${JSON.stringify(env)}`);
  expect(env.error.kind, env.error.message).toBe(kind);
  return env.error;
}

/** The built forge CLI: the attacks on what a person sees run what people run. */
export const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../../../apps/forge/dist/cli.js');

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `forge <args>` in `project` with FORGE_HOME `home` (no FORGE_* from the host), to completion. */
export function cli(
  t: { home: string; project: string },
  args: string[],
  o: { input?: string; env?: Record<string, string> } = {},
): Promise<CliResult> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: build first (pnpm turbo run build --filter=forge...)`);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('FORGE_')) env[k] = v;
  Object.assign(env, { FORGE_HOME: t.home }, o.env);
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: t.project, env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', fail);
    child.on('close', (code) => done({ code, stdout, stderr }));
    child.stdin.end(o.input ?? '');
  });
}

/** A fresh FORGE_HOME and project (with .forge/) for CLI attacks, removed when the test finishes. */
export function scratch(): { root: string; home: string; project: string } {
  const root = scratchDir();
  const home = join(root, 'home');
  const project = join(root, 'project');
  mkdirSync(home, { mode: 0o700 });
  mkdirSync(join(project, '.forge'), { recursive: true });
  return { root, home, project };
}

/** An MCP client (the official SDK) connected over stdio to `forge serve` in the scratch project. */
export interface Served {
  client: Client;
  /** Calls a tool and parses forge's envelope from its text content. */
  call(name: string, args?: Record<string, unknown>): Promise<Envelope>;
  stderr(): string;
}

export async function serve(t: { home: string; project: string }, env: Record<string, string> = {}): Promise<Served> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: build first (pnpm turbo run build --filter=forge...)`);
  const base: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('FORGE_')) base[k] = v;
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [CLI, 'serve'],
    cwd: t.project,
    env: { ...base, FORGE_HOME: t.home, ...env },
    stderr: 'pipe',
  });
  let err = '';
  transport.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  const client = new Client({ name: 'forge-attacks', version: '1.0.0' });
  await client.connect(transport);
  onTestFinished(() => client.close().catch(() => {}));
  return {
    client,
    stderr: () => err,
    async call(name, args = {}) {
      const result = (await client.callTool({ name, arguments: args })) as CallToolResult;
      const first = result.content[0];
      return JSON.parse(first?.type === 'text' ? first.text : 'null') as Envelope;
    },
  };
}

const require = createRequire(import.meta.url);
/** This package's directory: its node_modules resolve the fixtures' imports. */
export const PACKAGE_DIR = realpathSync(resolve(dirname(fileURLToPath(import.meta.url)), '..'));
/** pnpm's store of the workspace, where every package's files live (bound read-only into upstream sandboxes). */
export const PNPM_STORE = (() => {
  const sdk = realpathSync(dirname(require.resolve('@modelcontextprotocol/sdk/package.json')));
  return sdk.slice(0, sdk.indexOf('/.pnpm/') + '/.pnpm'.length);
})();
/** The hostile upstream MCP server (test/fixtures/hostile-upstream.mjs) as a gateway.json entry, sandboxed. */
export function hostileServer(
  env: Record<string, string> = {},
  binds: { path: string; mode: 'ro' | 'rw' }[] = [],
): Record<string, unknown> {
  return {
    command: 'node',
    args: [join(PACKAGE_DIR, 'test', 'fixtures', 'hostile-upstream.mjs')],
    env,
    binds: [{ path: PACKAGE_DIR, mode: 'ro' }, { path: PNPM_STORE, mode: 'ro' }, ...binds],
  };
}
