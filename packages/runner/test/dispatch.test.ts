import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openAuditLog } from '@forge/audit-chain';
import { openFileQueue } from '@forge/queue';
import { scaled, waitFor } from '@forge/test-utils';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { outputDigest } from '../src/auditData.js';
import type { Forge } from '../src/index.js';
import { example, type Fixture, failed, py, runStarted, setup } from './helpers.js';

const sleeper = py('sleeper', 'import time\ntime.sleep(float(args.get("s", 20)))\nprint(json.dumps({"ok": True, "data": "woke"}))', {
  meta: { timeout_ms: 60_000 },
});

/** The sleeper forged through `front`, called, and cancelled by its caller once its run started; the answer. */
async function cancelledOnceRunning(front: Forge) {
  expect((await front.forgeTool(sleeper)).ok).toBe(true);
  const ac = new AbortController();
  const call = front.callTool('sleeper', {}, { signal: ac.signal });
  await runStarted(front.paths.runsDir);
  ac.abort(new Error('the client cancelled the request'));
  return call;
}

/** A front-end (dispatching) and a worker (in this process) over one project's file queue. */
async function frontAndWorker(o: { leaseMs?: number; startWithinMs?: number; cancelGraceMs?: number; worker?: boolean } = {}) {
  const fx = await setup();
  const dir = join(fx.project, '.forge', 'queue');
  const queues = [await openFileQueue(dir, { leaseMs: o.leaseMs ?? 15_000 })];
  const front = await fx.reopen({
    dispatch: {
      queue: queues[0] as (typeof queues)[0],
      ...(o.startWithinMs !== undefined ? { startWithinMs: o.startWithinMs } : {}),
      // A worker that was told to stop records the call through a few syncs of the disk: on a
      // busy machine (the ordinary-user pass of CI, beside that user's load) those took longer
      // than the default 15 s once.
      cancelGraceMs: o.cancelGraceMs ?? scaled(40_000),
    },
  });
  const ac = new AbortController();
  const working: Promise<void>[] = [];
  const claims: { mock: { settledResults: { type: string; value: unknown }[] } }[] = [];
  const startWorker = async (forge?: Forge) => {
    const q = await openFileQueue(dir, { leaseMs: o.leaseMs ?? 15_000 });
    queues.push(q);
    // What the worker finds when it looks for a job: a test can wait for a look that found none.
    claims.push(vi.spyOn(q, 'claim'));
    // As `forge worker` opens it: watching the tool stores.
    const w = forge ?? (await fx.reopen({ watch: true }));
    working.push(w.work({ queue: q, signal: ac.signal, worker: `test-${working.length + 1}` }));
    return w;
  };
  if (o.worker !== false) await startWorker();
  onTestFinished(async () => {
    ac.abort();
    await Promise.all(working);
    for (const q of queues) await q.close();
  });
  /** Whether the last worker started has looked for a job and found none. */
  const lastFoundNothing = () => claims.at(-1)?.mock.settledResults.some((r) => r.type === 'fulfilled' && r.value === undefined) ?? false;
  /** The jobs the last worker started has taken. */
  const lastTook = () =>
    (claims.at(-1)?.mock.settledResults ?? []).filter((r) => r.type === 'fulfilled' && r.value !== undefined).map((r) => r.value);
  return { fx, front, dir, startWorker, lastFoundNothing, lastTook, queue: queues[0] as (typeof queues)[0] };
}

/** `forge.called` entries of one call id. */
function calledOf(fx: Fixture, callId: unknown) {
  return fx.entries('forge.called').filter((e) => e.data.call_id === callId);
}

