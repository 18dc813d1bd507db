/**
 * The job queue conformance suite: one set of tests every JobQueue implementation passes (the file
 * queue in test/queue-file.test.ts, the PostgreSQL queue in @forge/postgres). Behaviour, many
 * processes, kill -9 at each named step of the implementation, and bad input. Real child processes
 * (queue-child.mjs) do the concurrent and the crashing work.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ClaimedJob, JobQueue, JsonValue, QueueOptions } from '@forge/queue';
import { afterEach, beforeEach, describe, expect, it, onTestFinished } from 'vitest';
import { tempDir } from './temp.js';
import { until } from './until.js';

/** The operations whose named steps an implementation lists for the crash tests. */
export const QUEUE_CRASH_OPERATIONS = ['publish', 'claim', 'lease', 'renew', 'note', 'finish', 'recover'] as const;
export type QueueCrashOperation = (typeof QUEUE_CRASH_OPERATIONS)[number];

/** What the suite needs from one implementation; a fresh one (a fresh, empty queue) per test. */
export interface JobQueueFactory {
  /** Opens the queue (every call reaches the same queue). */
  open(options?: QueueOptions): Promise<JobQueue>;
  /**
   * How a child process opens the same queue: `module`'s export `export` is called as
   * `open(spec, options)`. It must arm the implementation's crash hook from the environment:
   * FORGE_QUEUE_CRASH_AT (a step of `crashSteps`) and FORGE_QUEUE_CRASH_SKIP (hits let through first),
   * and kill its own process with SIGKILL right after that step.
   */
  child: { module: string; export: string; spec: unknown };
  /** The implementation's named steps of each operation (each must be reached by the suite's scenario). */
  crashSteps: Record<QueueCrashOperation, readonly string[]>;
  /** The states job `id` is in, in the implementation's own names (the suite checks that there is at most one). */
  statesOf?(id: string): Promise<string[]>;
  /**
   * Whether what the child process `pid` held in the store is let go, once it was killed: a
   * database notices a dead client's connection, and rolls back its transaction (releasing its
   * row locks), only when its session is next scheduled, which a busy machine can delay. Until
   * then a recover or claim rightly passes over the rows it locked. Without it: at once.
   */
  releasedBy?(pid: number): Promise<boolean>;
  cleanup(): Promise<void>;
}

const FAR = 10 * 60_000;

interface ChildRun {
  child: ChildProcess;
  lines: Record<string, JsonValue>[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr(): string;
}

function startChild(
  f: JobQueueFactory,
  action: string,
  args: string[],
  options: QueueOptions = {},
  env: Record<string, string> = {},
): ChildRun {
  const driver = new URL('./queue-child.mjs', import.meta.url).pathname;
  const argv = [driver, f.child.module, f.child.export, JSON.stringify(f.child.spec), JSON.stringify(options), action, ...args];
  const child = spawn(process.execPath, argv, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  const lines: Record<string, JsonValue>[] = [];
  let out = '';
  let err = '';
  child.stdout?.setEncoding('utf8');
  child.stdout?.on('data', (s: string) => {
    out += s;
    for (let nl = out.indexOf('\n'); nl >= 0; nl = out.indexOf('\n')) {
      lines.push(JSON.parse(out.slice(0, nl)));
      out = out.slice(nl + 1);
    }
  });
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (s: string) => {
    err += s;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal }));
  });
  onTestFinished(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  return { child, lines, exited, stderr: () => err };
}

function aborted(signal: AbortSignal): Promise<unknown> {
  if (signal.aborted) return Promise.resolve(signal.reason);
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(signal.reason), { once: true }));
}

/**
 * What every topic of the suite shares: the current test's implementation (a fresh one per test)
 * and the queues opened in it, closed when the test ends.
 */
class QueueSuite {
  f!: JobQueueFactory;
  private readonly opened: JobQueue[] = [];

  constructor(private readonly makeFactory: () => Promise<JobQueueFactory>) {}

