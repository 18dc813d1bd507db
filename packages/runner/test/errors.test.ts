import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resolveRuntimes, runtimeNames } from '@forge/sandbox';
import { describe, expect, it, onTestFinished } from 'vitest';
import { example, failed, okData, py, RECEIPT, setup, tool, writeAtomic } from './helpers.js';

describe('forge pipeline refusals', () => {
  it('validation_failed: a spec whose input_schema is not an object schema, with every problem named', async () => {
    const fx = await setup();
    const r = await fx.forge.forgeTool({ ...(await example('fib')), input_schema: { type: 'array' }, runtime: 'cobol' });
    expect(r).toMatchObject({ ok: false, kind: 'validation_failed' });
    if (r.ok) return;
    expect(r.problems).toEqual([
      { path: 'runtime', message: expect.stringContaining('"cobol" is not a known runtime') },
      { path: 'input_schema/type', message: expect.stringContaining('must be "object"') },
    ]);
    expect(fx.entries('forge.created').map((e) => e.data)).toEqual([
      {
        ok: false,
        persona: 'default',
        session: expect.any(String),
        scope: 'project',
        name: 'fib',
        kind: 'validation_failed',
        message: r.message,
        problems: r.problems,
      },
    ]);
    expect(await fx.forge.listTools()).toEqual([]);
  });

  it('validation_failed: not an object, a bad name, an input_schema that does not compile', async () => {
    const fx = await setup();
    expect(await fx.forge.forgeTool('fib')).toMatchObject({ ok: false, kind: 'validation_failed', problems: [{ path: '' }] });
    const badName = await fx.forge.forgeTool({ ...(await example('fib')), name: '1fib' });
    expect(badName).toMatchObject({
      ok: false,
      kind: 'validation_failed',
      problems: [{ path: 'name', message: 'must start with a letter (got "1fib")' }],
    });
    const badSchema = await fx.forge.forgeTool({
      ...(await example('fib')),
      input_schema: { type: 'object', properties: { n: { type: 'int' } } },
    });
    expect(badSchema).toMatchObject({ ok: false, kind: 'validation_failed' });
    expect(JSON.stringify(badSchema)).toContain('input_schema/properties/n/type');
    expect(fx.entries('forge.created').map((e) => [e.data.ok, e.data.kind])).toEqual([
      [false, 'validation_failed'],
      [false, 'validation_failed'],
      [false, 'validation_failed'],
    ]);
  });

  it('validation_failed: scope "task" without a task id', async () => {
    const fx = await setup();
    expect(await fx.forge.forgeTool(await example('fib'), { scope: 'task' })).toMatchObject({ ok: false, kind: 'validation_failed' });
    expect(fx.entries('forge.created').at(-1)?.data).toMatchObject({ ok: false, kind: 'validation_failed', scope: 'task' });
  });

  it('name_taken without overwrite; overwrite bumps the version and records what it replaced', async () => {
    const fx = await setup();
    const first = await fx.forge.forgeTool(await example('fib'));
    if (!first.ok) throw new Error(first.message);
    const again = await fx.forge.forgeTool(await example('fib'));
    expect(again).toMatchObject({ ok: false, kind: 'name_taken' });
    expect(fx.entries('forge.created').at(-1)?.data).toMatchObject({ ok: false, kind: 'name_taken', name: 'fib' });

    const v2 = await fx.forge.forgeTool({ ...(await example('fib')), description: 'fib, second edition' }, { overwrite: true });
    if (!v2.ok) throw new Error(v2.message);
    expect(v2.tool.version).toBe(2);
    expect(v2.previous).toEqual({ version: 1, digest: first.tool.digest });
    expect(fx.entries('forge.created').at(-1)?.data).toMatchObject({
      ok: true,
      version: 2,
      replaced: { version: 1, digest: first.tool.digest },
    });
    expect(okData(await fx.forge.callTool('fib', { n: 7 }))).toEqual({ n: 7, fib: '13' });
  });

  it('name_forbidden: a built-in meta-tool name, the bundle default forge_* and a policy glob', async () => {
    const fx = await setup({ workspacePolicy: { forbidden_tool_names: ['deploy_*'] } });
    const fib = await example('fib');
    for (const name of ['forge_call', 'forge_helper', 'deploy_prod']) {
      const r = await fx.forge.forgeTool({ ...fib, name });
      expect(r, name).toMatchObject({ ok: false, kind: 'name_forbidden' });
    }
    const byPolicy = await fx.forge.forgeTool({ ...fib, name: 'deploy_prod' });
    expect(byPolicy.ok ? '' : byPolicy.message).toContain('"deploy_*"');
    expect(fx.entries('forge.created').map((e) => [e.data.name, e.data.kind])).toEqual([
      ['forge_call', 'name_forbidden'],
      ['forge_helper', 'name_forbidden'],
      ['deploy_prod', 'name_forbidden'],
      ['deploy_prod', 'name_forbidden'],
    ]);
    expect(existsSync(join(fx.project, '.forge', 'tools', 'deploy_prod.json'))).toBe(false);
  });

  it('namespace_denied: a persona forges only under its namespace, and nobody else forges there', async () => {
    const fx = await setup({ workspacePolicy: { persona_namespaces: { coder: 'code' } } });
    const fib = await example('fib');
    expect(await fx.forge.forgeTool(fib, { persona: 'coder' })).toMatchObject({ ok: false, kind: 'namespace_denied' });
    expect(await fx.forge.forgeTool({ ...fib, name: 'code.fib' }, { persona: 'default' })).toMatchObject({
      ok: false,
      kind: 'namespace_denied',
    });
    expect(await fx.forge.forgeTool({ ...fib, name: 'code.fib' }, { persona: 'coder' })).toMatchObject({ ok: true });
    expect(fx.entries('tool.namespace_denied').map((e) => [e.data.persona, e.data.name, e.data.kind])).toEqual([
      ['coder', 'fib', 'namespace_denied'],
      ['default', 'code.fib', 'namespace_denied'],
    ]);
    expect(okData(await fx.forge.callTool('code.fib', { n: 3 }))).toEqual({ n: 3, fib: '2' });
  });

  it('static_check_failed: shelling out in python, node and bash, with the rule and line', async () => {
    const fx = await setup();
    const r = await fx.forge.forgeTool(py('shell_out', 'import subprocess\nprint(subprocess.run(["ls"]))'));
    expect(r).toMatchObject({ ok: false, kind: 'static_check_failed' });
    if (r.ok) return;
    expect(r.findings).toEqual([
      { rule: 'py.subprocess', line: 3, message: 'subprocess starts other programs; do the work in Python instead' },
      { rule: 'py.subprocess', line: 4, message: 'subprocess starts other programs; do the work in Python instead' },
    ]);
    expect(r.message).toContain('line 3');
    expect(await fx.forge.forgeTool(tool('node_shell', 'node', "const cp = require('child_process');"))).toMatchObject({
      kind: 'static_check_failed',
      findings: [{ rule: 'node.child_process', line: 1 }],
    });
    expect(await fx.forge.forgeTool(tool('fetcher', 'bash', 'curl https://example.com'))).toMatchObject({
      kind: 'static_check_failed',
      findings: [{ rule: 'sh.network_tool', line: 1 }],
    });
    expect(fx.entries('forge.created').map((e) => [e.data.name, e.data.ok, e.data.kind])).toEqual([
      ['shell_out', false, 'static_check_failed'],
      ['node_shell', false, 'static_check_failed'],
      ['fetcher', false, 'static_check_failed'],
    ]);
    expect(await fx.forge.listTools()).toEqual([]);
  });

  it('policy_denied: a runtime that policy does not allow cannot be forged', async () => {
    const fx = await setup({ workspacePolicy: { runtimes: { allow: ['python3'] } } });
    expect(await fx.forge.forgeTool(await example('word_count'))).toMatchObject({ ok: false, kind: 'policy_denied' });
    expect(fx.entries('forge.created').at(-1)?.data).toMatchObject({ ok: false, kind: 'policy_denied', name: 'word_count' });
  });

  it('secret_denied at forge time: a persona may not forge a tool needing secrets it may not use', async () => {
    const fx = await setup({ workspacePolicy: { persona_secret_allow: { ops: ['API_TOKEN'] } } });
    expect(await fx.forge.forgeTool(await example('api_status'))).toMatchObject({ ok: false, kind: 'secret_denied' });
    expect(fx.entries('acl.persona_secret_denied').map((e) => e.data)).toEqual([
      expect.objectContaining({ ok: false, kind: 'secret_denied', persona: 'default', name: 'api_status' }),
    ]);
    expect(await fx.forge.forgeTool(await example('api_status'), { persona: 'ops' })).toMatchObject({ ok: true });
  });

  it('breaker_open: per_session_forge_count caps forges per session, not per engine', async () => {
    const fx = await setup({ workspacePolicy: { breakers: { per_session_forge_count: 2 } } });
    const fib = await example('fib');
    expect((await fx.forge.forgeTool({ ...fib, name: 'f1' }, { session: 'a' })).ok).toBe(true);
    expect((await fx.forge.forgeTool({ ...fib, name: 'f2' }, { session: 'a' })).ok).toBe(true);
    const third = await fx.forge.forgeTool({ ...fib, name: 'f3' }, { session: 'a' });
    expect(third).toMatchObject({ ok: false, kind: 'breaker_open' });
    expect(third.ok ? '' : third.message).toContain('per_session_forge_count (2)');
    expect((await fx.forge.forgeTool({ ...fib, name: 'f3' }, { session: 'b' })).ok).toBe(true);
    expect(fx.entries('forge.created').map((e) => [e.data.name, e.data.ok])).toEqual([
      ['f1', true],
      ['f2', true],
      ['f3', false],
      ['f3', true],
    ]);
    expect(fx.entries('breaker.open').map((e) => e.data)).toEqual([
      { type: 'breaker.open', breaker: 'forge_count', name: 'a', session: 'a', reset_at: null, reason: '2 tools forged in this session' },
    ]);
  });
});

