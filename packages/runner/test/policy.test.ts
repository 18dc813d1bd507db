import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { scaled } from '@forge/test-utils';
import { describe, expect, it, vi } from 'vitest';
import { example, failed, fakeClock, okData, py, runStarted, setup, writeAtomic } from './helpers.js';

const policyFile = (fx: { project: string }) => join(fx.project, '.forge', 'policy.json');

describe('policy hot reload mid-session', () => {
  it('forbidding a name after the tool was forged blocks the next call; lifting it lets calls through again', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('word_count'), { session: 's' })).ok).toBe(true);
    okData(await fx.forge.callTool('word_count', { text: 'a' }, { session: 's' }));
    writeAtomic(policyFile(fx), JSON.stringify({ forbidden_tool_names: ['word_*'] }));
    const env = await fx.forge.callTool('word_count', { text: 'a' }, { session: 's' });
    expect(failed(env, 'name_forbidden').message).toContain('"word_*"');
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ ok: false, kind: 'name_forbidden', name: 'word_count' });
    expect(fx.entries('policy.reloaded').at(-1)?.data).toMatchObject({ initial: false, changed: ['forbidden_tool_names'] });
    expect(fx.sandboxRuns('word_count')).toHaveLength(1);
    writeAtomic(policyFile(fx), JSON.stringify({}));
    okData(await fx.forge.callTool('word_count', { text: 'a' }, { session: 's' }));
  });

  it('user and workspace policies merge: both forbidden lists apply', async () => {
    const fx = await setup({ userPolicy: { forbidden_tool_names: ['user_*'] }, workspacePolicy: { forbidden_tool_names: ['ws_*'] } });
    const fib = await example('fib');
    expect(await fx.forge.forgeTool({ ...fib, name: 'user_fib' })).toMatchObject({ ok: false, kind: 'name_forbidden' });
    expect(await fx.forge.forgeTool({ ...fib, name: 'ws_fib' })).toMatchObject({ ok: false, kind: 'name_forbidden' });
    expect(await fx.forge.forgeTool({ ...fib, name: 'any_fib' })).toMatchObject({ ok: true });
  });

  it('tightening per_tool_rpm applies at once, and loosening it keeps the bucket’s state', async () => {
    const clock = fakeClock();
    const fx = await setup({ forge: { now: clock.now } });
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    for (let i = 0; i < 3; i++) okData(await fx.forge.callTool('fib', { n: 8 }));
    writeAtomic(policyFile(fx), JSON.stringify({ breakers: { per_tool_rpm: 2 } }));
    okData(await fx.forge.callTool('fib', { n: 8 }));
    okData(await fx.forge.callTool('fib', { n: 8 }));
    const env = await fx.forge.callTool('fib', { n: 8 });
    expect(failed(env, 'breaker_open').message).toContain('more than 2 times in a minute');
    writeAtomic(policyFile(fx), JSON.stringify({ breakers: { per_tool_rpm: 60 } }));
    // The emptied bucket is not refilled by the reload, only by time: 1 s at 60 rpm is one token.
    failed(await fx.forge.callTool('fib', { n: 8 }), 'breaker_open');
    clock.advance(1000);
    okData(await fx.forge.callTool('fib', { n: 8 }));
  });

  it('a malformed edit keeps the last good policy and audits policy.reload_failed; fixing it reloads', async () => {
    const fx = await setup({ workspacePolicy: { forbidden_tool_names: ['blocked_*'] } });
    const fib = await example('fib');
    writeAtomic(policyFile(fx), '{"forbidden_tool_names": [\n');
    expect(await fx.forge.forgeTool({ ...fib, name: 'blocked_fib' })).toMatchObject({ ok: false, kind: 'name_forbidden' });
    expect(fx.entries('policy.reload_failed').map((e) => e.data)).toEqual([
      expect.objectContaining({ type: 'policy.reload_failed', file: policyFile(fx), kept: 'last_good', line: expect.any(Number) }),
    ]);
    // A schema-invalid edit is refused the same way, naming the JSON pointer.
    writeAtomic(policyFile(fx), JSON.stringify({ forbidden_tool_names: [], breakers: { per_tool_rpm: '30' } }));
    expect(await fx.forge.forgeTool({ ...fib, name: 'blocked_fib' })).toMatchObject({ ok: false, kind: 'name_forbidden' });
    expect(fx.entries('policy.reload_failed').at(-1)?.data).toMatchObject({ pointer: '/breakers/per_tool_rpm', kept: 'last_good' });
    writeAtomic(policyFile(fx), JSON.stringify({}));
    expect(await fx.forge.forgeTool({ ...fib, name: 'blocked_fib' })).toMatchObject({ ok: true });
    expect(fx.entries('policy.reloaded').at(-1)?.data).toMatchObject({ initial: false, changed: ['forbidden_tool_names'] });
  });

  it('a policy that is bad from the start refuses every forge and call (fail closed) until fixed', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const f = await (async () => {
      writeFileSync(policyFile(fx), '{oops');
      return fx.reopen();
    })();
    expect(await f.forgeTool({ ...(await example('fib')), name: 'fib2' })).toMatchObject({ ok: false, kind: 'policy_denied' });
    expect(failed(await f.callTool('fib', { n: 1 }), 'policy_denied').message).toContain('no policy is in force');
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ ok: false, kind: 'policy_denied' });
    expect(fx.entries('policy.reload_failed').at(-1)?.data).toMatchObject({ file: policyFile(fx), kept: 'nothing' });
    writeAtomic(policyFile(fx), '{}');
    okData(await f.callTool('fib', { n: 1 }));
  });

  it('bind_roots added mid-session let a path outside the project be bound', async () => {
    const fx = await setup();
    const spec = py('reader', 'print(json.dumps({"ok": True, "data": open(args["path"]).read()}))', {
      input_schema: { type: 'object', properties: { path: { type: 'string', 'x-bind': 'ro' } } },
    });
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    mkdirSync(join(fx.root, 'datasets'));
    const path = join(fx.root, 'datasets', 'a.txt');
    writeFileSync(path, 'data');
    failed(await fx.forge.callTool('reader', { path }), 'bind_denied');
    writeAtomic(policyFile(fx), JSON.stringify({ bind_roots: [join(fx.root, 'datasets')] }));
    expect(okData(await fx.forge.callTool('reader', { path }))).toBe('data');
  });

  it('a runtime removed from runtimes.allow after forging is refused at call time', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('word_count'))).ok).toBe(true);
    writeAtomic(policyFile(fx), JSON.stringify({ runtimes: { allow: ['python3', 'bash'] } }));
    expect(failed(await fx.forge.callTool('word_count', { text: 'x' }), 'policy_denied').message).toContain('runtime "node"');
  });

  it('a call in flight keeps the snapshot it started with', async () => {
    const fx = await setup();
    expect(
      (await fx.forge.forgeTool(py('slowpoke', 'import time\ntime.sleep(0.6)\nprint(json.dumps({"ok": True, "data": "done"}))'))).ok,
    ).toBe(true);
    const inFlight = fx.forge.callTool('slowpoke', {});
    await runStarted(fx.forge.paths.runsDir);
    writeAtomic(policyFile(fx), JSON.stringify({ forbidden_tool_names: ['slow*'] }));
    expect(okData(await inFlight)).toBe('done');
    failed(await fx.forge.callTool('slowpoke', {}), 'name_forbidden');
  });
});