  /** Opens the current implementation's queue (closed when the test ends). */
  readonly open = async (options?: QueueOptions): Promise<JobQueue> => {
    const q = await this.f.open(options);
    this.opened.push(q);
    return q;
  };

  /** Makes a fresh implementation: a fresh, empty queue. */
  async begin(): Promise<void> {
    this.f = await this.makeFactory();
  }

  /** Closes every queue opened since {@link begin}, then removes the implementation's queue. */
  async end(): Promise<void> {
    for (const q of this.opened.splice(0)) await q.close();
    await this.f.cleanup();
  }
}

/** Declares the job queue suite for one implementation. */
export function describeJobQueue(label: string, makeFactory: () => Promise<JobQueueFactory>): void {
  const suite = new QueueSuite(makeFactory);
  describe(`JobQueue conformance: ${label}`, () => {
    beforeEach(() => suite.begin());
    afterEach(() => suite.end());
    describe('behaviour', () => {
      queueLifecycle(suite);
      queueLeasesAndRecovery(suite);
    });
    describe('bad input', () => queueBadInput(suite));
    describe('many processes', () => queueManyProcesses(suite));
    describe('kill -9 at each step', () => queueCrashSafety(suite));
  });
}

/** Publish, claim, finish, result, wait and cancel, and a note carried to the next attempt. */
function queueLifecycle({ open }: QueueSuite): void {
  it('publishes and delivers a job to one worker, with its payload, attempt 1 and a lease', async () => {
    const q = await open();
    expect(typeof q.kind).toBe('string');
    expect(typeof q.where).toBe('string');
    await q.publish({ id: 'job-1', payload: { n: 1, s: 'x', list: [true, null] } });
    const before = Date.now();
    const job = await q.claim('w1');
    expect(job).toMatchObject({ id: 'job-1', payload: { n: 1, s: 'x', list: [true, null] }, attempt: 1, worker: 'w1' });
    expect(job?.note).toBeUndefined();
    expect(job?.leaseExpiresAt).toBeGreaterThan(before);
    expect(job?.signal.aborted).toBe(false);
    expect(await q.claim('w2')).toBeUndefined();
  });

  it('refuses a second publish of an id, pending or finished (job_exists)', async () => {
    const q = await open();
    await q.publish({ id: 'a', payload: 1 });
    await expect(q.publish({ id: 'a', payload: 2 })).rejects.toMatchObject({ code: 'job_exists' });
    const job = (await q.claim('w')) as ClaimedJob;
    await expect(q.publish({ id: 'a', payload: 2 })).rejects.toMatchObject({ code: 'job_exists' });
    await q.finish(job, { status: 'done', payload: null });
    await expect(q.publish({ id: 'a', payload: 2 })).rejects.toMatchObject({ code: 'job_exists' });
  });

  it('delivers the oldest pending job first', async () => {
    const q = await open();
    for (const id of ['c', 'a', 'b', 'z9', '0']) await q.publish({ id, payload: id });
    const order: string[] = [];
    for (let job = await q.claim('w'); job; job = await q.claim('w')) order.push(job.id);
    expect(order).toEqual(['c', 'a', 'b', 'z9', '0']);
  });

  it('finishes a job once: result() and a waiting wait() give the result; a second finish is a conflict', async () => {
    const q = await open();
    const other = await open();
    await q.publish({ id: 'j', payload: 1 });
    expect(await q.result('j')).toBeUndefined();
    const waiting = other.wait('j');
    const job = (await q.claim('w')) as ClaimedJob;
    expect(await q.finish(job, { status: 'done', payload: { answer: 42 } })).toBe('finished');
    const r = await waiting;
    expect(r).toMatchObject({ id: 'j', status: 'done', payload: { answer: 42 }, attempt: 1 });
    expect(typeof r?.finishedAt).toBe('number');
    expect(await q.result('j')).toEqual(r);
    expect(await q.finish(job, { status: 'failed', payload: 'again' })).toBe('conflict');
    expect(await q.result('j')).toEqual(r);
    await q.publish({ id: 'k', payload: 1 });
    const k = (await q.claim('w')) as ClaimedJob;
    expect(await q.finish(k, { status: 'failed', payload: { error: 'boom' } })).toBe('finished');
    expect(await other.result('k')).toMatchObject({ status: 'failed', payload: { error: 'boom' } });
  });

  it('wait gives up on its timeout and on its signal', async () => {
    const q = await open();
    await q.publish({ id: 'slow', payload: 1 });
    expect(await q.wait('slow', { timeoutMs: 50 })).toBeUndefined();
    const ac = new AbortController();
    const w = q.wait('slow', { signal: ac.signal });
    ac.abort();
    expect(await w).toBeUndefined();
    expect(await q.wait('never-published', { timeoutMs: 20 })).toBeUndefined();
  });

  it('carries the last note to the next attempt after the worker is lost', async () => {
    const a = await open({ leaseMs: 1000 });
    await a.publish({ id: 'n', payload: 'p' });
    const job = (await a.claim('w1')) as ClaimedJob;
    await a.note(job, { step: 1 });
    await a.note(job, { step: 2, done: ['x'] });
    await a.close(); // the worker is gone: its lease is no longer renewed
    const b = await open({ leaseMs: 1000 });
    expect(await b.recover({ now: Date.now() + FAR })).toMatchObject({ returned: ['n'], failed: [] });
    const again = (await b.claim('w2')) as ClaimedJob;
    expect(again).toMatchObject({ id: 'n', payload: 'p', attempt: 2, worker: 'w2', note: { step: 2, done: ['x'] } });
    expect(await b.finish(again, { status: 'done', payload: 1 })).toBe('finished');
  });

  it('cancels a pending job (no worker gets it), and tells finished and unknown ids apart', async () => {
    const q = await open();
    await q.publish({ id: 'p', payload: 1 });
    expect(await q.cancel('p', 'not needed')).toBe('cancelled');
    expect(await q.claim('w')).toBeUndefined();
    expect(await q.result('p')).toMatchObject({ id: 'p', status: 'cancelled', attempt: 0 });
    expect(await q.cancel('p', 'again')).toBe('finished');
    expect(await q.cancel('nobody', 'x')).toBe('unknown');
    expect(await q.stats()).toMatchObject({ pending: 0, claimed: 0 });
  });

  it('cancels a held job by aborting its worker signal with the reason; the worker finishes it', async () => {
    const q = await open();
    const other = await open();
    await q.publish({ id: 'h', payload: 1 });
    const job = (await q.claim('w')) as ClaimedJob;
    expect(await other.cancel('h', 'user pressed stop')).toBe('signalled');
    expect(await aborted(job.signal)).toBe('user pressed stop');
    expect(await q.finish(job, { status: 'failed', payload: { error: 'cancelled' } })).toBe('finished');
    expect(await other.result('h')).toMatchObject({ status: 'failed', payload: { error: 'cancelled' } });
  });
}

