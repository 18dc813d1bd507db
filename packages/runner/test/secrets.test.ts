import { createHash } from 'node:crypto';
import { chmodSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { scaled } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { example, type FixtureOptions, failed, filesContaining, okData, py, setup, writeAtomic } from './helpers.js';

const TOKEN = 'tok_9f3c1e77ab52d0e4c8a1';
const ALLOW = { persona_secret_allow: { default: ['API_TOKEN'] } };
const fingerprint = (s: string) => createHash('sha256').update(s).digest('hex').slice(0, 12);

const withSecret = (extra: FixtureOptions = {}) => setup({ workspacePolicy: ALLOW, vault: { API_TOKEN: TOKEN }, ...extra });

/** A tool that prints the secret everywhere it can: data, a nested key and value, meta, stderr. */
const leaker = (name = 'leaker', meta: Record<string, unknown> = {}) =>
  py(
    name,
    [
      't = os.environ["API_TOKEN"]',
      'sys.stderr.write("debug: token=" + t + "\\n")',
      'print(json.dumps({"ok": True, "data": {"token": t, "list": ["x" + t + "y"], "nested": {t: {"again": t}}},',
      '                  "meta": {"echo": t, t: 1}}))',
    ].join('\n'),
    { meta: { secrets: ['API_TOKEN'], ...meta } },
  );

/** The secret must be nowhere: not in the envelope, not in any file under the home or the project. */
function expectNoSecret(fx: { home: string; project: string }, ...values: unknown[]): void {
  for (const v of values) expect.soft(JSON.stringify(v)).not.toContain(TOKEN);
  expect
    .soft([...filesContaining(fx.home, TOKEN).filter((f) => !f.endsWith('/secrets.json')), ...filesContaining(fx.project, TOKEN)])
    .toEqual([]);
}

describe('secrets', () => {
  it('api_status gets API_TOKEN from the vault; the audit names the secret, never its value', async () => {
    const fx = await withSecret();
    expect((await fx.forge.forgeTool(await example('api_status'))).ok).toBe(true);
    const env = await fx.forge.callTool('api_status', { service: 'billing' });
    expect(okData(env)).toEqual({ service: 'billing', configured: true, length: TOKEN.length, fingerprint: fingerprint(TOKEN) });
    const runId = env.meta.run_id as string;
    expect(env.meta.cache).toBe('off');
    expect(fx.entries('tool.secrets_injected').map((e) => e.data)).toEqual([
      { name: 'api_status', run_id: runId, secrets: ['API_TOKEN'], persona: 'default' },
    ]);
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ ok: true, secrets: ['API_TOKEN'], run_id: runId });
    expect(fx.manifest(runId)).toMatchObject({ secrets: ['API_TOKEN'], input: { service: 'billing' } });
    expectNoSecret(fx, env);
  });

  it('the vault is read fresh on every call: an operator edit applies to the next call', async () => {
    const fx = await withSecret();
    expect((await fx.forge.forgeTool(await example('api_status'))).ok).toBe(true);
    expect(okData(await fx.forge.callTool('api_status', { service: 'a' }))).toMatchObject({ fingerprint: fingerprint(TOKEN) });
    writeAtomic(join(fx.home, 'secrets.json'), JSON.stringify({ API_TOKEN: 'rotated' }));
    expect(okData(await fx.forge.callTool('api_status', { service: 'a' }))).toMatchObject({
      length: 7,
      fingerprint: fingerprint('rotated'),
    });
  });

  it('a tool printing the secret in data, a nested key and value, meta and stderr: redacted everywhere, stored nowhere', async () => {
    const fx = await withSecret();
    expect((await fx.forge.forgeTool(leaker())).ok).toBe(true);
    const env = await fx.forge.callTool('leaker', {});
    const mark = '<redacted:API_TOKEN>';
    expect(okData(env)).toEqual({ token: mark, list: [`x${mark}y`], nested: { [mark]: { again: mark } } });
    expect(env.meta).toMatchObject({ echo: mark, [mark]: 1 });
    expect(fx.manifest(env.meta.run_id as string).stderr_tail).toBe(`debug: token=${mark}\n`);
    expectNoSecret(fx, env, fx.audit());
  });

  it('a deterministic tool with secrets is never cached', async () => {
    const fx = await withSecret();
    expect((await fx.forge.forgeTool(leaker('det_leaker', { deterministic: true }))).ok).toBe(true);
    const a = await fx.forge.callTool('det_leaker', {});
    const b = await fx.forge.callTool('det_leaker', {});
    expect([a.meta.cache, b.meta.cache]).toEqual(['off', 'off']);
    expect(fx.sandboxRuns('det_leaker')).toHaveLength(2);
    expect(fx.entries('forge.called').map((e) => e.data.cache)).toEqual(['off', 'off']);
    expectNoSecret(fx, a, b);
  });

  it('a secret in the error of a failed envelope and in a timeout’s stderr is redacted too', async () => {
    const fx = await withSecret();
    const spec = py(
      'err_leaker',
      't = os.environ["API_TOKEN"]\nprint(json.dumps({"ok": False, "error": {"kind": "auth_failed", "message": "bad token " + t, "token": t}}))',
      { meta: { secrets: ['API_TOKEN'] } },
    );
    // The token must reach stderr before the timeout: on a loaded host python alone can take
    // seconds to start, so the limit scales (and the sleep outlasts any scaled limit).
    const slow = py('slow_leaker', 'import time\nsys.stderr.write(os.environ["API_TOKEN"])\nsys.stderr.flush()\ntime.sleep(600)', {
      meta: { secrets: ['API_TOKEN'], timeout_ms: scaled(5_000) },
    });
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    expect((await fx.forge.forgeTool(slow)).ok).toBe(true);
    const a = await fx.forge.callTool('err_leaker', {});
    expect(failed(a, 'auth_failed')).toEqual({
      kind: 'auth_failed',
      message: 'bad token <redacted:API_TOKEN>',
      token: '<redacted:API_TOKEN>',
    });
    const b = await fx.forge.callTool('slow_leaker', {});
    expect(failed(b, 'timeout').message).toContain('<redacted:API_TOKEN>');
    expectNoSecret(fx, a, b);
  });

  it('a secret printed as non-JSON output appears neither in the envelope nor in the kept stdout', async () => {
    const fx = await withSecret();
    expect(
      (await fx.forge.forgeTool(py('raw_leaker', 'print("token=" + os.environ["API_TOKEN"])', { meta: { secrets: ['API_TOKEN'] } }))).ok,
    ).toBe(true);
    const env = await fx.forge.callTool('raw_leaker', {});
    failed(env, 'output_invalid');
    expectNoSecret(fx, env);
  });

  it('a secret in output over the cap appears in no kept file', async () => {
    const fx = await withSecret();
    const spec = py('loud_leaker', 'print(json.dumps({"ok": True, "data": [os.environ["API_TOKEN"]] * 200}))', {
      meta: { secrets: ['API_TOKEN'], output_cap: 1024 },
    });
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    const env = await fx.forge.callTool('loud_leaker', {});
    failed(env, 'resource_limit');
    expectNoSecret(fx, env);
  });
});

