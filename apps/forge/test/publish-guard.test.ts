/**
 * scripts/guard-publish.mjs (every published package's prepublishOnly) under the real pnpm of
 * `packageManager` and the real npm, publishing a throwaway `@forge/*` package to a registry on
 * loopback: the guard must refuse exactly when the tool would publish to the public registry,
 * whatever way the registry was chosen, and let a private publish through.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { scaled } from '@forge/test-utils';
import { describe, expect, it, onTestFinished } from 'vitest';

const GUARD = resolve(import.meta.dirname, '../../../scripts/guard-publish.mjs');
const NAME = '@forge/guard-probe';
const PUBLIC = 'https://registry.npmjs.org/';

/** A registry on loopback that takes every publish (PUT) and knows no package (404). */
async function fakeRegistry(): Promise<{ url: string; puts: string[] }> {
  const puts: string[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.method === 'PUT') puts.push(decodeURIComponent(req.url ?? ''));
      res.writeHead(req.method === 'PUT' ? 200 : 404, { 'content-type': 'application/json' });
      res.end(req.method === 'PUT' ? '{"ok":true}' : '{"error":"not_found"}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, puts };
}

interface Probe {
  dir: string;
  /** The environment: a home of its own (no ~/.npmrc), nothing npm_* or pnpm_* from the test runner. */
  env: Record<string, string>;
}

/** A throwaway `@forge/*` package whose prepublishOnly is the guard, outside any workspace. */
function probe(o: { publishConfig?: Record<string, string>; npmrc?: string } = {}): Probe {
  const root = mkdtempSync(join(tmpdir(), 'forge-guard-'));
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  const dir = join(root, 'pkg');
  const home = join(root, 'home');
  mkdirSync(dir);
  mkdirSync(home);
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify({
      name: NAME,
      version: '0.0.1',
      type: 'module',
      files: ['index.js'],
      scripts: { prepublishOnly: `node ${JSON.stringify(GUARD)}` },
      ...(o.publishConfig ? { publishConfig: o.publishConfig } : {}),
    }),
  );
  writeFileSync(join(dir, 'index.js'), 'export {};\n');
  if (o.npmrc !== undefined) writeFileSync(join(dir, '.npmrc'), o.npmrc);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !/^(npm|pnpm)_/i.test(k)) env[k] = v;
  Object.assign(env, { HOME: home, XDG_CONFIG_HOME: join(home, '.config'), NO_COLOR: '1', CI: 'true' });
  return { dir, env };
}

interface Run {
  code: number | null;
  output: string;
}

function run(cmd: string, args: string[], p: Probe, env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(cmd, args, { cwd: p.dir, env: { ...p.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), scaled(90_000));
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolvePromise({ code, output });
    });
  });
}

const refusedPublic = `refusing to publish ${NAME} to ${PUBLIC.replace(/\/$/, '')}`;
const pnpm = (args: string[], p: Probe, env?: Record<string, string>) => run('pnpm', ['publish', '--no-git-checks', ...args], p, env);

describe('guard-publish under pnpm', () => {
  it('refuses `npm_config_registry=<private> pnpm publish --dry-run`: pnpm ignores that variable and would publish to the public registry', async () => {
    const reg = await fakeRegistry();
    const p = probe();
    const r = await pnpm(['--dry-run'], p, { npm_config_registry: reg.url });
    expect(r.code, r.output).not.toBe(0);
    expect(r.output).toContain(refusedPublic);
    expect(r.output).not.toContain('→ ');
  });

  it('refuses a plain `pnpm publish --dry-run` (the public registry)', async () => {
    const r = await pnpm(['--dry-run'], probe());
    expect(r.code, r.output).not.toBe(0);
    expect(r.output).toContain(refusedPublic);
  });

  it('lets `pnpm publish --registry <private>` through, and the package arrives there', async () => {
    const reg = await fakeRegistry();
    const p = probe();
    const r = await pnpm(['--registry', reg.url], p);
    expect(r.code, r.output).toBe(0);
    expect(r.output).toContain(`${NAME}@0.0.1 → ${reg.url}`);
    expect(reg.puts).toEqual([`/${NAME}`]);
  });

  it('lets `--registry=<private>`, `pnpm_config_registry` and `publishConfig.registry` through (dry run)', async () => {
    const reg = await fakeRegistry();
    for (const [args, env, o] of [
      [[`--registry=${reg.url}`], {}, {}],
      [[], { pnpm_config_registry: reg.url }, {}],
      [[], {}, { publishConfig: { registry: reg.url } }],
    ] as const) {
      const r = await pnpm(['--dry-run', ...args], probe(o), env);
      expect(r.code, r.output).toBe(0);
      expect(r.output).toContain(`${NAME}@0.0.1 → ${reg.url}`);
    }
    expect(reg.puts).toEqual([]);
  });

  it('refuses `--registry <private>` when a scoped `@forge:registry` in .npmrc sends pnpm to the public registry', async () => {
    const reg = await fakeRegistry();
    const r = await pnpm(['--dry-run', '--registry', reg.url], probe({ npmrc: `@forge:registry=${PUBLIC}\n` }));
    expect(r.code, r.output).not.toBe(0);
    expect(r.output).toContain(refusedPublic);
  });

  it('lets a scoped `@forge:registry=<private>` through even with `--registry <public>` (pnpm publishes to the scoped one)', async () => {
    const reg = await fakeRegistry();
    const r = await pnpm(['--registry', PUBLIC], probe({ npmrc: `@forge:registry=${reg.url}\n` }));
    expect(r.code, r.output).toBe(0);
    expect(reg.puts).toEqual([`/${NAME}`]);
  });

  it('`pnpm -r publish --registry <private>` in a workspace (the README way) publishes there', async () => {
    const reg = await fakeRegistry();
    const p = probe();
    // Make the probe's directory a one-package workspace.
    const ws = join(p.dir, '..');
    writeFileSync(join(ws, 'pnpm-workspace.yaml'), 'packages:\n  - pkg\n');
    writeFileSync(join(ws, 'package.json'), JSON.stringify({ name: 'ws', private: true }));
    const r = await run('pnpm', ['-r', 'publish', '--no-git-checks', '--registry', reg.url], { ...p, dir: ws });
    expect(r.code, r.output).toBe(0);
    expect(reg.puts).toEqual([`/${NAME}`]);
  });
});

describe('guard-publish under npm', () => {
  it('refuses `npm publish --dry-run` to the public registry and allows `--registry <private>`', async () => {
    const reg = await fakeRegistry();
    const pub = await run('npm', ['publish', '--dry-run'], probe());
    expect(pub.code, pub.output).not.toBe(0);
    expect(pub.output).toContain(refusedPublic);
    const priv = await run('npm', ['publish', '--dry-run', '--registry', reg.url], probe());
    expect(priv.code, priv.output).toBe(0);
    expect(priv.output).toContain(`Publishing to ${reg.url}`);
  });
});