/** Leases renewed and run out, attempts exhausted, stats, next() and close. */
function queueLeasesAndRecovery({ open }: QueueSuite): void {
  it('renews a held lease: a live worker keeps its job past the first lease', async () => {
    const q = await open({ leaseMs: 900 });
    const other = await open({ leaseMs: 900 });
    await q.publish({ id: 'r', payload: 1 });
    const job = (await q.claim('w')) as ClaimedJob;
    const first = job.leaseExpiresAt;
    await until('a renewal', () => (job.leaseExpiresAt > first ? true : undefined));
    await new Promise((r) => setTimeout(r, 1000)); // past the first lease
    expect(await other.recover()).toEqual({ returned: [], failed: [], conflicts: [] });
    expect(job.signal.aborted).toBe(false);
    expect(await q.finish(job, { status: 'done', payload: 1 })).toBe('finished');
  });

  it('recovers a claim whose lease ran out; the lost holder gets lease_lost and a conflict', async () => {
    const a = await open({ leaseMs: 1000 });
    const b = await open({ leaseMs: 1000 });
    await a.publish({ id: 'x', payload: 1 });
    const job = (await a.claim('w1')) as ClaimedJob;
    expect(await b.recover()).toEqual({ returned: [], failed: [], conflicts: [] }); // not expired yet
    expect(await b.recover({ now: Date.now() + FAR })).toEqual({ returned: ['x'], failed: [], conflicts: [] });
    await expect(a.note(job, 1)).rejects.toMatchObject({ code: 'lease_lost' });
    expect(await a.finish(job, { status: 'done', payload: 'late' })).toBe('conflict');
    expect(await aborted(job.signal)).toMatchObject({ code: 'lease_lost' });
    const again = (await b.claim('w2')) as ClaimedJob;
    expect(again).toMatchObject({ id: 'x', attempt: 2 });
    expect(await b.finish(again, { status: 'done', payload: 'ok' })).toBe('finished');
    expect(await a.result('x')).toMatchObject({ payload: 'ok', attempt: 2 });
  });

  it('fails a job after maxAttempts lost workers, with what onExhausted returns (default worker_lost)', async () => {
    for (const [id, onExhausted] of [
      ['e1', undefined],
      [
        'e2',
        async (j: { id: string; attempts: number; note?: JsonValue }) => ({
          gave_up: j.id,
          attempts: j.attempts,
          note: j.note ?? null,
        }),
      ],
    ] as const) {
      const q = await open({ leaseMs: 1000, maxAttempts: 2 });
      await q.publish({ id, payload: 1 });
      const first = (await q.claim('w')) as ClaimedJob;
      await q.note(first, 'half');
      expect((await q.recover({ now: Date.now() + FAR, ...(onExhausted ? { onExhausted } : {}) })).returned).toEqual([id]);
      const second = (await q.claim('w')) as ClaimedJob;
      expect(second.attempt).toBe(2);
      const report = await q.recover({ now: Date.now() + FAR, ...(onExhausted ? { onExhausted } : {}) });
      expect(report).toEqual({ returned: [], failed: [id], conflicts: [] });
      const r = await q.result(id);
      expect(r).toMatchObject({ status: 'failed', attempt: 2 });
      expect(r?.payload).toEqual(onExhausted ? { gave_up: id, attempts: 2, note: 'half' } : { error: 'worker_lost', attempts: 2 });
      expect(await q.claim('w')).toBeUndefined();
      expect(await q.finish(second, { status: 'done', payload: 1 })).toBe('conflict');
    }
  });

  it('counts jobs per state and the age of the oldest pending one', async () => {
    const q = await open();
    expect(await q.stats()).toEqual({ pending: 0, claimed: 0, done: 0, failed: 0 });
    for (const id of ['s1', 's2', 's3', 's4']) await q.publish({ id, payload: id });
    await new Promise((r) => setTimeout(r, 30));
    const a = (await q.claim('w')) as ClaimedJob;
    const b = (await q.claim('w')) as ClaimedJob;
    await q.claim('w');
    await q.finish(a, { status: 'done', payload: 1 });
    await q.finish(b, { status: 'failed', payload: 1 });
    const s = await q.stats();
    expect(s).toMatchObject({ pending: 1, claimed: 1, done: 1, failed: 1 });
    expect(s.oldestPendingMs).toBeGreaterThanOrEqual(25);
  });

  it('next() waits for a publish from elsewhere, and returns undefined when its signal aborts', async () => {
    const q = await open();
    const publisher = await open();
    const ac = new AbortController();
    const waiting = q.next('w', { signal: ac.signal });
    await new Promise((r) => setTimeout(r, 50));
    await publisher.publish({ id: 'late', payload: 'hi' });
    expect(await waiting).toMatchObject({ id: 'late', payload: 'hi', attempt: 1 });
    const idle = q.next('w', { signal: ac.signal });
    ac.abort();
    expect(await idle).toBeUndefined();
  });

  it('next() recovers an abandoned claim as it goes', async () => {
    const a = await open({ leaseMs: 200 });
    await a.publish({ id: 'abandoned', payload: 1 });
    await a.claim('w1');
    await a.close();
    const b = await open({ leaseMs: 200 });
    const job = await b.next('w2', { signal: AbortSignal.timeout(20_000) });
    expect(job).toMatchObject({ id: 'abandoned', attempt: 2 });
  });

  it('refuses every call after close (closed)', async () => {
    const q = await open();
    await q.close();
    await expect(q.publish({ id: 'a', payload: 1 })).rejects.toMatchObject({ code: 'closed' });
    await expect(q.claim('w')).rejects.toMatchObject({ code: 'closed' });
    await q.close();
  });
}

