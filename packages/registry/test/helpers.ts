import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readdir, writeFile } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { tempDir, waitFor } from '@forge/test-utils';
import { onTestFinished } from 'vitest';
import {
  type CreatedBy,
  createRegistry,
  type Registry,
  type RegistryEvent,
  type RegistryOptions,
  scopeRoots,
  type ToolSpec,
} from '../src/index.js';

export { tempDir };

export const BY: CreatedBy = { persona: 'tester', session: 'sess-1' };

export const BUILTINS = ['forge_tool', 'forge_call', 'forge_list', 'forge_promote', 'forge_remove'];

/** A valid spec; `over` replaces fields. */
export function spec(over: Partial<ToolSpec> & Record<string, unknown> = {}): ToolSpec {
  return {
    name: 'csv.count',
    description: 'Counts the rows of a CSV file.',
    input_schema: {
      type: 'object',
      properties: { path: { type: 'string', 'x-bind': 'ro' }, header: { type: 'boolean' } },
      required: ['path'],
      additionalProperties: false,
    },
    impl: 'import json, sys\nargs = json.load(sys.stdin)\nprint(json.dumps({"ok": True, "data": sum(1 for _ in open(args["path"]))}))\n',
    runtime: 'python3',
    ...over,
  } as ToolSpec;
}

/** A clock that starts at 2030-01-02T03:04:05.000Z and advances one second per reading. */
export function fakeClock(): () => Date {
  let t = Date.parse('2030-01-02T03:04:05.000Z');
  return () => {
    const d = new Date(t);
    t += 1000;
    return d;
  };
}

export interface Fixture {
  home: string;
  project: string;
  roots: ReturnType<typeof scopeRoots>;
  events: RegistryEvent[];
  registry: Registry;
  /** Another registry over the same directories (another server, say). */
  open(options?: Partial<RegistryOptions>): Registry;
}

/** Four configured scopes in temp dirs and a registry over them, closed when the test ends. */
export async function fixture(options: Partial<RegistryOptions> = {}): Promise<Fixture> {
  const home = await tempDir('forge-home-');
  const project = await tempDir('forge-project-');
  const roots = scopeRoots({ forgeHome: home, project, session: 's1', task: 't1' });
  const events: RegistryEvent[] = [];
  const open = (o: Partial<RegistryOptions> = {}) => {
    const r = createRegistry({ roots, builtins: BUILTINS, onEvent: (e) => events.push(e), now: fakeClock(), ...options, ...o });
    onTestFinished(() => r.close());
    return r;
  };
  return { home, project, roots, events, registry: open(), open };
}

/** The child process script (uses the BUILT library: the package's test task builds first). */
export const CHILD = new URL('./fixtures/child.mjs', import.meta.url).pathname;

/** Fails with the fix when dist/ is missing, instead of a confusing child crash. */
export function requireBuilt(): void {
  if (!existsSync(new URL('../dist/index.js', import.meta.url))) {
    throw new Error('these tests run child processes against the built library: run `pnpm build` in packages/registry first');
  }
}

export interface ChildRun {
  child: ChildProcess;
  /** Resolves with the child's JSON output line when it exits 0; rejects otherwise. */
  result: Promise<unknown>;
}

/** Starts `node fixtures/child.mjs <json>`; killed when the test ends if still running. */
export function runChild(args: unknown): ChildRun {
  const child = spawn(process.execPath, [CHILD, JSON.stringify(args)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout?.setEncoding('utf8').on('data', (s: string) => (out += s));
  child.stderr?.setEncoding('utf8').on('data', (s: string) => (err += s));
  const result = new Promise<unknown>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => {
      if (code === 0) resolve(JSON.parse(out));
      else reject(new Error(`child exited with ${code}: ${err}`));
    });
  });
  onTestFinished(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return { child, result };
}

/** Waits until `n` children wait at the barrier `go` (see fixtures/child.mjs), then releases them. */
export async function startTogether(go: string, n: number): Promise<void> {
  const prefix = `${basename(go)}.ready.`;
  let ready = 0;
  await waitFor(
    () => `${n} children to reach the start barrier (${ready} did)`,
    async () => {
      ready = (await readdir(dirname(go))).filter((f) => f.startsWith(prefix)).length;
      return ready >= n;
    },
  );
  await writeFile(go, '');
}