describe('call pipeline refusals', () => {
  it('unknown_tool: refused, audited, and onUnknownTool fires with the name and who asked', async () => {
    const seen: unknown[] = [];
    const fx = await setup({
      forge: {
        onUnknownTool: (name, ctx) => {
          seen.push([name, ctx]);
          return name === 'csv_filter' ? 'propose it with forge_propose' : undefined;
        },
      },
    });
    const env = await fx.forge.callTool('csv_filter', { x: 1 }, { persona: 'analyst', session: 'sx' });
    expect(failed(env, 'unknown_tool').message).toMatch(/; propose it with forge_propose$/);
    expect(env.meta).toEqual({ cache: 'off', duration_ms: expect.any(Number), audit: RECEIPT });
    expect(seen).toEqual([['csv_filter', { persona: 'analyst', session: 'sx' }]]);
    const meta = await fx.forge.callTool('forge_call', {});
    expect(failed(meta, 'unknown_tool').message).toContain('meta-tool');
    expect(seen).toHaveLength(2);
    expect(fx.entries('forge.called').map((e) => e.data)).toEqual([
      expect.objectContaining({ ok: false, kind: 'unknown_tool', name: 'csv_filter', persona: 'analyst', session: 'sx' }),
      expect.objectContaining({ ok: false, kind: 'unknown_tool', name: 'forge_call' }),
    ]);
  });

  it('acl.persona_denied: a tool outside the caller’s allowedTools is refused before anything runs', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    failed(await fx.forge.callTool('fib', { n: 1 }, { persona: 'guest', allowedTools: 'word_count, csv_*' }), 'acl.persona_denied');
    expect(fx.entries('acl.persona_denied').map((e) => e.data)).toEqual([
      expect.objectContaining({ ok: false, kind: 'acl.persona_denied', name: 'fib', persona: 'guest' }),
    ]);
    expect(fx.sandboxRuns('fib')).toEqual([]);
    expect(okData(await fx.forge.callTool('fib', { n: 1 }, { persona: 'guest', allowedTools: 'f*' }))).toEqual({ n: 1, fib: '1' });
  });

  it('FORGE_ALLOWED_TOOLS and FORGE_PERSONA from the engine environment apply to every call', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const f = await fx.reopen({ env: { FORGE_PERSONA: 'ci', FORGE_ALLOWED_TOOLS: 'word_count' } });
    failed(await f.callTool('fib', { n: 1 }), 'acl.persona_denied');
    expect(fx.entries('acl.persona_denied').at(-1)?.data).toMatchObject({ persona: 'ci', name: 'fib' });
  });

  it('policy_denied: an allow-rules file without the rule refuses the call; adding the rule permits it', async () => {
    const fx = await setup({ rules: 'allow default_t tool:word_count execute\n' });
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    expect((await fx.forge.forgeTool(await example('word_count'))).ok).toBe(true);
    const env = await fx.forge.callTool('fib', { n: 2 });
    expect(failed(env, 'policy_denied').message).toContain('allow default_t tool:fib execute');
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ ok: false, kind: 'policy_denied', name: 'fib' });
    expect(fx.sandboxRuns('fib')).toEqual([]);
    okData(await fx.forge.callTool('word_count', { text: 'a b' }));
    writeAtomic(join(fx.project, '.forge', 'policy.rules'), 'allow default_t tool:word_count execute\nallow default_t tool:fib execute\n');
    expect(okData(await fx.forge.callTool('fib', { n: 2 }))).toEqual({ n: 2, fib: '1' });
  });

  it('with allow-rules but no network rule, a network-granted persona runs without network', async () => {
    const fx = await setup({
      workspacePolicy: { persona_sandbox_overrides: { browser: { network: 'allow' } } },
      rules: 'allow browser_t tool:fib execute\n',
    });
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    expect(okData(await fx.forge.callTool('fib', { n: 5 }, { persona: 'browser' }))).toEqual({ n: 5, fib: '5' });
  });

  it('validation_failed: bad input names the JSON pointer of each problem, and nothing runs', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const env = await fx.forge.callTool('fib', { n: -1, extra: true });
    const err = failed(env, 'validation_failed');
    expect(err.message).toBe('input: must NOT have the property "extra"; remove it or check its spelling; input/n: must be >= 0');
    failed(await fx.forge.callTool('fib', {}), 'validation_failed');
    failed(await fx.forge.callTool('fib', { n: 'ten' }), 'validation_failed');
    expect(fx.entries('forge.called').map((e) => [e.data.ok, e.data.kind])).toEqual([
      [false, 'validation_failed'],
      [false, 'validation_failed'],
      [false, 'validation_failed'],
    ]);
    expect(fx.entries('forge.called')[0]?.data.problems).toEqual([
      { path: 'input', message: 'must NOT have the property "extra"; remove it or check its spelling' },
      { path: 'input/n', message: 'must be >= 0' },
    ]);
    expect(existsSync(fx.forge.paths.runsDir) ? readdirSync(fx.forge.paths.runsDir) : []).toEqual([]);
  });

  it('a refusal envelope carries the same structured details as its audit entry (problems, retry_after_ms)', async () => {
    const fx = await setup({ workspacePolicy: { breakers: { per_tool_rpm: 1 } }, forge: { cache: false } });
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const bad = await fx.forge.callTool('fib', { n: -1 });
    expect(fx.entries('forge.called').at(-1)?.data.problems).toEqual([{ path: 'input/n', message: 'must be >= 0' }]);
    expect(failed(bad, 'validation_failed').problems).toEqual([{ path: 'input/n', message: 'must be >= 0' }]);
    const limited = await fx.forge.callTool('fib', { n: 1 });
    const retry = fx.entries('forge.called').at(-1)?.data.retry_after_ms;
    expect(retry).toEqual(expect.any(Number));
    expect(failed(limited, 'breaker_open').retry_after_ms).toBe(retry);
  });

  it('tool_tampered: the stored impl edited on disk is refused after the registry reloads, and nothing runs', async () => {
    const fx = await setup();
    const made = await fx.forge.forgeTool(await example('fib'));
    if (!made.ok) throw new Error(made.message);
    okData(await fx.forge.callTool('fib', { n: 3 }));
    const file = join(fx.project, '.forge', 'tools', 'fib.json');
    const stored = JSON.parse(readFileSync(file, 'utf8'));
    stored.impl = 'import json\nprint(json.dumps({"ok": True, "data": {"n": 0, "fib": "pwned"}}))\n';
    writeFileSync(file, JSON.stringify(stored));

    const restarted = await fx.reopen();
    const env = await restarted.callTool('fib', { n: 4 });
    const err = failed(env, 'tool_tampered');
    expect(err.message).toContain(made.tool.digest);
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ ok: false, kind: 'tool_tampered', name: 'fib' });
    expect(fx.sandboxRuns('fib')).toHaveLength(1);
    // A second call is refused too (the check is not a one-off).
    failed(await restarted.callTool('fib', { n: 4 }), 'tool_tampered');
  });

  it('tool_tampered: an edited input_schema is refused before the input is validated against it', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const file = join(fx.project, '.forge', 'tools', 'fib.json');
    const stored = JSON.parse(readFileSync(file, 'utf8'));
    stored.input_schema.properties.n.maximum = 1e9;
    writeFileSync(file, JSON.stringify(stored));
    const restarted = await fx.reopen();
    failed(await restarted.callTool('fib', { n: 50000 }), 'tool_tampered');
  });
});

