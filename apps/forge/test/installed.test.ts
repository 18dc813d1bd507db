/**
 * The app as a user installs it without the monorepo: every published package and the app packed
 * into tarballs (`pnpm pack`, which turns `workspace:` ranges into versions), installed with
 * `npm i -g --prefix <dir> *.tgz` into an empty prefix (third-party dependencies from the npm
 * registry), then `forge doctor`, `forge demo` and `forge serve` under the MCP Inspector run from
 * that prefix. A step that cannot run here fails with what to install.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { scaled } from '@forge/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXAMPLES, requireCliAndSandbox, scratch } from './helpers.js';

const run = promisify(execFile);
const ROOT = resolve(import.meta.dirname, '../../..');
const INSPECTOR = resolve(import.meta.dirname, '../node_modules/.bin/mcp-inspector');
const PACKED = [...readdirSync(join(ROOT, 'packages')).map((d) => join('packages', d)), 'apps/forge'];

let work: string;
let forgeBin: string;

beforeAll(async () => {
  await requireCliAndSandbox();
  work = mkdtempSync(join(tmpdir(), 'forge-installed-'));
  const tarballs = join(work, 'tarballs');
  mkdirSync(tarballs);
  for (const dir of PACKED) {
    const manifest = (await import(join(ROOT, dir, 'package.json'), { with: { type: 'json' } })).default as {
      name: string;
      private?: boolean;
    };
    // The libraries that are published, and the app (private: installable from its tarball, never published).
    if (manifest.private && manifest.name !== 'forge') continue;
    await run('pnpm', ['pack', '--pack-destination', tarballs], { cwd: join(ROOT, dir), timeout: scaled(120_000) });
  }
  const prefix = join(work, 'prefix');
  const files = readdirSync(tarballs).map((f) => join(tarballs, f));
  try {
    await run('npm', ['install', '--global', '--prefix', prefix, '--prefer-offline', '--no-audit', '--no-fund', ...files], {
      cwd: work,
      timeout: scaled(600_000),
    });
  } catch (err) {
    throw new Error(`npm could not install the tarballs (it needs the npm registry for their dependencies): ${(err as Error).message}`);
  }
  forgeBin = join(prefix, 'bin', 'forge');
}, scaled(900_000));

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('forge installed from its tarballs', () => {
  it('forge doctor finds a host that can run tools', async () => {
    const s = scratch();
    const { stdout } = await run(forgeBin, ['doctor', '--json'], { cwd: s.project, env: s.env, timeout: scaled(120_000) });
    const report = JSON.parse(stdout) as { ok: boolean; checks: { name: string; ok: boolean; detail: string }[] };
    expect(
      report.checks.filter((c) => !c.ok),
      'forge doctor from the installed prefix',
    ).toEqual([]);
    expect(report.ok).toBe(true);
  });

  it('forge demo runs its tour', async () => {
    const s = scratch();
    const { stdout } = await run(forgeBin, ['demo'], { cwd: s.root, env: s.env, timeout: scaled(300_000) });
    expect(stdout).toMatch(/8 steps, all as expected/);
  });

  it('forge serve answers the MCP Inspector: lists and calls a forged tool', async () => {
    const s = scratch();
    await run(forgeBin, ['tools', 'forge', join(EXAMPLES, 'fib')], { cwd: s.project, env: s.env, timeout: scaled(120_000) });
    const inspectorHome = join(s.root, 'inspector-home');
    mkdirSync(inspectorHome);
    const inspect = async (...args: string[]) => {
      const target = ['--cwd', s.project, '-e', `FORGE_HOME=${s.home}`, forgeBin, 'serve'];
      const { stdout } = await run(INSPECTOR, ['--cli', '--format', 'json', '--quiet', ...target, ...args], {
        cwd: s.root,
        env: { ...s.env, HOME: inspectorHome },
        timeout: scaled(60_000),
      });
      return JSON.parse(stdout).result;
    };
    const list = await inspect('--method', 'tools/list');
    expect(list.tools.map((t: { name: string }) => t.name)).toEqual(expect.arrayContaining(['forge_tool', 'fib']));
    const call = await inspect('--method', 'tools/call', '--tool-name', 'fib', '--tool-arg', 'n=10');
    expect(call.structuredContent).toEqual({ n: 10, fib: '55' });
  });
});
