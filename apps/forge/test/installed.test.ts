/**
 * The app as a user installs it without the monorepo: every published package and the app packed
 * into tarballs (`pnpm pack`, which turns `workspace:` ranges into versions), installed with
 * `npm i -g --prefix <dir> *.tgz` into an empty prefix (third-party dependencies from the npm
 * registry), then `forge doctor`, `forge demo` and `forge serve` under the MCP Inspector run from
 * that prefix. A step that cannot run here fails with what to install.
 *
 * The `@forge` scope on the public registry is someone else's, so npm is pointed at a registry of
 * this test's own for that scope (as a fork publishing to a private registry would be), serving
 * these very tarballs: the install never depends on how the public registry answers for names that
 * are not ours. Third-party dependencies still come from the npm registry.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
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
let registry: Server | undefined;

/**
 * A read-only npm registry on loopback for the `@forge` scope: a packument per tarball (its own
 * package.json, as `pnpm pack` rewrote it) and the tarball itself; anything else is 404.
 */
async function scopeRegistry(files: string[]): Promise<{ server: Server; url: string; asked: Set<string> }> {
  const byName = new Map<string, { file: string; manifest: Record<string, unknown> }>();
  for (const file of files) {
    const { stdout } = await run('tar', ['-xzOf', file, 'package/package.json']);
    const manifest = JSON.parse(stdout) as Record<string, unknown> & { name: string };
    if (manifest.name.startsWith('@forge/')) byName.set(manifest.name, { file, manifest });
  }
  const asked = new Set<string>();
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname).slice(1);
    asked.add(path);
    const { port } = server.address() as AddressInfo;
    const pkg = byName.get(path);
    if (pkg) {
      const bytes = readFileSync(pkg.file);
      const version = String(pkg.manifest.version);
      const dist = {
        tarball: `http://127.0.0.1:${port}/-/${encodeURIComponent(path)}.tgz`,
        integrity: `sha512-${createHash('sha512').update(bytes).digest('base64')}`,
        shasum: createHash('sha1').update(bytes).digest('hex'),
      };
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ name: path, 'dist-tags': { latest: version }, versions: { [version]: { ...pkg.manifest, dist } } }));
      return;
    }
    const tarball = path.startsWith('-/') && path.endsWith('.tgz') ? byName.get(path.slice(2, -4)) : undefined;
    if (tarball) {
      res.setHeader('content-type', 'application/octet-stream');
      createReadStream(tarball.file).pipe(res);
      return;
    }
    res.statusCode = 404;
    res.end('{"error":"not found"}');
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, asked };
}

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
  const scope = await scopeRegistry(files);
  registry = scope.server;
  const args = ['install', '--global', '--prefix', prefix, `--@forge:registry=${scope.url}`, '--prefer-offline'];
  try {
    await run('npm', [...args, '--no-audit', '--no-fund', '--loglevel', 'http', ...files], { cwd: work, timeout: scaled(600_000) });
  } catch (err) {
    // npm's own log of each request: which fetch failed or hung.
    const log = String((err as { stderr?: string }).stderr ?? '')
      .trim()
      .split('\n')
      .slice(-15)
      .join('\n');
    throw new Error(
      `npm could not install the tarballs (third-party dependencies come from the npm registry: npm config get registry): ${(err as Error).message.split('\n')[0]}\n${log}`,
    );
  }
  // npm asked this registry, not the public one, about the scope's names.
  expect([...scope.asked].filter((p) => p.startsWith('@forge/'))).toContain('@forge/runner');
  forgeBin = join(prefix, 'bin', 'forge');
}, scaled(900_000));

afterAll(async () => {
  if (registry) await new Promise((done) => registry?.close(done));
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