describe('bind_denied: x-bind paths are hostile input', () => {
  const reader = () =>
    py('reader', 'print(json.dumps({"ok": True, "data": open(args["path"]).read()}))', {
      input_schema: { type: 'object', properties: { path: { type: 'string', 'x-bind': 'ro' } }, required: ['path'] },
    });

  it('refuses a path outside bind_roots, with "..", through a symlink, or not existing; a plain path inside works', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(reader())).ok).toBe(true);
    const inside = fx.file('data/in.txt', 'inside');
    const outside = join(fx.root, 'outside.txt');
    writeFileSync(outside, 'outside');
    symlinkSync(outside, join(fx.project, 'data', 'escape.txt'));
    symlinkSync(inside, join(fx.project, 'data', 'alias.txt'));
    const cases: [string, string][] = [
      [outside, 'outside the allowed roots'],
      [`${fx.project}/data/../data/in.txt`, '".." segments'],
      [join(fx.project, 'data', 'escape.txt'), 'symbolic link'],
      [join(fx.project, 'data', 'alias.txt'), 'symbolic link'],
      [join(fx.project, 'data', 'nope.txt'), 'does not exist'],
      ['data/in.txt', 'absolute'],
    ];
    for (const [path, why] of cases) {
      const err = failed(await fx.forge.callTool('reader', { path }), 'bind_denied');
      expect(err.message, path).toContain(why);
      expect(err.message).toContain('input/path');
    }
    expect(fx.entries('forge.called').map((e) => e.data.kind)).toEqual(Array(cases.length).fill('bind_denied'));
    expect(fx.sandboxRuns('reader')).toEqual([]);
    expect(okData(await fx.forge.callTool('reader', { path: inside }))).toBe('inside');
  });

  it("refuses forge's own state: its home, the project's .forge directory, and a directory containing it", async () => {
    const fx = await setup();
    writeAtomic(fx.forge.paths.workspacePolicy, JSON.stringify({ bind_roots: [fx.root] }));
    expect((await fx.forge.forgeTool(reader())).ok).toBe(true);
    writeFileSync(join(fx.home, 'secrets.json'), '{}', { mode: 0o600 });
    for (const path of [
      join(fx.home, 'secrets.json'),
      fx.forge.paths.auditLog,
      join(fx.project, '.forge', 'tools', 'reader.json'),
      fx.project,
      fx.root,
    ]) {
      failed(await fx.forge.callTool('reader', { path }), 'bind_denied');
    }
    expect(fx.sandboxRuns('reader')).toEqual([]);
  });

  for (const name of ['policy.rules', 'policy.json']) {
    it(`an rw bind to .forge/${name} is refused without creating it, so the policy in force is unchanged`, async () => {
      const fx = await setup();
      expect((await fx.forge.forgeTool(await example('json_to_csv'))).ok).toBe(true);
      expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
      const out = join(fx.project, '.forge', name);
      failed(await fx.forge.callTool('json_to_csv', { rows: [{ a: 1 }], out }), 'bind_denied');
      // The refused call must not have changed the policy in force…
      expect(await fx.forge.callTool('fib', { n: 6 })).toMatchObject({ ok: true, data: { n: 6, fib: '8' } });
      // …nor left a file in forge's own state.
      expect(existsSync(out)).toBe(false);
    });
  }

  it('an rw bind may create a new file only inside bind_roots', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('json_to_csv'))).ok).toBe(true);
    mkdirSync(join(fx.root, 'elsewhere'));
    const out = join(fx.root, 'elsewhere', 'x.csv');
    failed(await fx.forge.callTool('json_to_csv', { rows: [], out }), 'bind_denied');
    expect(existsSync(out)).toBe(false);
  });
});