describe('secret refusals', () => {
  it('secret_denied: a persona without persona_secret_allow gets no secret, and nothing runs', async () => {
    const fx = await setup({
      workspacePolicy: { persona_secret_allow: { ops: ['API_TOKEN'], intern: ['OTHER'] } },
      vault: { API_TOKEN: TOKEN },
    });
    expect((await fx.forge.forgeTool(await example('api_status'), { persona: 'ops' })).ok).toBe(true);
    failed(await fx.forge.callTool('api_status', { service: 's' }, { persona: 'default' }), 'secret_denied');
    failed(await fx.forge.callTool('api_status', { service: 's' }, { persona: 'intern' }), 'secret_denied');
    expect(fx.entries('acl.persona_secret_denied').map((e) => [e.data.persona, e.data.kind, e.data.name])).toEqual([
      ['default', 'secret_denied', 'api_status'],
      ['intern', 'secret_denied', 'api_status'],
    ]);
    expect(fx.sandboxRuns('api_status')).toEqual([]);
    expect(okData(await fx.forge.callTool('api_status', { service: 's' }, { persona: 'ops' }))).toMatchObject({ configured: true });
  });

  it('secret_missing: no vault at all (audited as secret.vault_missing)', async () => {
    const fx = await setup({ workspacePolicy: ALLOW });
    expect((await fx.forge.forgeTool(await example('api_status'))).ok).toBe(true);
    const err = failed(await fx.forge.callTool('api_status', { service: 's' }), 'secret_missing');
    expect(err.message).toContain(join(fx.home, 'secrets.json'));
    expect(fx.entries('secret.vault_missing').map((e) => e.data)).toEqual([
      expect.objectContaining({ ok: false, kind: 'secret_missing', name: 'api_status' }),
    ]);
    expect(fx.sandboxRuns('api_status')).toEqual([]);
  });

  it('secret_missing: the vault lacks the key', async () => {
    const fx = await setup({ workspacePolicy: ALLOW, vault: { OTHER: 'x' } });
    expect((await fx.forge.forgeTool(await example('api_status'))).ok).toBe(true);
    expect(failed(await fx.forge.callTool('api_status', { service: 's' }), 'secret_missing').message).toContain('"API_TOKEN"');
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ ok: false, kind: 'secret_missing' });
  });

  it('a vaultPath option points the engine at another vault', async () => {
    const fx = await setup({ workspacePolicy: ALLOW });
    const vault = join(fx.root, 'elsewhere.json');
    writeFileSync(vault, JSON.stringify({ API_TOKEN: 'from-elsewhere' }), { mode: 0o600 });
    const f = await fx.reopen({ vaultPath: vault });
    expect((await f.forgeTool(await example('api_status'))).ok).toBe(true);
    expect(okData(await f.callTool('api_status', { service: 's' }))).toMatchObject({ fingerprint: fingerprint('from-elsewhere') });
  });

  const malformed: [string, (vault: string, root: string) => void][] = [
    ['mode 0644', (v) => chmodSync(v, 0o644)],
    ['invalid JSON', (v) => writeAtomic(v, `{"API_TOKEN": "${TOKEN}"`)],
    ['a non-string value', (v) => writeAtomic(v, JSON.stringify({ API_TOKEN: TOKEN, PORT: 8080 }))],
    ['not an object', (v) => writeAtomic(v, JSON.stringify([TOKEN]))],
    [
      'a symlink to a good vault',
      (v, root) => {
        const real = join(root, 'real-vault.json');
        writeFileSync(real, JSON.stringify({ API_TOKEN: TOKEN }), { mode: 0o600 });
        rmSync(v);
        symlinkSync(real, v);
      },
    ],
  ];
  for (const [what, spoil] of malformed) {
    it(`vault_malformed: ${what} (audited as secret.vault_malformed, the value never quoted)`, async () => {
      const fx = await withSecret();
      expect((await fx.forge.forgeTool(await example('api_status'))).ok).toBe(true);
      spoil(join(fx.home, 'secrets.json'), fx.root);
      const env = await fx.forge.callTool('api_status', { service: 's' });
      failed(env, 'vault_malformed');
      expect(fx.entries('secret.vault_malformed').map((e) => e.data)).toEqual([
        expect.objectContaining({ ok: false, kind: 'vault_malformed', name: 'api_status' }),
      ]);
      expect(fx.sandboxRuns('api_status')).toEqual([]);
      expectNoSecret(fx, env);
    });
  }
});