/** Ids, payloads, results and notes the queue must refuse. */
function queueBadInput({ open }: QueueSuite): void {
  it('refuses bad job ids (invalid_job), naming the id', async () => {
    const q = await open();
    for (const id of ['', '-a', '_a', 'a b', 'a.b', '../x', 'x/y', 'é', 'x'.repeat(101), 7, null]) {
      await expect(q.publish({ id, payload: 1 } as never)).rejects.toMatchObject({ code: 'invalid_job' });
    }
    await q.publish({ id: 'x'.repeat(100), payload: 1 });
    await expect(q.result('../etc')).rejects.toMatchObject({ code: 'invalid_job' });
    await expect(q.cancel('a b', 'x')).rejects.toMatchObject({ code: 'invalid_job' });
    await expect(q.publish({ id: 'a b', payload: 1 })).rejects.toThrow(/"a b"/);
  });

  it('refuses payloads, results and notes that are not JSON, or too large (invalid_job)', async () => {
    const q = await open();
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    for (const payload of [
      Number.NaN,
      Number.POSITIVE_INFINITY,
      undefined,
      () => 1,
      cycle,
      new Map(),
      10n,
      { a: [1, undefined] },
      new Date(0),
    ]) {
      await expect(q.publish({ id: 'bad', payload } as never)).rejects.toMatchObject({ code: 'invalid_job' });
    }
    await expect(q.publish({ id: 'big', payload: 'x'.repeat(17 * 1024 * 1024) })).rejects.toMatchObject({ code: 'invalid_job' });
    expect(await q.stats()).toMatchObject({ pending: 0 });
    await q.publish({ id: 'ok', payload: 1 });
    const job = (await q.claim('w')) as ClaimedJob;
    await expect(q.note(job, Number.NaN as never)).rejects.toMatchObject({ code: 'invalid_job' });
    await expect(q.finish(job, { status: 'done', payload: cycle as never })).rejects.toMatchObject({ code: 'invalid_job' });
    await expect(q.finish(job, { status: 'maybe' as never, payload: 1 })).rejects.toMatchObject({ code: 'invalid_job' });
    expect(await q.finish(job, { status: 'done', payload: 1 })).toBe('finished');
  });
}