describe('a host that cannot sandbox', () => {
  it('sandbox_unavailable: nothing runs, the fix is named, sandbox.unavailable is audited, the breaker is untouched', async () => {
    const fx = await setup({ forge: { bwrapPath: '/nonexistent/bwrap' } });
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    for (let i = 0; i < 6; i++) {
      const env = await fx.forge.callTool('fib', { n: 5 + i });
      expect(env.ok).toBe(false);
      if (!env.ok) {
        expect(env.error.kind).toBe('sandbox_unavailable');
        expect(env.error.message).toContain('bubblewrap');
      }
    }
    expect(fx.entries('sandbox.unavailable')).toHaveLength(6);
    expect(fx.entries('forge.called').every((e) => e.data.kind === 'sandbox_unavailable')).toBe(true);
    // Not the tool's failure: the failure breaker (threshold 5 by default) never opened.
    expect(fx.entries('breaker.open')).toEqual([]);
  });
});

describe('a sandbox that cannot start on this host now', () => {
  it('the kernel refuses its namespace (the uid at its process limit): sandbox_unavailable with the cause and fix, never output_invalid', async () => {
    // Real bwrap behind a shell that first sets RLIMIT_NPROC to 1, below what the sandbox's uid
    // already runs: creating the sandbox fails with EAGAIN. The host probe's trial goes through.
    const dir = mkdtempSync(join(tmpdir(), 'forge-runner-bwrap-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(
      join(dir, 'bwrap'),
      `#!/bin/sh\ncase "$*" in *'test -d /proc/self'*) ;; *) ulimit -p 1 ;; esac\nexec /usr/bin/bwrap "$@"\n`,
      {
        mode: 0o755,
      },
    );
    chmodSync(dir, 0o755); // as root the wrapper runs as the sandbox's uid
    const fx = await setup({ forge: { bwrapPath: join(dir, 'bwrap') } });
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const env = await fx.forge.callTool('fib', { n: 7 });
    expect(env.ok).toBe(false);
    if (env.ok) return;
    expect(env.error.kind).toBe('sandbox_unavailable');
    expect(env.error.message).toMatch(/^the sandbox could not be created: the kernel refused a new process or namespace for this user/);
    expect(env.error.message).toContain('Resource temporarily unavailable');
    expect(env.error.message).toContain("fix: raise this user's process limit");
    expect(fx.entries('sandbox.unavailable')).toHaveLength(1);
    expect(fx.entries('forge.called').map((e) => e.data.kind)).toEqual(['sandbox_unavailable']);
    // Not the tool's doing: nothing counts against its breaker, no run is recorded.
    expect(fx.entries('breaker.open')).toEqual([]);
  });
});

describe('a runtime on PATH that does not run', () => {
  it('is refused at forge time (validation_failed), not at the first call', async () => {
    // A version manager's shim for a version it does not have: on PATH, but it never answers.
    const bin = mkdtempSync(join(tmpdir(), 'forge-fake-bin-'));
    writeFileSync(join(bin, 'python3.99'), '#!/bin/sh\necho "pyenv: version 3.99 is not installed" >&2\nexit 127\n', { mode: 0o755 });
    const path = process.env.PATH;
    process.env.PATH = `${bin}:${path}`;
    onTestFinished(() => {
      process.env.PATH = path;
      rmSync(bin, { recursive: true, force: true });
    });
    const fx = await setup();
    const made = await fx.forge.forgeTool({ ...(await example('fib')), name: 'fib399', runtime: 'python3.99' });
    expect(made.ok).toBe(false);
    if (!made.ok) {
      expect(made.kind).toBe('validation_failed');
      expect(made.message).toContain('unknown runtime "python3.99"');
    }
    expect(fx.entries('forge.created').at(-1)?.data).toMatchObject({ ok: false, kind: 'validation_failed', name: 'fib399' });
  });

  it('a versioned alias that runs is found on first use: forged and called under python3.N', async () => {
    const fx = await setup();
    const minor = /^3\.(\d+)/.exec((await resolveRuntimes()).get('python3').version)?.[1];
    const alias = `python3.${minor}`;
    expect(runtimeNames(), `${alias} should be on PATH beside python3`).toContain(alias);
    const made = await fx.forge.forgeTool({ ...(await example('fib')), name: 'fib_versioned', runtime: alias });
    expect(made.ok, JSON.stringify(made)).toBe(true);
    expect(await fx.forge.callTool('fib_versioned', { n: 10 })).toMatchObject({ ok: true, data: { n: 10, fib: '55' } });
  });
});