describe('dispatch: a front-end hands calls to workers through the job queue', () => {
  it('a call is run and recorded by the worker, answered by the front-end, and recorded once', async () => {
    const { fx, front } = await frontAndWorker();
    expect((await front.forgeTool(await example('fib'))).ok).toBe(true);
    const env = await front.callTool('fib', { n: 10 });
    expect(env).toMatchObject({ ok: true, data: { n: 10, fib: '55' }, meta: { sandbox: 'bwrap' } });
    const called = fx.entries('forge.called');
    expect(called).toHaveLength(1);
    expect(called[0]?.data).toMatchObject({ ok: true, name: 'fib', run_id: env.meta.run_id, call_id: expect.stringMatching(/^c/) });
    // The worker wrote the run's manifest; the front-end counted the call.
    expect(fx.manifest(env.meta.run_id as string)).toMatchObject({ ok: true, tool: { name: 'fib' } });
    expect(front.callCount('fib')).toBe(1);
  });

  it('refusals of the front-end (unknown tool, invalid input) never reach the queue', async () => {
    const { fx, front, queue } = await frontAndWorker({ worker: false });
    expect((await front.forgeTool(await example('fib'))).ok).toBe(true);
    failed(await front.callTool('nope', {}), 'unknown_tool');
    failed(await front.callTool('fib', { n: 'x' }), 'validation_failed');
    expect(await queue.stats()).toMatchObject({ pending: 0, claimed: 0, done: 0, failed: 0 });
    expect(fx.entries('forge.called').map((e) => e.data.kind)).toEqual(['unknown_tool', 'validation_failed']);
  });

  it('a deterministic tool is cached by the front-end: the second call is a hit and reaches no worker', async () => {
    const { fx, front, queue } = await frontAndWorker();
    expect((await front.forgeTool(await example('fib'))).ok).toBe(true);
    const first = await front.callTool('fib', { n: 12 });
    const second = await front.callTool('fib', { n: 12 });
    expect(first.meta.cache).toBe('miss');
    expect(second).toMatchObject({ ok: true, meta: { cache: 'hit', seed_run: first.meta.run_id } });
    expect((await queue.stats()).done).toBe(1);
    expect(fx.entries('forge.called').map((e) => e.data.cache)).toEqual(['miss', 'hit']);
  });

  it('a worker’s cache hit, cached by the front-end, is served as the worker’s entry recorded it', async () => {
    const { fx, front, startWorker } = await frontAndWorker({ worker: false });
    expect((await front.forgeTool(await example('fib'))).ok).toBe(true);
    // The worker answers n=14 from its own store: the front-end's store opened before it held it.
    const w = await fx.reopen({ watch: true });
    const seed = await w.callTool('fib', { n: 14 });
    await startWorker(w);
    const viaWorker = await front.callTool('fib', { n: 14 });
    expect(viaWorker).toMatchObject({ ok: true, data: { n: 14, fib: '377' }, meta: { cache: 'hit', seed_run: seed.meta.run_id } });
    expect(fx.entries('forge.called').find((e) => e.data.run_id === viaWorker.meta.run_id)?.data).toMatchObject({
      cache: 'hit',
      run_id: viaWorker.meta.run_id,
      cache_key: expect.stringMatching(/^[0-9a-f]{64}$/),
      output_digest: outputDigest(viaWorker),
    });
    const again = await front.callTool('fib', { n: 14 });
    expect(again).toMatchObject({ ok: true, data: { n: 14, fib: '377' }, meta: { cache: 'hit', seed_run: viaWorker.meta.run_id } });
    expect(fx.entries('forge.cache_mismatch')).toEqual([]);
    expect(fx.sandboxRuns('fib')).toHaveLength(1);
  });

  it('with no worker, a call is withdrawn after startWithinMs: timeout naming the queue, recorded once, and no worker runs it later', async () => {
    const { fx, front, queue, startWorker, lastFoundNothing, lastTook } = await frontAndWorker({ worker: false, startWithinMs: 300 });
    expect((await front.forgeTool(await example('fib'))).ok).toBe(true);
    // The budget's own time (the tool's timeout) is waited for too; a small one keeps this short.
    expect((await front.forgeTool({ ...(await example('fib')), name: 'fib.quick', meta: { timeout_ms: 200 } })).ok).toBe(true);
    const env = await front.callTool('fib.quick', { n: 3 });
    expect(failed(env, 'timeout').message).toMatch(
      /^no worker took the call within 300 ms \(the file job queue at .*: 0 pending, 0 running\); start workers/,
    );
    expect((await queue.stats()).failed).toBe(1);
    await startWorker();
    // The worker has looked at the queue and found nothing to take: the withdrawn call stays withdrawn.
    await waitFor('the worker to look for a job and find none', lastFoundNothing);
    expect(lastTook()).toEqual([]);
    expect(fx.sandboxRuns('fib.quick')).toEqual([]);
    expect(fx.entries('forge.called').map((e) => e.data.kind)).toEqual(['timeout']);
  });

  it('a call withdrawn from the queue by someone else before a worker took it: cancelled, recorded once by the front-end', async () => {
    const { fx, front, dir } = await frontAndWorker({ worker: false });
    expect((await front.forgeTool(await example('fib'))).ok).toBe(true);
    const call = front.callTool('fib', { n: 5 });
    const operator = await openFileQueue(dir);
    onTestFinished(() => operator.close());
    let id: string | undefined;
    await vi.waitFor(
      async () => {
        const names = readdirSync(join(dir, 'pending')).filter((n) => n.endsWith('.req.json'));
        expect(names).toHaveLength(1);
        id = names[0]?.replace(/\.req\.json$/, '');
      },
      { timeout: scaled(5000) },
    );
    expect(await operator.cancel(id as string, 'an operator drained the queue')).toBe('cancelled');
    expect(failed(await call, 'cancelled').message).toBe(
      `the call was withdrawn from the file job queue at ${dir} before a worker took it (an operator drained the queue); the tool did not run`,
    );
    expect(fx.entries('forge.called').map((e) => e.data.kind)).toEqual(['cancelled']);
    expect(fx.sandboxRuns('fib')).toEqual([]);
  });

  it("cancelling a running call reaches the worker's sandbox: cancelled, recorded once by the worker", async () => {
    const { fx, front } = await frontAndWorker();
    const env = await cancelledOnceRunning(front);
    expect(failed(env, 'cancelled').message).toBe('the client cancelled the request; the tool was killed');
    const called = fx.entries('forge.called');
    expect(called).toHaveLength(1);
    expect(called[0]?.data).toMatchObject({ kind: 'cancelled', call_id: expect.any(String), exit: 'signal' });
  });

  it('a worker that has not stopped within the cancel grace: the caller is answered cancelled, saying so, and the worker still records the call once', async () => {
    const { fx, front } = await frontAndWorker({ cancelGraceMs: 1 });
    const env = await cancelledOnceRunning(front);
    expect(failed(env, 'cancelled').message).toMatch(
      /^the client cancelled the request; the worker running it was told to stop and has not finished it within 1 ms; it records the call when it does \(call_id \S+\)$/,
    );
    expect(fx.entries('dispatch.unanswered')).toMatchObject([{ data: { kind: 'cancelled' } }]);
    await waitFor('the worker to record the call it stopped', () => fx.entries('forge.called').length > 0 || undefined);
    expect(fx.entries('forge.called')).toMatchObject([{ data: { kind: 'cancelled', exit: 'signal' } }]);
  });

  it('a worker checks the job itself: a tool changed since the front-end resolved it, or a caller its ACL refuses, is refused and recorded there', async () => {
    const { fx, front, queue } = await frontAndWorker();
    expect((await front.forgeTool(await example('fib'))).ok).toBe(true);
    const stored = (await front.listTools()).find((t) => t.tool.name === 'fib')?.tool;
    const job = {
      v: 1,
      name: 'fib',
      digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000000',
      version: stored?.version ?? 1,
      scope: 'project',
      input: { n: 3 },
      persona: 'default',
      session: 's-test',
      acl: null,
      from: 'a test',
    };
    await queue.publish({ id: 'hostile-digest', payload: job });
    await queue.publish({ id: 'hostile-acl', payload: { ...job, digest: stored?.digest ?? '', acl: ['other.*'] } });
    await queue.publish({ id: 'hostile-shape', payload: { v: 1, name: 'fib' } });
    const answers = await Promise.all(
      ['hostile-digest', 'hostile-acl', 'hostile-shape'].map((id) => queue.wait(id, { timeoutMs: scaled(20_000) })),
    );
    const envs = answers.map(
      (a) => (a?.payload as { envelope?: { ok: boolean; error?: { kind: string; message: string } } } | undefined)?.envelope,
    );
    expect(envs[0]?.error).toMatchObject({
      kind: 'internal',
      message: expect.stringContaining('changed between the front-end and this worker'),
    });
    expect(envs[1]?.error).toMatchObject({ kind: 'acl.persona_denied' });
    expect(envs[2]?.error).toMatchObject({
      kind: 'internal',
      message: expect.stringContaining('is not a call job: "digest" is not a non-empty string'),
    });
    expect(fx.sandboxRuns('fib')).toEqual([]);
    expect(calledOf(fx, 'hostile-digest')).toHaveLength(1);
    expect(fx.entries('acl.persona_denied').filter((e) => e.data.call_id === 'hostile-acl')).toHaveLength(1);
    expect(fx.entries('dispatch.job_invalid').map((e) => e.data.call_id)).toEqual(['hostile-shape']);
  });

  it('a job delivered again after its worker noted its entries is finished from the note: the missing entries appended once, nothing run again', async () => {
    const { fx, front, dir, queue, startWorker } = await frontAndWorker({ worker: false, leaseMs: 600 });
    expect((await front.forgeTool(await example('fib'))).ok).toBe(true);
    const answer = { ok: true, data: { n: 1, fib: 1 }, meta: { run_id: 'r-noted', cache: 'off' } };
    const entry = (id: string) => ({ type: 'forge.called', data: { ok: true, name: 'fib', run_id: 'r-noted', call_id: id } });
    const log = await openAuditLog(front.paths.auditLog);
    const head = await log.head();
    // A worker that claims two jobs, notes them, and is lost (its queue closed: no lease renewed).
    const ghost = await openFileQueue(dir, { leaseMs: 600 });
    // Lost before its append: the entry is appended from the note.
    await queue.publish({ id: 'noted-missing', payload: { v: 1 } });
    const a = await ghost.claim('lost-worker');
    await ghost.note(a as NonNullable<typeof a>, { v: 1, head: head.seq, entries: [entry('noted-missing')], answer, outcome: 'success' });
    // Lost after its append: nothing is appended again.
    await queue.publish({ id: 'noted-present', payload: { v: 1 } });
    const b = await ghost.claim('lost-worker');
    await ghost.note(b as NonNullable<typeof b>, { v: 1, head: head.seq, entries: [entry('noted-present')], answer, outcome: 'success' });
    await ghost.close();
    await log.append('forge.called', entry('noted-present').data);
    await log.close();
    await startWorker();
    const results = await Promise.all(['noted-missing', 'noted-present'].map((id) => queue.wait(id, { timeoutMs: scaled(20_000) })));
    for (const r of results) expect(r).toMatchObject({ status: 'done', attempt: 2, payload: { envelope: answer, outcome: 'success' } });
    expect(calledOf(fx, 'noted-missing')).toHaveLength(1);
    expect(calledOf(fx, 'noted-present')).toHaveLength(1);
    expect(fx.sandboxRuns('fib')).toEqual([]);
  });
});