/** Worker and publisher processes sharing one queue. */
function queueManyProcesses(suite: QueueSuite): void {
  const { open } = suite;
  it('4 worker processes draining one queue deliver every job exactly once', async () => {
    const q = await open({ leaseMs: 60_000 });
    const ids = Array.from({ length: 160 }, (_, i) => `job-${i}`);
    for (const id of ids) await q.publish({ id, payload: id });
    const dir = tempDir('forge-conf-queue-go-');
    onTestFinished(() => dir.remove());
    const go = join(dir.path, 'go');
    const workers = [0, 1, 2, 3].map((i) => startChild(suite.f, 'drain', [`w${i}`, go], { leaseMs: 60_000 }));
    await new Promise((r) => setTimeout(r, 300));
    await writeFile(go, '');
    for (const w of workers) expect(await w.exited).toEqual({ code: 0, signal: null });
    const claimed = workers.flatMap((w) => w.lines.filter((l) => 'claimed' in l).map((l) => l.claimed as string));
    expect(claimed.length).toBe(ids.length);
    expect(new Set(claimed)).toEqual(new Set(ids));
    const outcomes = workers.flatMap((w) => w.lines.filter((l) => 'finished' in l).map((l) => l.outcome));
    expect(outcomes.every((o) => o === 'finished')).toBe(true);
    expect(await q.stats()).toEqual({ pending: 0, claimed: 0, done: ids.length, failed: 0 });
    for (const id of ids) expect(await q.result(id)).toMatchObject({ status: 'done', attempt: 1 });
  });

  it('3 waiting worker processes take jobs as they are published; publishers see every result', async () => {
    const q = await open({ leaseMs: 60_000 });
    const workers = [0, 1, 2].map((i) => startChild(suite.f, 'serve', [`s${i}`], { leaseMs: 60_000 }));
    await until('the workers to start', () => (workers.every((w) => w.lines.length > 0) ? true : undefined));
    const ids = Array.from({ length: 45 }, (_, i) => `live-${i}`);
    for (const id of ids) await q.publish({ id, payload: id });
    const results = await Promise.all(ids.map((id) => q.wait(id, { timeoutMs: 30_000 })));
    expect(results.map((r) => r?.status)).toEqual(ids.map(() => 'done'));
    for (const w of workers) w.child.kill('SIGTERM');
    for (const w of workers) expect(await w.exited).toEqual({ code: 0, signal: null });
    const claimed = workers.flatMap((w) => w.lines.filter((l) => 'claimed' in l).map((l) => l.claimed as string));
    expect(claimed.sort()).toEqual([...ids].sort());
  });

  it('a worker process killed while holding a job: a waiting next() elsewhere gets it again once the lease runs out', async () => {
    const q = await open({ leaseMs: 400 });
    await q.publish({ id: 'held', payload: { n: 1 } });
    const holder = startChild(suite.f, 'hold', ['doomed'], { leaseMs: 400 });
    await until('the child to claim', () => (holder.lines.some((l) => l.claimed === 'held') ? true : undefined));
    holder.child.kill('SIGKILL');
    expect(await holder.exited).toEqual({ code: null, signal: 'SIGKILL' });
    const job = await q.next('rescuer', { signal: AbortSignal.timeout(30_000) });
    expect(job).toMatchObject({ id: 'held', payload: { n: 1 }, attempt: 2, worker: 'rescuer' });
    expect(await q.finish(job as ClaimedJob, { status: 'done', payload: 'rescued' })).toBe('finished');
    expect(await q.stats()).toMatchObject({ pending: 0, claimed: 0, done: 1 });
  });

  it('4 publisher processes: every publish lands once, and one id published by all is taken once', async () => {
    const q = await open();
    const pubs = [0, 1, 2, 3].map((p) =>
      startChild(suite.f, 'publish', ['shared', ...Array.from({ length: 30 }, (_, i) => `p${p}-${i}`), 'shared']),
    );
    for (const p of pubs) expect(await p.exited).toEqual({ code: 0, signal: null });
    const lines = pubs.flatMap((p) => p.lines);
    expect(lines.filter((l) => l.published === 'shared')).toHaveLength(1);
    expect(lines.filter((l) => l.refused === 'shared').map((l) => l.code)).toEqual(Array(7).fill('job_exists'));
    expect(lines.filter((l) => 'published' in l)).toHaveLength(121);
    expect(await q.stats()).toMatchObject({ pending: 121 });
  });
}

