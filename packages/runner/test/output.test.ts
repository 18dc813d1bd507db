import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { scaled } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { failed, okData, py, RECEIPT, setup } from './helpers.js';

describe('what a run can end with', () => {
  it('timeout: a tool sleeping past timeout_ms is killed, and the run is recorded', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(py('sleeper', 'import time\ntime.sleep(10)', { meta: { timeout_ms: 300 } }))).ok).toBe(true);
    const env = await fx.forge.callTool('sleeper', {});
    expect(failed(env, 'timeout').message).toContain('300 ms');
    expect(env.meta).toMatchObject({ run_id: expect.any(String), cache: 'off', sandbox: 'bwrap' });
    expect(fx.manifest(env.meta.run_id as string)).toMatchObject({
      ok: false,
      error_kind: 'timeout',
      exit: { reason: 'timeout' },
      limits: { timeout_ms: 300 },
    });
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ ok: false, kind: 'timeout', exit: 'timeout', run_id: env.meta.run_id });
  });

  it('resource_limit: stdout over output_cap is cut at the cap, with exact counts and every byte kept', async () => {
    const fx = await setup();
    // 5120 bytes: every byte value 20 times (not UTF-8, not JSON).
    const spec = py('chatty', 'sys.stdout.buffer.write(bytes(range(256)) * 20)', { meta: { output_cap: 1024 } });
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    const env = await fx.forge.callTool('chatty', {});
    const err = failed(env, 'resource_limit');
    const runDir = fx.runDir(env.meta.run_id as string);
    const full = join(runDir, 'artifacts', 'full_stdout.bin');
    expect(env.meta).toMatchObject({
      stdout_truncated: true,
      stdout_truncated_at_bytes: 1024,
      stdout_total_bytes: 5120,
      stdout_full_artifact: full,
    });
    expect(err.message).toContain('printed 5120 bytes, over its output cap of 1024');
    expect(readFileSync(full).equals(Buffer.concat(Array(20).fill(Buffer.from(Array.from({ length: 256 }, (_, i) => i)))))).toBe(true);
    expect(fx.manifest(env.meta.run_id as string)).toMatchObject({
      ok: false,
      error_kind: 'resource_limit',
      stdout_bytes: 5120,
      limits: { output_cap: 1024 },
      artifacts: [{ path: 'full_stdout.bin', bytes: 5120, kind: 'file' }],
    });
    expect(existsSync(join(runDir, 'stdout.partial'))).toBe(false);
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ ok: false, kind: 'resource_limit' });
  });

  it('resource_limit: a valid envelope over the cap is still cut (the cap is on bytes, not on validity)', async () => {
    const fx = await setup();
    const spec = py('big_ok', 'print(json.dumps({"ok": True, "data": "x" * 3000}))', { meta: { output_cap: 2000 } });
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    const env = await fx.forge.callTool('big_ok', {});
    failed(env, 'resource_limit');
    const printed = `${JSON.stringify({ ok: true, data: 'x'.repeat(3000) })
      .replace(/,/g, ', ')
      .replace(/:/g, ': ')}\n`;
    expect(env.meta).toMatchObject({ stdout_truncated_at_bytes: 2000, stdout_total_bytes: Buffer.byteLength(printed) });
    expect(readFileSync(env.meta.stdout_full_artifact as string, 'utf8')).toBe(printed);
  });

  it('resource_limit: a CPU-bound tool hits cpu_s', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(py('spin', 'while True:\n  pass', { meta: { cpu_s: 1, timeout_ms: scaled(20_000) } }))).ok).toBe(true);
    const env = await fx.forge.callTool('spin', {});
    expect(failed(env, 'resource_limit').limit).toBe('cpu');
    expect(fx.manifest(env.meta.run_id as string)).toMatchObject({ exit: { reason: 'cpu' }, limits: { cpu_s: 1 } });
  });

  it('output_invalid: non-JSON stdout fails, and its exact bytes are kept as artifacts/stdout.bin', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(py('chatter', 'sys.stdout.write("hello, not json\\n")\nsys.stderr.write("a warning\\n")'))).ok).toBe(
      true,
    );
    const env = await fx.forge.callTool('chatter', {});
    const err = failed(env, 'output_invalid');
    const kept = join(fx.runDir(env.meta.run_id as string), 'artifacts', 'stdout.bin');
    expect(err.message).toContain(kept);
    expect(err.message).toContain('exited with code 0');
    expect(err.message).toContain('a warning');
    expect(readFileSync(kept, 'utf8')).toBe('hello, not json\n');
    expect(fx.manifest(env.meta.run_id as string)).toMatchObject({
      ok: false,
      error_kind: 'output_invalid',
      stderr_tail: 'a warning\n',
      artifacts: [{ path: 'stdout.bin', bytes: 16, kind: 'file' }],
    });
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ ok: false, kind: 'output_invalid' });
  });

  it('output_invalid: nothing printed, a crash with a traceback, and a JSON value that is not an envelope', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(py('silent', 'pass'))).ok).toBe(true);
    expect((await fx.forge.forgeTool(py('crash', 'raise SystemExit(3)'))).ok).toBe(true);
    expect((await fx.forge.forgeTool(py('boom', '1/0'))).ok).toBe(true);
    expect((await fx.forge.forgeTool(py('bare', 'print(json.dumps([1, 2]))'))).ok).toBe(true);
    expect((await fx.forge.forgeTool(py('no_data', 'print(json.dumps({"ok": True}))'))).ok).toBe(true);
    expect(failed(await fx.forge.callTool('silent', {}), 'output_invalid').message).toContain('printed nothing');
    expect(failed(await fx.forge.callTool('crash', {}), 'output_invalid').message).toContain('exited with code 3');
    expect(failed(await fx.forge.callTool('boom', {}), 'output_invalid').message).toContain('ZeroDivisionError');
    expect(failed(await fx.forge.callTool('bare', {}), 'output_invalid').message).toContain('must be a JSON object');
    expect(failed(await fx.forge.callTool('no_data', {}), 'output_invalid').message).toContain('"data"');
  });

  it('output_schema_failed: data that does not match output_schema never reaches the caller', async () => {
    const fx = await setup();
    const spec = py('typed', 'print(json.dumps({"ok": True, "data": {"count": "three"}}))', {
      output_schema: { type: 'object', properties: { count: { type: 'integer' } }, required: ['count'] },
    });
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    const env = await fx.forge.callTool('typed', {});
    const err = failed(env, 'output_schema_failed');
    expect(err.problems).toEqual([{ path: 'output/count', message: 'must be integer' }]);
    expect(JSON.stringify(env)).not.toContain('three');
    expect(fx.manifest(env.meta.run_id as string)).toMatchObject({ ok: false, error_kind: 'output_schema_failed' });
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ ok: false, kind: 'output_schema_failed' });
  });

  it("a tool's ok:false keeps its own kind, extra fields and meta; forge's meta fields win over the tool's", async () => {
    const fx = await setup();
    const spec = py(
      'picky',
      'print(json.dumps({"ok": False, "error": {"kind": "quota_exceeded", "message": "too many", "limit": 3}, "meta": {"run_id": "fake", "cache": "hit", "sandbox": "none", "note": "mine"}}))',
    );
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    const env = await fx.forge.callTool('picky', {});
    expect(env).toEqual({
      ok: false,
      error: { kind: 'quota_exceeded', message: 'too many', limit: 3 },
      meta: {
        note: 'mine',
        run_id: expect.not.stringMatching(/^fake$/),
        cache: 'off',
        sandbox: 'bwrap',
        duration_ms: expect.any(Number),
        audit: RECEIPT,
      },
    });
    expect(fx.manifest(env.meta.run_id as string)).toMatchObject({ ok: false, error_kind: 'quota_exceeded' });
  });

  it('policy_clamped: a budget request above the ceiling is lowered, and the call reports it', async () => {
    const fx = await setup({ workspacePolicy: { budgets: { ceilings: { timeout_ms: 400 } } } });
    const spec = py('lazy', 'import time\ntime.sleep(3)\nprint(json.dumps({"ok": True, "data": 1}))', { meta: { timeout_ms: 60000 } });
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    const env = await fx.forge.callTool('lazy', {});
    failed(env, 'timeout');
    const clamped = [{ field: 'timeout_ms', requested: 60000, applied: 400 }];
    expect(env.meta.policy_clamped).toEqual(clamped);
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ policy_clamped: clamped });
    expect(fx.manifest(env.meta.run_id as string)).toMatchObject({ limits: { timeout_ms: 400, clamped } });
  });

  it('a tool within its budgets reports no clamping', async () => {
    const fx = await setup();
    expect(
      (await fx.forge.forgeTool(py('quick', 'print(json.dumps({"ok": True, "data": None}))', { meta: { timeout_ms: scaled(2000) } }))).ok,
    ).toBe(true);
    const env = await fx.forge.callTool('quick', {});
    expect(okData(env)).toBeNull();
    expect(env.meta.policy_clamped).toBeUndefined();
  });
});
