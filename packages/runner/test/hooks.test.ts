import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openAuditLog, verifyLog } from '@forge/audit-chain';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createForge } from '../src/index.js';
import { type Entry, example, type Fixture, failed, failingWrite, okData, py, requireSandbox, setup } from './helpers.js';

/** Installs an executable hook as the operator does: a real file, 0755, in a 0755 directory. */
function hook(fx: Pick<Fixture, 'home'>, rel: string, body: string, mode = 0o755): string {
  const file = join(fx.home, 'hooks', rel);
  const parts = rel.split('/').slice(0, -1);
  for (let i = 0; i <= parts.length; i++) {
    const d = join(fx.home, 'hooks', ...parts.slice(0, i));
    mkdirSync(d, { recursive: true });
    chmodSync(d, 0o755);
  }
  writeFileSync(file, body);
  chmodSync(file, mode);
  return file;
}

const decisions = (fx: Fixture) => fx.entries('hook.decided').map((e) => e.data);

describe('hooks around a call', () => {
  it('a pre hook refuses on a condition with its reason, and lets the others through; each decision is audited', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const file = hook(
      fx,
      'pre.d/10-limit',
      '#!/usr/bin/env python3\nimport json, sys\ne = json.load(sys.stdin)\nif e["input"].get("n", 0) > 50:\n    print("n over 50 is too costly here", file=sys.stderr)\n    sys.exit(2)\n',
    );
    okData(await fx.forge.callTool('fib', { n: 10 }));
    const no = failed(await fx.forge.callTool('fib', { n: 60 }), 'hook_denied');
    expect(no.message).toBe('hook 10-limit refused the call: n over 50 is too costly here');
    expect(decisions(fx)).toEqual([
      expect.objectContaining({
        stage: 'pre',
        hook: file,
        verdict: 'allow',
        name: 'fib',
        persona: 'default',
        digest: expect.stringMatching(/^sha256:/),
      }),
      expect.objectContaining({ stage: 'pre', verdict: 'deny', reason: 'n over 50 is too costly here' }),
    ]);
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ ok: false, kind: 'hook_denied' });
    expect(fx.sandboxRuns('fib')).toHaveLength(1);
  });

  it('a pre hook rewrites the input, which is validated again and whose binds are checked again', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const reader = py('reader', 'print(json.dumps({"ok": True, "data": open(args["path"]).read()}))', {
      input_schema: { type: 'object', properties: { path: { type: 'string', 'x-bind': 'ro' }, n: { type: 'integer' } } },
    });
    expect((await fx.forge.forgeTool(reader)).ok).toBe(true);
    const file = fx.file('note.txt', 'hello');
    hook(
      fx,
      'pre.d/20-rewrite',
      '#!/bin/sh\nread -r e\ncase "$e" in\n  *\'"n":7\'*) echo \'{"input": {"n": 10}}\' ;;\n  *\'"n":8\'*) echo \'{"input": {"n": -1}}\' ;;\n  *\'"n":9\'*) echo \'{"input": {"path": "/etc/shadow"}}\' ;;\nesac\n',
    );
    expect(okData(await fx.forge.callTool('fib', { n: 7 }))).toEqual({ n: 10, fib: '55' });
    expect(failed(await fx.forge.callTool('fib', { n: 8 }), 'validation_failed').message).toMatch(
      /hook .*20-rewrite rewrote the input into one that is refused: input\/n/,
    );
    expect(okData(await fx.forge.callTool('reader', { path: file }))).toBe('hello');
    failed(await fx.forge.callTool('reader', { path: file, n: 9 }), 'bind_denied');
    expect(decisions(fx).map((d) => d.verdict)).toEqual(['rewrite', 'rewrite', 'allow', 'rewrite']);
  });

  it('a post hook redacts a field of the answer, validated against the output schema again; a per-tool hook applies to its tool only', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    expect((await fx.forge.forgeTool({ ...(await example('fib')), name: 'fib2' })).ok).toBe(true);
    hook(
      fx,
      'tools/fib/post.d/10-redact',
      '#!/usr/bin/env python3\nimport json, sys\ne = json.load(sys.stdin)\nenv = e["envelope"]\nif env["ok"]:\n    env["data"]["fib"] = "<hidden>"\n    print(json.dumps({"envelope": {"ok": True, "data": env["data"]}}))\n',
    );
    expect(okData(await fx.forge.callTool('fib', { n: 10 }))).toEqual({ n: 10, fib: '<hidden>' });
    expect(okData(await fx.forge.callTool('fib2', { n: 10 }))).toEqual({ n: 10, fib: '55' });
    // A rewrite the output schema refuses fails closed.
    hook(fx, 'tools/fib/post.d/20-break', '#!/bin/sh\necho \'{"envelope": {"ok": true, "data": {"n": "ten"}}}\'\n');
    expect(failed(await fx.forge.callTool('fib', { n: 10 }), 'hook_failed').message).toMatch(
      /20-break rewrote the answer into one its output schema refuses/,
    );
  });

  it('a hook that hangs, exits 1, prints garbage, or tries the host and the network fails closed, naming it', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const cases: [string, string, RegExp][] = [
      ['hang', '#!/bin/sh\nexec sleep 600\n', /hang did not finish within 10000 ms/],
      ['crash', '#!/bin/sh\necho boom >&2\nexit 1\n', /crash exited 1: boom/],
      ['garbage', '#!/bin/sh\necho hello\n', /garbage printed something that is not JSON/],
      ['extra', '#!/bin/sh\necho \'{"input": {}, "more": 1}\'\n', /extra printed JSON that is not \{"input": …\}/],
      ['nohashbang', 'echo hi\n', /nohashbang has no #! line/],
      ['escape', '#!/usr/../home/x\n', /escape names \/usr\/..\/home\/x as its interpreter, which is not a plain path under/],
      ['envdots', '#!/usr/bin/env ../../tmp/x\n', /envdots names "..\/..\/tmp\/x" after #!\/usr\/bin\/env, which is neither a runtime/],
      [
        'missing',
        '#!/usr/bin/no-such-interpreter\n',
        /missing names \/usr\/bin\/no-such-interpreter as its interpreter, which is not installed/,
      ],
    ];
    for (const [name, body, re] of cases) {
      const file = hook(fx, `pre.d/${name}`, body);
      expect(failed(await fx.forge.callTool('fib', { n: 3 }), 'hook_failed').message, name).toMatch(re);
      expect(decisions(fx).at(-1), name).toMatchObject({ verdict: 'fail', hook: file });
      (await import('node:fs')).rmSync(file);
    }
    // The host's files and the network are out of its reach: its attempts are its reason.
    const marker = join(fx.root, 'hook-was-here');
    hook(
      fx,
      'pre.d/reach',
      `#!/usr/bin/env python3\nimport socket, sys\nwhy = []\ntry:\n    open(${JSON.stringify(marker)}, "w").write("x")\n    why.append("wrote the host")\nexcept OSError as e:\n    why.append("write: " + e.strerror)\ntry:\n    socket.create_connection(("1.1.1.1", 80), timeout=3)\n    why.append("reached the network")\nexcept OSError as e:\n    why.append("net: " + str(e.strerror or e))\nprint("; ".join(why), file=sys.stderr)\nsys.exit(2)\n`,
    );
    const no = failed(await fx.forge.callTool('fib', { n: 3 }), 'hook_denied');
    expect(no.message).toMatch(/write: (No such file or directory|Read-only file system|Permission denied); net: /);
    expect(no.message).not.toMatch(/wrote the host|reached the network/);
    expect(existsSync(marker)).toBe(false);
  }, 120_000);

  it("what a hook says of an x-redact value never reaches the caller's message or the log", async () => {
    const fx = await setup();
    const login = py('login', 'print(json.dumps({"ok": True, "data": len(args["password"])}))', {
      input_schema: { type: 'object', properties: { user: { type: 'string' }, password: { type: 'string', 'x-redact': true } } },
    });
    expect((await fx.forge.forgeTool(login)).ok).toBe(true);
    hook(fx, 'pre.d/10-echo', '#!/bin/sh\nread -r e\necho "refusing $e" >&2\nexit 2\n');
    const no = failed(await fx.forge.callTool('login', { user: 'ann', password: 'hunter2-Sekrit' }), 'hook_denied');
    expect(no.message).toContain('"user":"ann"');
    expect(no.message).toContain('<redacted:input/password>');
    expect(no.message).not.toContain('hunter2-Sekrit');
    expect(JSON.stringify(fx.audit())).not.toContain('hunter2-Sekrit');
    expect(decisions(fx).at(-1)?.reason).toContain('<redacted:input/password>');
  });

  it("a project's own hooks run only when policy hooks.project allows them, after the home's", async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const dir = join(fx.project, '.forge', 'hooks', 'pre.d');
    mkdirSync(dir, { recursive: true });
    for (const d of [join(fx.project, '.forge', 'hooks'), dir]) chmodSync(d, 0o755);
    writeFileSync(join(dir, '10-repo'), '#!/bin/sh\necho "the repository says no" >&2\nexit 2\n');
    chmodSync(join(dir, '10-repo'), 0o755);
    hook(fx, 'pre.d/10-home', '#!/bin/sh\nexit 0\n');
    okData(await fx.forge.callTool('fib', { n: 3 }));
    expect(decisions(fx).map((d) => d.hook)).toEqual([join(fx.home, 'hooks', 'pre.d', '10-home')]);
    writeFileSync(join(fx.home, 'policy.json'), JSON.stringify({ hooks: { project: true } }));
    await expect.poll(async () => (await fx.forge.callTool('fib', { n: 3 })).ok).toBe(false);
    const no = failed(await fx.forge.callTool('fib', { n: 3 }), 'hook_denied');
    expect(no.message).toBe('hook 10-repo refused the call: the repository says no');
    expect(
      decisions(fx)
        .slice(-2)
        .map((d) => [d.hook, d.verdict]),
    ).toEqual([
      [join(fx.home, 'hooks', 'pre.d', '10-home'), 'allow'],
      [join(dir, '10-repo'), 'deny'],
    ]);
  });

  it('with policy hooks.network, a hook reaches what it grants through the proxy, every decision audited; without it, nothing', async () => {
    const server = createServer((_req, res) => res.end('allowed'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
    const port = (server.address() as AddressInfo).port;
    const fx = await setup({
      userPolicy: { hooks: { network: { network: 'allow', loopback: 'allow', allow_domains: ['local.test'] } } },
      forge: { resolver: async (host: string) => (host === 'local.test' ? ['127.0.0.1'] : []) },
    });
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    // It asks the allowed host, then one the grant does not name; its stderr says what it got.
    hook(
      fx,
      'pre.d/10-ask',
      `#!/usr/bin/env python3
import sys, urllib.request
out = []
for url in ["http://local.test:${port}/", "http://elsewhere.test:${port}/"]:
    try:
        out.append(urllib.request.urlopen(url, timeout=5).read().decode())
    except Exception as e:
        out.append(type(e).__name__ + " " + str(getattr(e, "code", "")))
print(" | ".join(out), file=sys.stderr)
sys.exit(2)
`,
    );
    const no = failed(await fx.forge.callTool('fib', { n: 3 }), 'hook_denied');
    expect(no.message).toBe('hook 10-ask refused the call: allowed | HTTPError 403');
    expect(fx.entries('network.allowed').map((e) => e.data)).toEqual([
      expect.objectContaining({
        host: 'local.test',
        port,
        hook: join(fx.home, 'hooks', 'pre.d', '10-ask'),
        name: 'fib',
        persona: 'default',
      }),
    ]);
    expect(fx.entries('network.denied').map((e) => e.data)).toEqual([expect.objectContaining({ host: 'elsewhere.test', name: 'fib' })]);
    // Without the grant: no route at all.
    writeFileSync(join(fx.home, 'policy.json'), '{}');
    await expect
      .poll(async () => failed(await fx.forge.callTool('fib', { n: 3 }), 'hook_denied').message)
      .toMatch(/refused the call: URLError .*\| URLError/);
  });

  it('a hook someone else could have written refuses every call it applies to: group-writable, a link', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const file = hook(fx, 'pre.d/10-ok', '#!/bin/sh\nexit 0\n', 0o775);
    expect(failed(await fx.forge.callTool('fib', { n: 3 }), 'hook_failed').message).toMatch(/10-ok is writable by its group \(mode 775\)/);
    chmodSync(file, 0o755);
    okData(await fx.forge.callTool('fib', { n: 3 }));
    symlinkSync(file, join(fx.home, 'hooks', 'pre.d', '20-link'));
    expect(failed(await fx.forge.callTool('fib', { n: 3 }), 'hook_failed').message).toMatch(/20-link is a symbolic link/);
    expect(fx.sandboxRuns('fib')).toHaveLength(1);
  });

  it("a pre hook's decision the log does not take withholds the call's answer (audit_unavailable naming the hook)", async () => {
    await requireSandbox();
    const root = mkdtempSync(join(tmpdir(), 'forge-hooks-audit-'));
    // The write of a batch holding a hook's decision fails (EIO), as a disk does; the log is real.
    let failing = false;
    const log = await openAuditLog(join(root, 'audit.log'), { io: failingWrite((data) => failing && data.includes('"hook.decided"')) });
    const home = join(root, 'home');
    const forge = await createForge({ env: {}, home, project: join(root, 'project'), audit: log });
    onTestFinished(async () => {
      await forge.close({ graceMs: 2000 });
      await log.close();
      rmSync(root, { recursive: true, force: true });
    });
    expect((await forge.forgeTool(await example('fib'))).ok).toBe(true);
    hook({ home }, 'pre.d/10-ok', '#!/bin/sh\nexit 0\n');
    failing = true;
    const no = failed(await forge.callTool('fib', { n: 5 }), 'audit_unavailable');
    expect(no.message).toMatch(/^hook 10-ok's decision could not be audited: .*EIO: injected/);
    failing = false;
    expect(okData(await forge.callTool('fib', { n: 6 }))).toEqual({ n: 6, fib: '8' });
    await log.flush();
    expect((await verifyLog(join(root, 'audit.log'))).ok).toBe(true);
    const entries = readFileSync(join(root, 'audit.log'), 'utf8')
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Entry);
    // What the log lost is listed once it takes appends again; the answered call is all there.
    expect(entries.find((x) => x.type === 'forge.audit_recovered')?.data).toMatchObject({ lost_by_type: { 'hook.decided': 1 } });
    expect(entries.filter((x) => x.type === 'hook.decided').map((x) => x.data.verdict)).toEqual(['allow']);
    expect(entries.at(-1)).toMatchObject({ type: 'forge.called', data: { ok: true, name: 'fib' } });
  });
});