/** A child process killed -9 at each named step of each operation; the queue stays consistent. */
function queueCrashSafety(suite: QueueSuite): void {
  const { open } = suite;
  const scenarios: Record<
    QueueCrashOperation,
    { action: string; args: string[]; options?: QueueOptions; setup?: (q: JobQueue) => Promise<void> }
  > = {
    publish: { action: 'publish', args: ['j0', 'j1'] },
    claim: { action: 'finish', args: ['child'], setup: (q) => q.publish({ id: 'j1', payload: { id: 'j1' } }) },
    lease: { action: 'finish', args: ['child'], setup: (q) => q.publish({ id: 'j1', payload: { id: 'j1' } }) },
    renew: { action: 'hold', args: ['child'], options: { leaseMs: 150 }, setup: (q) => q.publish({ id: 'j1', payload: { id: 'j1' } }) },
    note: { action: 'note', args: ['child'], setup: (q) => q.publish({ id: 'j1', payload: { id: 'j1' } }) },
    finish: { action: 'finish', args: ['child'], setup: (q) => q.publish({ id: 'j1', payload: { id: 'j1' } }) },
    recover: {
      action: 'recover',
      args: [String(FAR)],
      setup: async () => {
        const a = await open({ leaseMs: 1000 });
        await a.publish({ id: 'j1', payload: { id: 'j1' } });
        await a.claim('lost-worker');
        await a.close();
      },
    },
  };
  for (const op of QUEUE_CRASH_OPERATIONS) {
    it(`${op}: the queue is consistent after a kill at each step, and recovery completes the job`, async () => {
      const steps = suite.f.crashSteps[op];
      expect(steps.length).toBeGreaterThan(0);
      for (const step of steps) {
        // A fresh queue for each step.
        if (step !== steps[0]) {
          await suite.end();
          await suite.begin();
        }
        const s = scenarios[op];
        const q = await open({ leaseMs: 1000 });
        await s.setup?.(q);
        const skip = op === 'publish' ? '1' : '0'; // publish: j0 is acknowledged, the kill hits j1
        const run = startChild(suite.f, s.action, s.args, s.options ?? { leaseMs: 1000 }, {
          FORGE_QUEUE_CRASH_AT: step,
          FORGE_QUEUE_CRASH_SKIP: skip,
        });
        const exit = await run.exited;
        expect({ step, ...exit }, run.stderr()).toEqual({ step, code: null, signal: 'SIGKILL' });
        const { releasedBy } = suite.f;
        const pid = run.child.pid as number;
        if (releasedBy)
          await until(`${step}: the killed child's session to end`, async () => (await releasedBy(pid)) || undefined, 120_000);
        for (const id of ['j0', 'j1']) {
          if (suite.f.statesOf)
            expect((await suite.f.statesOf(id)).length, `${step}: ${id} in ${await suite.f.statesOf(id)}`).toBeLessThanOrEqual(1);
        }
        const report = await q.recover({ now: Date.now() + FAR });
        expect(report.conflicts, step).toEqual([]);
        if (op === 'publish') {
          expect(run.lines).toEqual([{ published: 'j0' }]);
          const got: string[] = [];
          for (let job = await q.claim('parent'); job; job = await q.claim('parent')) {
            got.push(job.id);
            expect(await q.finish(job, { status: 'done', payload: 'parent' })).toBe('finished');
          }
          expect(got[0], `${step}: the acknowledged job`).toBe('j0');
          if (!got.includes('j1')) await q.publish({ id: 'j1', payload: 'again' }); // never acknowledged: may be published again
          continue;
        }
        const done = await q.result('j1');
        if (done) {
          expect(op, `${step}: only a finish leaves a result`).toBe('finish');
          expect(done).toMatchObject({ status: 'done', payload: { by: 'child' } });
        } else {
          const job = (await q.claim('parent')) as ClaimedJob;
          expect(job, `${step}: the job is claimable again`).toMatchObject({ id: 'j1', payload: { id: 'j1' } });
          expect(job.attempt).toBeLessThanOrEqual(2);
          if (op === 'note') expect([undefined, { step: 1 }]).toContainEqual(job.note);
          expect(await q.claim('parent')).toBeUndefined();
          expect(await q.finish(job, { status: 'done', payload: 'parent' })).toBe('finished');
        }
        expect((await q.recover({ now: Date.now() + FAR })).conflicts).toEqual([]);
        expect(await q.stats(), step).toEqual({ pending: 0, claimed: 0, done: 1, failed: 0 });
        if (suite.f.statesOf) expect(await suite.f.statesOf('j1'), step).toEqual(['done']);
      }
    });
  }
}