describe('breakers over the pipeline', () => {
  const hanger = () =>
    // Long enough that a good call finishes within it on a loaded machine; a hanging one waits it out.
    py('hanger', 'import time\nif args["hang"]:\n  time.sleep(600)\nprint(json.dumps({"ok": True, "data": "fine"}))', {
      input_schema: { type: 'object', properties: { hang: { type: 'boolean' } }, required: ['hang'] },
      meta: { timeout_ms: scaled(3000) },
    });

  it('per_tool_rpm: the call past the rate is refused with when to retry; time refills the bucket', async () => {
    const clock = fakeClock();
    const fx = await setup({ workspacePolicy: { breakers: { per_tool_rpm: 3 } }, forge: { now: clock.now } });
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    for (let i = 0; i < 3; i++) okData(await fx.forge.callTool('fib', { n: 2 }, { session: 'r' }));
    const env = await fx.forge.callTool('fib', { n: 2 }, { session: 'r' });
    expect(failed(env, 'breaker_open').message).toContain('retry in 20 s');
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ ok: false, kind: 'breaker_open', retry_after_ms: 20_000 });
    expect(fx.entries('breaker.open').map((e) => e.data)).toEqual([
      expect.objectContaining({ breaker: 'rate', name: 'fib', session: 'r', reason: 'more than 3 calls in a minute' }),
    ]);
    // Another session has its own bucket.
    okData(await fx.forge.callTool('fib', { n: 2 }, { session: 'other' }));
    clock.advance(20_000);
    okData(await fx.forge.callTool('fib', { n: 2 }, { session: 'r' }));
    await vi.waitFor(
      () =>
        expect(fx.entries('breaker.closed').map((e) => e.data)).toEqual([
          expect.objectContaining({ breaker: 'rate', name: 'fib', session: 'r' }),
        ]),
      { timeout: scaled(5000) },
    );
  });

  it('failure_threshold 2: two timeouts open the circuit (validation errors do not count); after the cool-down a good trial closes it', async () => {
    const clock = fakeClock();
    const fx = await setup({ workspacePolicy: { breakers: { failure_threshold: 2, cooldown_s: 30 } }, forge: { now: clock.now } });
    expect((await fx.forge.forgeTool(hanger())).ok).toBe(true);
    failed(await fx.forge.callTool('hanger', { hang: true }), 'timeout');
    failed(await fx.forge.callTool('hanger', { hang: 'yes' }), 'validation_failed');
    failed(await fx.forge.callTool('hanger', {}), 'validation_failed');
    failed(await fx.forge.callTool('hanger', { hang: true }), 'timeout');
    const refused = await fx.forge.callTool('hanger', { hang: false });
    expect(failed(refused, 'breaker_open').message).toContain('failed 2 times in a row');
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ kind: 'breaker_open', retry_after_ms: 30_000 });
    await vi.waitFor(
      () =>
        expect(fx.entries('breaker.open').map((e) => e.data)).toEqual([
          expect.objectContaining({ breaker: 'failure', name: 'hanger', reason: '2 consecutive failures', session: expect.any(String) }),
        ]),
      { timeout: scaled(5000) },
    );
    expect(fx.sandboxRuns('hanger')).toHaveLength(2);
    clock.advance(30_000);
    expect(okData(await fx.forge.callTool('hanger', { hang: false }))).toBe('fine');
    // Breaker events are appended as the call settles: wait for the write, not for time.
    await vi.waitFor(
      () =>
        expect(fx.entries('breaker.closed').map((e) => e.data)).toEqual([expect.objectContaining({ breaker: 'failure', name: 'hanger' })]),
      { timeout: scaled(5000) },
    );
  });

  it('a failed trial after the cool-down opens the circuit again at once', async () => {
    const clock = fakeClock();
    const fx = await setup({ workspacePolicy: { breakers: { failure_threshold: 1, cooldown_s: 10 } }, forge: { now: clock.now } });
    expect((await fx.forge.forgeTool(hanger())).ok).toBe(true);
    failed(await fx.forge.callTool('hanger', { hang: true }), 'timeout');
    failed(await fx.forge.callTool('hanger', { hang: false }), 'breaker_open');
    clock.advance(10_000);
    failed(await fx.forge.callTool('hanger', { hang: true }), 'timeout');
    failed(await fx.forge.callTool('hanger', { hang: false }), 'breaker_open');
    await vi.waitFor(
      () =>
        expect(fx.entries('breaker.open').map((e) => e.data.reason)).toEqual([
          '1 consecutive failures',
          'the trial call after the cool-down failed',
        ]),
      { timeout: scaled(5000) },
    );
  });

  it('crashes count as failures; a tool’s own ok:false does not; circuits are per session', async () => {
    const fx = await setup({ workspacePolicy: { breakers: { failure_threshold: 2 } } });
    const spec = py(
      'moody',
      'if args["mode"] == "crash":\n  raise SystemExit(1)\nprint(json.dumps({"ok": False, "error": {"kind": "nope", "message": "declined"}}))',
    );
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    for (let i = 0; i < 3; i++) failed(await fx.forge.callTool('moody', { mode: 'decline' }, { session: 'a' }), 'nope');
    failed(await fx.forge.callTool('moody', { mode: 'crash' }, { session: 'a' }), 'output_invalid');
    failed(await fx.forge.callTool('moody', { mode: 'crash' }, { session: 'a' }), 'output_invalid');
    failed(await fx.forge.callTool('moody', { mode: 'decline' }, { session: 'a' }), 'breaker_open');
    failed(await fx.forge.callTool('moody', { mode: 'decline' }, { session: 'b' }), 'nope');
  });

  it('failure_threshold lowered by a reload applies to the failures already counted (no state lost)', async () => {
    const fx = await setup({ workspacePolicy: { breakers: { failure_threshold: 3 } } });
    expect((await fx.forge.forgeTool(hanger())).ok).toBe(true);
    failed(await fx.forge.callTool('hanger', { hang: true }), 'timeout');
    failed(await fx.forge.callTool('hanger', { hang: true }), 'timeout');
    writeAtomic(policyFile(fx), JSON.stringify({ breakers: { failure_threshold: 2 } }));
    failed(await fx.forge.callTool('hanger', { hang: true }), 'timeout');
    failed(await fx.forge.callTool('hanger', { hang: false }), 'breaker_open');
  });
});
