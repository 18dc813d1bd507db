import { describe, expect, it } from 'vitest';
import { example, failed, py, runStarted, setup } from './helpers.js';

const sleeper = py('sleeper', 'import time\ntime.sleep(20)\nprint(json.dumps({"ok": True, "data": "woke"}))', {
  meta: { timeout_ms: 60_000 },
});

describe('cancelled calls', () => {
  it('close() past its grace period kills the call: cancelled, saying why, audited with its run', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(sleeper)).ok).toBe(true);
    const call = fx.forge.callTool('sleeper', {});
    await runStarted(fx.forge.paths.runsDir);
    await fx.forge.close({ graceMs: 300 });
    const env = await call;
    expect(failed(env, 'cancelled').message).toBe('forge is shutting down and the grace period of 300 ms ended; the tool was killed');
    expect(fx.manifest(env.meta.run_id as string)).toMatchObject({ ok: false, error_kind: 'cancelled', exit: { reason: 'signal' } });
    expect(fx.entries('forge.called').map((e) => e.data)).toEqual([
      expect.objectContaining({ ok: false, kind: 'cancelled', run_id: env.meta.run_id, exit: 'signal' }),
    ]);
  });

  it('an aborted signal kills the call; its reason is the answer', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(sleeper)).ok).toBe(true);
    const ac = new AbortController();
    const call = fx.forge.callTool('sleeper', {}, { signal: ac.signal });
    await runStarted(fx.forge.paths.runsDir);
    ac.abort(new Error('forge is shutting down (SIGTERM) and the grace period of 1000 ms ended'));
    expect(failed(await call, 'cancelled').message).toBe(
      'forge is shutting down (SIGTERM) and the grace period of 1000 ms ended; the tool was killed',
    );
    // An abort without a reason says only that the call was cancelled.
    const plain = new AbortController();
    const second = fx.forge.callTool('sleeper', { again: true }, { signal: plain.signal });
    await runStarted(fx.forge.paths.runsDir, 2);
    plain.abort();
    expect(failed(await second, 'cancelled').message).toBe('the call was cancelled; the tool was killed');
    expect(fx.entries('forge.called').map((e) => e.data.kind)).toEqual(['cancelled', 'cancelled']);
  });

  it('a call, forge, promote or remove whose signal is already aborted is refused before it runs, and audited', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const signal = AbortSignal.abort(new Error('forge is shutting down (SIGINT) and takes no new calls'));
    expect(failed(await fx.forge.callTool('fib', { n: 3 }, { signal }), 'cancelled').message).toBe(
      'forge is shutting down (SIGINT) and takes no new calls; the tool did not run',
    );
    expect(await fx.forge.forgeTool({ ...(await example('fib')), name: 'fib2' }, { signal })).toMatchObject({
      ok: false,
      kind: 'cancelled',
      message: 'forge is shutting down (SIGINT) and takes no new calls; nothing was forged',
    });
    expect(await fx.forge.promoteTool('fib', { signal })).toMatchObject({ ok: false, kind: 'cancelled' });
    expect(await fx.forge.removeTool('fib', { signal })).toMatchObject({ ok: false, kind: 'cancelled' });
    expect(fx.sandboxRuns('fib')).toEqual([]);
    const entries = fx.audit().filter((e) => e.type.startsWith('forge.'));
    expect(entries.map((e) => [e.type, e.data.ok, e.data.kind])).toEqual([
      ['forge.created', true, undefined],
      ['forge.called', false, 'cancelled'],
      ['forge.created', false, 'cancelled'],
      ['forge.promoted', false, 'cancelled'],
      ['forge.removed', false, 'cancelled'],
    ]);
  });
});