describe('x-redact', () => {
  it('an x-redact input is <redacted> in the run manifest while the tool sees the real value', async () => {
    const fx = await setup();
    const password = 'hunter2-correct-horse';
    const spec = py(
      'login',
      'import hashlib\np = args["password"]\nprint(json.dumps({"ok": True, "data": {"user": args["user"], "len": len(p), "sha": hashlib.sha256(p.encode()).hexdigest(), "keys": [k["id"] for k in args["keys"]]}}))',
      {
        input_schema: {
          type: 'object',
          properties: {
            user: { type: 'string' },
            password: { type: 'string', 'x-redact': true },
            keys: { type: 'array', items: { $ref: '#/$defs/key' } },
          },
          required: ['user', 'password', 'keys'],
          $defs: { key: { type: 'object', properties: { id: { type: 'string' }, secret: { type: 'string', 'x-redact': true } } } },
        },
      },
    );
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    const env = await fx.forge.callTool('login', { user: 'ann', password, keys: [{ id: 'k1', secret: 'nested-secret-1' }] });
    expect(okData(env)).toEqual({
      user: 'ann',
      len: password.length,
      sha: createHash('sha256').update(password).digest('hex'),
      keys: ['k1'],
    });
    expect(fx.manifest(env.meta.run_id as string).input).toEqual({
      user: 'ann',
      password: '<redacted>',
      keys: [{ id: 'k1', secret: '<redacted>' }],
    });
    for (const v of [password, 'nested-secret-1']) {
      expect(filesContaining(fx.home, v)).toEqual([]);
      expect(filesContaining(fx.project, v)).toEqual([]);
    }
  });

  it('x-redact holds for cache hits too: the hit manifest shows <redacted>', async () => {
    const fx = await setup();
    const spec = py(
      'hash_it',
      'import hashlib\nprint(json.dumps({"ok": True, "data": hashlib.sha256(args["pin"].encode()).hexdigest()}))',
      {
        input_schema: { type: 'object', properties: { pin: { type: 'string', 'x-redact': true } } },
        meta: { deterministic: true },
      },
    );
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    await fx.forge.callTool('hash_it', { pin: '918273' });
    const hit = await fx.forge.callTool('hash_it', { pin: '918273' });
    expect(hit.meta.cache).toBe('hit');
    await fx.forge.close();
    expect(fx.manifest(hit.meta.run_id as string).input).toEqual({ pin: '<redacted>' });
    expect(filesContaining(fx.project, '918273')).toEqual([]);
    expect(filesContaining(fx.home, '918273')).toEqual([]);
  });
});
