import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { transformWithOxc } from 'vite';
import { expect, onTestFinished, test } from 'vitest';
import { collectReadmeBlocks, type ReadmeBlock } from './readmeBlocks.js';

/**
 * Every example in the READMEs runs as written (the marker convention is in readmeBlocks.ts):
 * each block alone, twice in a row in the same fresh directory (so an example must be
 * idempotent), against the built workspace packages, with a time limit, and leaving no process
 * behind. TypeScript is stripped of its types with vite's oxc transform (vite is already a root
 * devDependency) and run by node as ES modules, so what runs is what Node 20 accepts; shell
 * blocks run with `bash -e -o pipefail`.
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const RUN_TIMEOUT_MS = 60_000;
const SIGTERM_EXIT_MS = 10_000;
const OUTPUT_KEEP = 16 * 1024;

const { blocks, problems } = collectReadmeBlocks(ROOT);

test('every README marker is well-formed and sits above an example', () => {
  expect(problems.map((p) => `${p.readme}:${p.line}: ${p.message}`)).toEqual([]);
});

test('the READMEs have examples to run', () => {
  expect(blocks.filter((b) => b.notRun === undefined).length).toBeGreaterThan(0);
});

for (const block of blocks) {
  if (block.notRun !== undefined) continue; // exempt by its marker, which names the reason
  test(`${block.readme}:${block.line} (${block.lang}) runs, twice in a row`, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'forge-readme-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const work = prepareWorkspace(dir);
    const file = await writeExample(block, work);
    let store: string | undefined;
    if (block.postgres) {
      const { loadStartPostgres } = (await import(pathToFileURL(join(ROOT, 'scripts', 'with-postgres.mjs')).href)) as {
        loadStartPostgres(): Promise<() => Promise<{ database(name?: string): Promise<string>; stop(): Promise<void> }>>;
      };
      const server = await (await loadStartPostgres())();
      onTestFinished(() => server.stop());
      store = await server.database('forge');
    }
    for (const run of [1, 2]) {
      const seen = auditRefusals(join(dir, 'home')).length;
      const outcome = await runExample(block, file, work, join(dir, 'home'), join(dir, 'bin'), store);
      // A refused or failed forge or call counts even when the example forgot to check its result.
      const refused = auditRefusals(join(dir, 'home')).slice(seen);
      if (!outcome.failure && refused.length > 0) outcome.failure = `forge audited refusals or failures:\n  ${refused.join('\n  ')}`;
      if (outcome.failure) {
        throw new Error(
          `${block.readme} line ${block.line} (${block.lang} block), run ${run} of 2: ${outcome.failure}\n` +
            `--- stderr ---\n${outcome.stderr}\n--- stdout ---\n${outcome.stdout}`,
        );
      }
    }
  });
}

/** The `forge.*` entries with `ok: false` in the audit log of the forge home under `home`, as text. */
function auditRefusals(home: string): string[] {
  const log = join(home, '.config', 'forge', 'audit', 'forge.log');
  if (!existsSync(log)) return [];
  const found: string[] = [];
  for (const line of readFileSync(log, 'utf8').split('\n')) {
    if (line === '') continue;
    const entry = JSON.parse(line) as { type: string; data?: { ok?: boolean; name?: string; kind?: string; message?: string } };
    if (!entry.type.startsWith('forge.') || entry.data?.ok !== false) continue;
    found.push(`${entry.type} ${entry.data.name ?? ''}: ${entry.data.kind ?? ''} ${entry.data.message ?? ''}`.trim());
  }
  return found;
}

/** A fresh home, a bin directory with the workspace's commands and node_modules with its packages. */
function prepareWorkspace(dir: string): string {
  const work = join(dir, 'work');
  mkdirSync(join(dir, 'home'), { recursive: true });
  mkdirSync(join(dir, 'bin'));
  mkdirSync(join(work, 'node_modules', '@forge'), { recursive: true });
  for (const group of ['packages', 'apps']) {
    const groupDir = join(ROOT, group);
    if (!existsSync(groupDir)) continue;
    for (const name of readdirSync(groupDir)) {
      const pkgDir = join(groupDir, name);
      if (!existsSync(join(pkgDir, 'package.json'))) continue;
      const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8')) as {
        name: string;
        bin?: Record<string, string>;
        private?: boolean;
        scripts?: Record<string, string>;
      };
      // A private package without a build (the conformance suites, run from source) is no example's import.
      if (pkg.private && !pkg.scripts?.build) continue;
      if (!existsSync(join(pkgDir, 'dist'))) {
        throw new Error(`${group}/${name} is not built (no dist/): run \`pnpm build\` first; the README examples run the built packages`);
      }
      symlinkSync(pkgDir, join(work, 'node_modules', pkg.name));
      for (const [bin, path] of Object.entries(pkg.bin ?? {})) symlinkSync(join(pkgDir, path), join(dir, 'bin', bin));
    }
  }
  return work;
}

