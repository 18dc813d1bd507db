import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { describe, expect, onTestFinished, test } from 'vitest';
import {
  EVERYTHING,
  FILESYSTEM,
  fixtureEntry,
  gatewayWith,
  job,
  PNPM_STORE,
  requireBwrap,
  tempDir,
  textOf,
  tool,
} from './fixtures/harness.js';

requireBwrap();

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

/** server-everything in its Streamable HTTP mode on a free loopback port, stopped when the test ends. */
async function everythingOverHttp(): Promise<string> {
  const port = await freePort();
  const child: ChildProcess = spawn(process.execPath, [EVERYTHING, 'streamableHttp'], {
    env: { PATH: process.env.PATH ?? '', PORT: String(port) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  onTestFinished(
    () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGKILL');
      }),
  );
  await new Promise<void>((resolve, reject) => {
    let err = '';
    child.stderr?.on('data', (c: Buffer) => {
      err += c.toString();
      if (err.includes('listening on port')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`server-everything exited (${code}): ${err}`)));
  });
  return `http://127.0.0.1:${port}/mcp`;
}

describe('real upstreams', () => {
  test('server-filesystem told to serve / sees only its binds: no file outside them, no host /etc/shadow', async () => {
    const inside = tempDir('forge-gw-in-');
    const outside = tempDir('forge-gw-out-');
    // Readable to anyone, so what hides the outside file is the sandbox, not its mode.
    chmodSync(inside, 0o755);
    chmodSync(outside, 0o755);
    writeFileSync(join(inside, 'note.txt'), 'visible', { mode: 0o644 });
    writeFileSync(join(outside, 'secret.txt'), 'outside the binds', { mode: 0o644 });
    const h = await gatewayWith({
      fs: {
        command: 'node',
        args: [FILESYSTEM, '/'],
        binds: [
          { path: PNPM_STORE, mode: 'ro' },
          { path: inside, mode: 'ro' },
        ],
      },
    });
    expect(await h.gateway.approve('fs', ['read_text_file', 'list_directory'], 'operator')).toMatchObject({ ok: true });
    const read = await tool(h.gateway, 'fs.read_text_file');
    const ok = await h.gateway.execute(job(read, { path: join(inside, 'note.txt') }));
    expect(ok.ok && textOf(ok.content)).toBe('visible');
    const out = await h.gateway.execute(job(read, { path: join(outside, 'secret.txt') }));
    expect(out).toMatchObject({ ok: false, kind: 'upstream_error' });
    expect(!out.ok && out.message).toMatch(/ENOENT/);
    const shadow = await h.gateway.execute(job(read, { path: '/etc/shadow' }));
    expect(shadow).toMatchObject({ ok: false, kind: 'upstream_error' });
    expect(!shadow.ok && shadow.message).toMatch(/ENOENT/);
    const tmp = await h.gateway.execute(job(await tool(h.gateway, 'fs.list_directory'), { path: '/tmp' }));
    expect(tmp.ok && textOf(tmp.content).includes('forge-gw-out-')).toBe(false);
  });

  test('server-everything over Streamable HTTP: listed and called, the Authorization header from the secret', async () => {
    const url = await everythingOverHttp();
    const h = await gatewayWith({ web: { url, secrets: { Authorization: 'web_token' } } });
    expect(await h.gateway.approve('web', ['echo'], 'operator')).toMatchObject({ ok: true });
    const echo = await tool(h.gateway, 'web.echo');
    expect(echo.origin).toEqual({ kind: 'gateway', server: 'web', tool: 'echo', sandboxed: false, transport: 'http' });
    const r = await h.gateway.execute(job(echo, { message: 'over http' }, { secrets: new Map([['web_token', 'tok-123']]) }));
    expect(r.ok && textOf(r.content)).toBe('Echo: over http');
    expect(r.facts).toMatchObject({ server: 'web', transport: 'http', url, sandboxed: false });
    expect(JSON.stringify(h.host.entries)).not.toContain('tok-123');
  });

  test('an unsandboxed server (user level) runs on the host with a cleared environment, audited as such', async () => {
    process.env.FORGE_GW_PARENT_ONLY = 'leak';
    onTestFinished(() => {
      delete process.env.FORGE_GW_PARENT_ONLY;
    });
    const h = await gatewayWith({ host: fixtureEntry({ DECLARED: 'yes' }, { unsandboxed: true, binds: [] }) });
    expect(await h.gateway.approve('host', ['env_has'], 'operator')).toMatchObject({ ok: true });
    const envHas = await tool(h.gateway, 'host.env_has');
    expect(envHas.origin.sandboxed).toBe(false);
    const has = async (name: string) => {
      const r = await h.gateway.execute(job(envHas, { name }));
      return r.ok ? textOf(r.content) : r.message;
    };
    expect(await has('DECLARED')).toBe('present');
    expect(await has('PATH')).toBe('present');
    expect(await has('FORGE_GW_PARENT_ONLY')).toBe('absent');
    const started = h.host.entries.filter((e) => e.type === 'gateway.upstream_started');
    expect(started.map((e) => e.data.sandboxed)).toEqual([false]);
    expect(started[0]?.data.pid).toEqual(expect.any(Number));
  });
});
