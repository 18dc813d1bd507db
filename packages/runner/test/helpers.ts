import { chmodSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { verifyLog } from '@forge/audit-chain';
import { prebuiltStats, probe } from '@forge/sandbox';
import { requireSandbox as requireSandboxOn, scaled, waitFor } from '@forge/test-utils';
import { expect, onTestFinished, vi } from 'vitest';
import { createForge, type Envelope, type Forge, type ForgeOptions } from '../src/index.js';

export { asRoot } from '@forge/test-utils';

const here = dirname(fileURLToPath(import.meta.url));
const EXAMPLES_DIR = resolve(here, '../../../examples');

/** A tool spec as these tests write it (the registry checks the real shape). */
export interface Spec {
  name: string;
  description: string;
  runtime: string;
  input_schema: Record<string, unknown>;
  output_schema?: Record<string, unknown>;
  impl: string;
  meta?: Record<string, unknown>;
  examples?: { input: Record<string, unknown>; expect?: unknown }[];
}

let examples: Promise<{ loadExample(name: string): Spec }> | undefined;

/** The full spec of a canonical example tool (examples/<name>: tool.json plus main.*), via examples/index.mjs. */
export async function example(name: string): Promise<Spec> {
  examples ??= import(pathToFileURL(join(EXAMPLES_DIR, 'index.mjs')).href) as Promise<{ loadExample(name: string): Spec }>;
  return (await examples).loadExample(name);
}

/** A tool spec with an open object input schema unless one is given. */
export function tool(name: string, runtime: string, impl: string, extra: Partial<Spec> = {}): Spec {
  return { name, description: `test tool ${name}`, runtime, input_schema: { type: 'object' }, impl, ...extra };
}

/** A call's receipt in `meta.audit` (receipts.ts): its entry's seq and leaf index, and the leaf hash. */
export const RECEIPT = { seq: expect.any(Number), index: expect.any(Number), leaf_hash: expect.stringMatching(/^[0-9a-f]{64}$/) };

/** A python3 tool whose impl is `body` after `import json, os, sys` and `args = json.load(sys.stdin)`. */
export function py(name: string, body: string, extra: Partial<Spec> = {}): Spec {
  return tool(name, 'python3', `import json, os, sys\nargs = json.load(sys.stdin)\n${body}\n`, extra);
}

/** A node tool (CommonJS) whose impl is `body` after `const fs = require('node:fs')` and `const args = JSON.parse(<stdin>)`. */
export function js(name: string, body: string, extra: Partial<Spec> = {}): Spec {
  return tool(name, 'node', `const fs = require('node:fs');\nconst args = JSON.parse(fs.readFileSync(0, 'utf8'));\n${body}\n`, extra);
}

/** Fails (never skips) when this host cannot sandbox, with the probe's own fix: the runner refuses to run tools bare. */
export const requireSandbox = (): Promise<void> => requireSandboxOn(probe);

/** Writes `text` to `file` atomically (a new inode, so a reload sees the change even within one mtime tick). */
export function writeAtomic(file: string, text: string, mode = 0o600): void {
  mkdirSync(dirname(file), { recursive: true });
  const tmp = `${file}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`;
  writeFileSync(tmp, text, { mode });
  chmodSync(tmp, mode);
  renameSync(tmp, file);
}

/** A clock for breakers and the cache: starts at the real time and moves only when told. */
export interface FakeClock {
  now: () => number;
  advance(ms: number): void;
}

export function fakeClock(start = Date.now()): FakeClock {
  let t = start;
  return {
    now: () => t,
    advance(ms) {
      t += ms;
    },
  };
}

/** One audit entry as written (the log format: seq, ts, type, data, prev, hash). */
/**
 * An audit log's batch write (`io.write` of `openAuditLog`) that fails with `code`, as a disk
 * does, for each batch `failing` picks; any other it writes whole.
 */
export function failingWrite(failing: (data: Buffer) => boolean, code = 'EIO'): { write(handle: FileHandle, data: Buffer): Promise<void> } {
  return {
    async write(handle, data) {
      if (failing(data)) throw Object.assign(new Error(`${code}: injected, write`), { code, syscall: 'write' });
      let off = 0;
      while (off < data.length) off += (await handle.write(data, off, data.length - off)).bytesWritten;
    },
  };
}

export interface Entry {
  seq: number;
  ts: string;
  type: string;
  data: Record<string, unknown>;
}

export interface FixtureOptions {
  /** `<home>/policy.json` */
  userPolicy?: unknown;
  /** `<project>/.forge/policy.json` */
  workspacePolicy?: unknown;
  /** `<project>/.forge/policy.rules` */
  rules?: string;
  /** `<home>/secrets.json`, mode 0600 (an object is written as JSON). */
  vault?: Record<string, unknown> | string;
  /** Share another fixture's home (two projects, one user scope). */
  home?: string;
  /** Options for createForge (home, project and env are the fixture's). */
  forge?: Omit<ForgeOptions, 'home' | 'project'>;
}

export interface Fixture {
  forge: Forge;
  root: string;
  home: string;
  project: string;
  /** A second engine over the same home and project (a restart: registries reloaded from disk). */
  reopen(options?: Omit<ForgeOptions, 'home' | 'project'>): Promise<Forge>;
  /** Every entry of the audit log, read from the file. */
  audit(): Entry[];
  /** The entries of one type. */
  entries(type: string): Entry[];
  /** The run manifest of a run id (for a cache hit, the hit's own record: a manifest or a line of runs/hits.jsonl). */
  manifest(runId: string): Record<string, unknown>;
  /** The run directory of a run id. */
  runDir(runId: string): string;
  /** Run manifests that are not cache hits, for `tool`. */
  sandboxRuns(tool: string): Record<string, unknown>[];
  /** A file in the project (created with its directories). */
  file(rel: string, text: string): string;
}

/**
 * A forge over a fresh home and project (siblings in one temp dir), with the given policy files
 * and vault. When the test finishes, every engine is closed, the audit log must verify, and the
 * directories are removed. `env` is empty so the host's FORGE_* variables play no part.
 */
export async function setup(options: FixtureOptions = {}): Promise<Fixture> {
  await requireSandbox();
  const root = await mkdtemp(join(tmpdir(), 'forge-runner-test-'));
  const home = options.home ?? join(root, 'home');
  const project = join(root, 'project');
  mkdirSync(home, { recursive: true, mode: 0o700 });
  mkdirSync(join(project, '.forge'), { recursive: true, mode: 0o700 });
  if (options.userPolicy !== undefined) writeAtomic(join(home, 'policy.json'), JSON.stringify(options.userPolicy));
  if (options.workspacePolicy !== undefined) writeAtomic(join(project, '.forge', 'policy.json'), JSON.stringify(options.workspacePolicy));
  if (options.rules !== undefined) writeAtomic(join(project, '.forge', 'policy.rules'), options.rules);
  if (options.vault !== undefined) {
    writeAtomic(join(home, 'secrets.json'), typeof options.vault === 'string' ? options.vault : JSON.stringify(options.vault), 0o600);
  }
  const forges: Forge[] = [];
  const open = async (o: Omit<ForgeOptions, 'home' | 'project'> = {}) => {
    const f = await createForge({ env: {}, ...o, home, project });
    forges.push(f);
    return f;
  };
  const forge = await open(options.forge);
  onTestFinished(async () => {
    try {
      for (const f of forges) await f.close({ graceMs: 2000 });
      const v = await verifyLog(forge.paths.auditLog);
      expect(v.first_bad, `the audit log must verify after the test: ${JSON.stringify(v.first_bad)}`).toBeUndefined();
      expect(v.ok).toBe(true);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
  const audit = (): Entry[] =>
    readFileSync(forge.paths.auditLog, 'utf8')
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Entry);
  const runDir = (runId: string): string => {
    const d = readdirSync(forge.paths.runsDir).find((n) => n.endsWith(`_${runId}`));
    if (!d) throw new Error(`no run directory for ${runId} in ${forge.paths.runsDir}`);
    return join(forge.paths.runsDir, d);
  };
  return {
    forge,
    root,
    home,
    project,
    reopen: open,
    audit,
    entries: (type) => audit().filter((e) => e.type === type),
    runDir,
    manifest(runId) {
      // A run has its own directory; a cache hit may instead be one line of runs/hits.jsonl.
      const dir = readdirSync(forge.paths.runsDir).find((n) => n.endsWith(`_${runId}`));
      if (dir) return JSON.parse(readFileSync(join(forge.paths.runsDir, dir, 'run_manifest.json'), 'utf8')) as Record<string, unknown>;
      const hits = join(forge.paths.runsDir, 'hits.jsonl');
      const lines = existsSync(hits)
        ? readFileSync(hits, 'utf8')
            .split('\n')
            .filter((l) => l !== '')
        : [];
      const hit = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((h) => h.run_id === runId);
      if (!hit) throw new Error(`no run manifest or hit record for ${runId} under ${forge.paths.runsDir}`);
      return hit;
    },
    sandboxRuns(name) {
      let dirs: string[] = [];
      try {
        dirs = readdirSync(forge.paths.runsDir);
      } catch {
        return [];
      }
      return dirs
        .map((d) => {
          try {
            return JSON.parse(readFileSync(join(forge.paths.runsDir, d, 'run_manifest.json'), 'utf8')) as Record<string, unknown>;
          } catch {
            return undefined;
          }
        })
        .filter((m): m is Record<string, unknown> => m !== undefined && m.cache !== 'hit' && (m.tool as { name: string }).name === name);
    },
    file(rel, text) {
      const p = join(project, rel);
      mkdirSync(dirname(p), { recursive: true });
      writeFileSync(p, text);
      return p;
    },
  };
}

/** Asserts an ok envelope and returns its data. */
export function okData(env: Envelope): unknown {
  if (!env.ok) throw new Error(`expected an ok envelope, got ${JSON.stringify(env)}`);
  return env.data;
}

/** Asserts a failed envelope of `kind` and returns its error. */
export function failed(env: Envelope, kind: string): { kind: string; message: string; [k: string]: unknown } {
  if (env.ok) throw new Error(`expected a ${kind} failure, got ${JSON.stringify(env)}`);
  expect(env.error.kind, env.error.message).toBe(kind);
  return env.error;
}

/** Every file under `dir` (symlinks listed, not followed) whose bytes contain `needle`. */
export function filesContaining(dir: string, needle: string): string[] {
  const hits: string[] = [];
  const want = Buffer.from(needle);
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (name.includes(needle)) hits.push(p);
      const st = lstatSync(p);
      if (st.isDirectory()) walk(p);
      else if (st.isFile() && readFileSync(p).includes(want)) hits.push(p);
    }
  };
  walk(dir);
  return hits;
}

/** Waits until no sandbox built ahead is still being built in this process (fails, naming the count, when one never finishes). */
export async function builtSoon(): Promise<void> {
  await waitFor(
    () => `the sandboxes built ahead to finish building (${prebuiltStats().building} still building)`,
    () => prebuiltStats().building === 0,
    { intervalMs: 10 },
  );
}

/** Resolves once `count` run directories exist under `runsDir`: the call has reached the sandbox. */
export async function runStarted(runsDir: string, count = 1): Promise<void> {
  await vi.waitFor(() => expect(readdirSync(runsDir).filter((n) => !n.endsWith('.jsonl')).length).toBeGreaterThanOrEqual(count), {
    timeout: scaled(5000),
    interval: 10,
  });
}