async function writeExample(block: ReadmeBlock, work: string): Promise<string> {
  if (block.lang === 'sh' || block.lang === 'bash') {
    writeFileSync(join(work, 'example.sh'), block.code);
    return 'example.sh';
  }
  const code = block.lang === 'ts' ? (await transformWithOxc(block.code, 'example.ts', { lang: 'ts' })).code : block.code;
  writeFileSync(join(work, 'example.mjs'), code);
  return 'example.mjs';
}

interface Outcome {
  failure?: string;
  stdout: string;
  stderr: string;
}

/** Runs one example to its end (or, for a server, to one SIGTERM) and says what went wrong, if anything. */
function runExample(block: ReadmeBlock, file: string, cwd: string, home: string, bin: string, store?: string): Promise<Outcome> {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^(FORGE_|VITEST|XDG_CONFIG_HOME$|NODE_OPTIONS$|NODE_ENV$|TEST$)/.test(k)) continue;
    env[k] = v;
  }
  env.HOME = home;
  if (store) env.FORGE_STORE = store;
  env.PATH = `${bin}:${process.env.PATH ?? ''}`;
  const argv = file.endsWith('.sh') ? ['bash', '-e', '-o', 'pipefail', file] : [process.execPath, file];
  const server = block.sigtermAfter;
  const child = spawn(argv[0] as string, argv.slice(1), {
    cwd,
    env,
    detached: true, // its own process group: what it leaves running is visible, and killable
    stdio: [server ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  const keep = (s: string) => (s.length > OUTPUT_KEEP ? `…${s.slice(-OUTPUT_KEEP)}` : s);
  return new Promise<Outcome>((resolve) => {
    let failure: string | undefined;
    let signalledAt: number | undefined;
    const timer = setTimeout(() => {
      failure =
        server && signalledAt === undefined
          ? `"${server}" did not appear on stdout or stderr within ${RUN_TIMEOUT_MS / 1000} s`
          : `still running after ${RUN_TIMEOUT_MS / 1000} s (an example must end by itself)`;
      killGroup(child);
    }, RUN_TIMEOUT_MS);
    let sigtermTimer: NodeJS.Timeout | undefined;
    const watch = () => {
      if (!server || signalledAt !== undefined || !(stdout.includes(server) || stderr.includes(server))) return;
      signalledAt = Date.now();
      child.kill('SIGTERM');
      sigtermTimer = setTimeout(() => {
        failure = `still running ${SIGTERM_EXIT_MS / 1000} s after one SIGTERM (a server must stop promptly on SIGTERM)`;
        killGroup(child);
      }, SIGTERM_EXIT_MS);
    };
    child.stdout?.setEncoding('utf8').on('data', (d: string) => {
      stdout = keep(stdout + d);
      watch();
    });
    child.stderr?.setEncoding('utf8').on('data', (d: string) => {
      stderr = keep(stderr + d);
      watch();
    });
    child.on('error', (err) => {
      failure ??= `could not start ${argv[0]}: ${err.message}`;
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (sigtermTimer) clearTimeout(sigtermTimer);
      if (!failure && server && signalledAt === undefined) failure = `ended before "${server}" appeared (code ${code}, signal ${signal})`;
      if (!failure && code !== 0) failure = signal ? `killed by ${signal}` : `exited with code ${code}`;
      if (!failure && groupAlive(child)) failure = 'exited but left processes running in its process group';
      killGroup(child);
      resolve({ ...(failure ? { failure } : {}), stdout, stderr });
    });
  });
}

function groupAlive(child: ChildProcess): boolean {
  try {
    process.kill(-(child.pid as number), 0);
    return true;
  } catch {
    return false;
  }
}

function killGroup(child: ChildProcess): void {
  try {
    process.kill(-(child.pid as number), 'SIGKILL');
  } catch {
    // the group is gone already
  }
}
