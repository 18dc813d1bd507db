import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { scaled } from '@forge/test-utils';
import { beforeAll, describe, expect, it } from 'vitest';
import { connect, exampleSpec, requireCliAndSandbox, rugGateway, runCli, type Scratch, scratch, startWorker } from './helpers.js';

beforeAll(requireCliAndSandbox);

/** A pre hook that refuses when the input holds `needle`, with `reason` on stderr. */
function refuseIf(s: Scratch, rel: string, needle: string, reason: string): void {
  const file = join(s.home, 'hooks', rel);
  const dirs = rel.split('/').slice(0, -1);
  for (let i = 0; i <= dirs.length; i++) {
    const d = join(s.home, 'hooks', ...dirs.slice(0, i));
    mkdirSync(d, { recursive: true });
    chmodSync(d, 0o755);
  }
  writeFileSync(file, `#!/bin/sh\nread -r e\ncase "$e" in *'${needle}'*) echo '${reason}' >&2; exit 2 ;; esac\n`);
  chmodSync(file, 0o755);
}

const decided = (s: Scratch) =>
  readFileSync(join(s.home, 'audit', 'forge.log'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { type: string; data: Record<string, unknown> })
    .filter((e) => e.type === 'hook.decided')
    .map((e) => e.data);

describe('hooks on every path', () => {
  it('an MCP client and a tool directory see the refusal and its reason; every decision is in a log that verifies', async () => {
    const s = scratch();
    expect((await runCli(['tools', 'forge', '-'], { cwd: s.project, env: s.env, input: JSON.stringify(exampleSpec('fib')) })).code).toBe(0);
    refuseIf(s, 'pre.d/10-limit', '"n":60', 'n=60 is not allowed here');
    const c = await connect(s);
    const { result, env } = await c.call('fib', { n: 60 });
    expect(result.isError).toBe(true);
    expect(env.error).toEqual({ kind: 'hook_denied', message: 'hook 10-limit refused the call: n=60 is not allowed here' });
    expect((await c.call('fib', { n: 6 })).env.ok).toBe(true);
    await c.client.close();

    const dir = join(s.root, 'tools');
    expect((await runCli(['tools', 'export', dir], { cwd: s.project, env: s.env })).code).toBe(0);
    const viaDir = spawnSync(join(dir, 'fib'), ['--n', '60'], { env: s.env, encoding: 'utf8', timeout: scaled(120_000) });
    expect(JSON.parse(readFileSync(join(dir, 'fib.d', 'policy'), 'utf8')).hooks).toEqual({
      pre: [{ path: join(s.home, 'hooks', 'pre.d', '10-limit'), digest: expect.stringMatching(/^sha256:[0-9a-f]{64}$/) }],
      post: [],
    });
    expect(viaDir.status).toBe(1);
    expect(viaDir.stderr).toMatch(/hook_denied.*n=60 is not allowed here/);
    expect(decided(s).map((d) => d.verdict)).toEqual(['deny', 'allow', 'deny']);
    const verify = await runCli(['audit', 'verify'], { cwd: s.project, env: s.env });
    expect(verify.code, verify.stdout).toBe(0);
    // doctor counts the hooks, and names one that refuses every call, with its fix.
    const hooksCheck = async () => {
      const d = await runCli(['doctor', '--json'], { cwd: s.project, env: s.env, timeoutMs: 120_000 });
      return (JSON.parse(d.stdout).checks as { name: string; ok: boolean; detail: string; fix?: string }[]).find((c) => c.name === 'hooks');
    };
    expect(await hooksCheck()).toMatchObject({ ok: true, detail: `1 hook in ${join(s.home, 'hooks')}` });
    chmodSync(join(s.home, 'hooks', 'pre.d', '10-limit'), 0o775);
    expect(await hooksCheck()).toMatchObject({
      ok: false,
      detail: expect.stringMatching(/10-limit is writable by its group .*every call it applies to is refused/),
    });
  });

  it('a per-tool hook of a gateway tool applies to its calls', async () => {
    const s = scratch();
    rugGateway(s);
    const o = { cwd: s.project, env: s.env, timeoutMs: 60_000 };
    expect((await runCli(['gateway', 'approve', 'rug', 'hello'], o)).code).toBe(0);
    refuseIf(s, 'tools/rug.hello/pre.d/10-no-mallory', 'mallory', 'mallory may not be greeted');
    const no = await runCli(['run', 'rug.hello', '--name', 'mallory'], o);
    expect(no.code).toBe(1);
    expect(no.stderr).toMatch(/hook_denied.*mallory may not be greeted/);
    const yes = await runCli(['run', 'rug.hello', '--name', 'bob'], o);
    expect(yes.code, yes.stderr).toBe(0);
    // Exported, the tool's control directory links its own hooks directory.
    const dir = join(s.root, 'tools');
    expect((await runCli(['tools', 'export', dir], o)).code).toBe(0);
    expect(readlinkSync(join(dir, 'rug.hello.d', 'hooks'))).toBe(join(s.home, 'hooks', 'tools', 'rug.hello'));
    expect(readdirSync(join(dir, 'rug.hello.d', 'hooks', 'pre.d'))).toEqual(['10-no-mallory']);
    expect(existsSync(join(dir, 'rug.add.d', 'hooks'))).toBe(false);
    expect(decided(s)).toEqual([
      expect.objectContaining({ stage: 'pre', verdict: 'deny', name: 'rug.hello' }),
      expect.objectContaining({ stage: 'pre', verdict: 'allow', name: 'rug.hello' }),
    ]);
  });

  it(
    'a dispatched call meets the hooks once, at the front-end, before a worker runs it',
    async () => {
      const s = scratch();
      expect((await runCli(['tools', 'forge', '-'], { cwd: s.project, env: s.env, input: JSON.stringify(exampleSpec('fib')) })).code).toBe(
        0,
      );
      refuseIf(s, 'pre.d/10-limit', '"n":60', 'n=60 is not allowed here');
      const worker = await startWorker(s);
      const o = { cwd: s.project, env: s.env, timeoutMs: 120_000 };
      const no = await runCli(['tools', 'call', 'fib', '{"n":60}', '--dispatch'], o);
      expect(no.code).toBe(1);
      expect(JSON.parse(no.stdout).error.kind).toBe('hook_denied');
      const yes = await runCli(['tools', 'call', 'fib', '{"n":6}', '--dispatch'], o);
      expect(yes.code, yes.stderr).toBe(0);
      expect(JSON.parse(yes.stdout).data).toEqual({ n: 6, fib: '8' });
      expect(decided(s).map((d) => d.verdict)).toEqual(['deny', 'allow']);
      const exited = new Promise((r) => worker.on('exit', r));
      worker.kill('SIGTERM');
      await exited;
    },
    scaled(240_000),
  );
});