describe('dispatch: a worker whose queue fails for a moment', () => {
  it('takes jobs again a second later instead of exiting, and the call is answered', async () => {
    const { fx, front, dir } = await frontAndWorker({ worker: false });
    expect((await front.forgeTool(await example('fib'))).ok).toBe(true);
    const real = await openFileQueue(dir);
    onTestFinished(() => real.close());
    let failures = 0;
    // The real queue, but its first next() fails as a lost connection would.
    const flakyNext: typeof real.next = (...a) => {
      if (failures++ === 0) return Promise.reject(new Error('connection reset by peer'));
      return real.next(...a);
    };
    const flaky = new Proxy(real, {
      get: (t, k) => {
        if (k === 'next') return flakyNext;
        const v = Reflect.get(t, k);
        return typeof v === 'function' ? v.bind(t) : v;
      },
    });
    const worker = await fx.reopen({ watch: true });
    const stop = new AbortController();
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on('warning', onWarning);
    onTestFinished(() => void process.off('warning', onWarning));
    const working = worker.work({ queue: flaky, signal: stop.signal, worker: 'flaky-1' });
    onTestFinished(async () => {
      stop.abort();
      await working;
    });
    expect(await front.callTool('fib', { n: 7 })).toMatchObject({ ok: true, data: { fib: '13' } });
    expect(failures).toBeGreaterThanOrEqual(2);
    expect(warnings.some((m) => m.includes('taking a job from') && m.includes('connection reset by peer; trying again in 1 s'))).toBe(true);
    expect(fx.entries('forge.called')).toHaveLength(1);
  });
});

describe('dispatch: a worker killed mid-call', () => {
  it('the call is delivered again to another worker and answered; the log holds one forge.called for it', async () => {
    const { fx, front, dir, startWorker } = await frontAndWorker({ worker: false, leaseMs: 1_000 });
    expect((await front.forgeTool(sleeper)).ok).toBe(true);
    const child = spawnWorker(fx, dir, 1_000);
    const call = front.callTool('sleeper', { s: 1.5 });
    await runStarted(front.paths.runsDir);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    await startWorker();
    const env = await call;
    expect(env).toMatchObject({ ok: true, data: 'woke' });
    const called = fx.entries('forge.called');
    expect(called).toHaveLength(1);
    expect(called[0]?.data).toMatchObject({ ok: true, run_id: env.meta.run_id });
  });
});

/** A worker in a child process (so it can be killed -9) over the fixture's home, project and queue. */
function spawnWorker(fx: Fixture, dir: string, leaseMs: number): ChildProcess {
  const script = fileURLToPath(new URL('./fixtures/worker-child.mjs', import.meta.url));
  const child = spawn(process.execPath, [script, fx.home, fx.project, dir, String(leaseMs)], { stdio: ['ignore', 'inherit', 'inherit'] });
  onTestFinished(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return child;
}
