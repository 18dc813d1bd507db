// The JobQueue conformance suite against the PostgreSQL queue (pg-boss engine + forge_queue_jobs),
// one throwaway server for the file, a fresh database per test.

import { spawn } from 'node:child_process';
import { type PostgresServer, startPostgres } from '@forge/conformance/postgres';
import { describeJobQueue } from '@forge/conformance/queue';
import type { JobQueue, JsonValue } from '@forge/queue';
import { scaled, waitFor } from '@forge/test-utils';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { openPostgresQueue, POSTGRES_QUEUE_STEPS } from '../src/queue.js';
import { bundleForNode, type NodeBundle } from './bundle.js';

let server: PostgresServer;
let child: NodeBundle;

/** The application name of a crash-test child's sessions, followed by its pid. */
const CHILD_APP = 'forge-queue-child-';
/** The child's source (bundled by bundleForNode): `openQueueChild(spec, options)` with the crash hook armed, and a worker mode. */
const CHILD_SOURCE = `
  import { openPostgresQueue } from './src/queue.ts';
  const CHILD_APP = ${JSON.stringify(CHILD_APP)};
  export function openQueueChild(spec, options) {
    const at = process.env.FORGE_QUEUE_CRASH_AT;
    let skip = Number(process.env.FORGE_QUEUE_CRASH_SKIP ?? 0);
    const onStep = (step) => {
      if (step !== at) return;
      if (skip-- > 0) return;
      process.kill(process.pid, 'SIGKILL');
    };
    // Named, so that the parent can see its session end once it is killed (releasedBy).
    const url = spec.url + (spec.url.includes('?') ? '&' : '?') + 'application_name=' + CHILD_APP + process.pid;
    return openPostgresQueue(url, { ...options, ...(at ? { onStep } : {}) });
  }
  // Run directly (node child.mjs worker <url> <name> <leaseMs>): a worker that takes jobs with
  // next(); a job with payload {hang: true} is noted and held forever on its first attempt.
  if (process.argv[2] === 'worker') {
    const [url, name, leaseMs] = process.argv.slice(3);
    const q = await openPostgresQueue(url, { leaseMs: Number(leaseMs) });
    const say = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
    const stop = new AbortController();
    process.on('SIGTERM', () => stop.abort());
    say({ ready: name });
    for (;;) {
      const job = await q.next(name, { signal: stop.signal });
      if (!job) break;
      say({ claimed: job.id, attempt: job.attempt, note: job.note ?? null });
      if (job.payload && job.payload.hang && job.attempt === 1) {
        await q.note(job, { step: 'half', by: name });
        say({ noted: job.id });
        const keep = setInterval(() => undefined, 1000);
        await new Promise((resolve) => job.signal.addEventListener('abort', resolve, { once: true }));
        clearInterval(keep);
        const reason = String(job.signal.reason?.code ?? job.signal.reason);
        say({ aborted: job.id, reason });
        await q.finish(job, { status: 'failed', payload: { error: 'cancelled', reason, by: name } });
        continue;
      }
      await q.finish(job, { status: 'done', payload: { by: name, note: job.note ?? null } });
    }
    await q.close();
    process.exit(0);
  }`;

beforeAll(async () => {
  // Both settle before a failure is thrown, so that afterAll stops and removes whichever was made.
  const [s, c] = await Promise.allSettled([startPostgres(), bundleForNode('forge-pgqueue-', { contents: CHILD_SOURCE })]);
  if (s.status === 'fulfilled') server = s.value;
  if (c.status === 'fulfilled') child = c.value;
  if (s.status === 'rejected') throw s.reason;
  if (c.status === 'rejected') throw c.reason;
}, scaled(120_000));
afterAll(async () => {
  child?.remove();
  await server?.stop();
}, scaled(120_000));

/** The engine states that go with each forge state. */
const ENGINE_STATES: Record<string, string[]> = {
  pending: ['created', 'retry'],
  claimed: ['active'],
  done: ['completed'],
  failed: ['completed'],
  cancelled: ['cancelled'],
};

describeJobQueue('postgres queue (openPostgresQueue, pg-boss)', async () => {
  const url = await server.database();
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => {});
  return {
    open: (options) => openPostgresQueue(url, options),
    child: { module: child.module, export: 'openQueueChild', spec: { url } },
    crashSteps: POSTGRES_QUEUE_STEPS,
    // forge's state of the job, and a second entry when the engine's job disagrees with it.
    statesOf: async (id) => {
      const r = await pool.query<{ state: string; engine: string | null }>(
        `SELECT f.state, j.state::text AS engine FROM forge_queue_jobs f LEFT JOIN pgboss.job j ON j.id = f.engine_id AND j.name = f.queue
         WHERE f.queue = 'forge_calls' AND f.id = $1`,
        [id],
      );
      const states: string[] = [];
      for (const row of r.rows) {
        states.push(row.state);
        if (!ENGINE_STATES[row.state]?.includes(row.engine ?? 'missing')) states.push(`engine:${row.engine ?? 'missing'}`);
      }
      return states;
    },
    releasedBy: async (pid) => {
      const r = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [
        `${CHILD_APP}${pid}`,
      ]);
      return r.rows[0]?.n === 0;
    },
    cleanup: () => pool.end(),
  };
});

/** A queue on `url`, closed when the test finishes. */
async function openOn(url: string, options: Parameters<typeof openPostgresQueue>[1] = {}): Promise<JobQueue> {
  const q = await openPostgresQueue(url, options);
  onTestFinished(() => q.close());
  return q;
}

/** A worker process of the bundled child (CHILD_SOURCE), killed when the test finishes. */
function startWorker(url: string, name: string, leaseMs: number) {
  const p = spawn(process.execPath, [child.module, 'worker', url, name, String(leaseMs)], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: Record<string, JsonValue>[] = [];
  let out = '';
  let err = '';
  p.stdout.setEncoding('utf8').on('data', (s: string) => {
    out += s;
    for (let nl = out.indexOf('\n'); nl >= 0; nl = out.indexOf('\n')) {
      lines.push(JSON.parse(out.slice(0, nl)));
      out = out.slice(nl + 1);
    }
  });
  p.stderr.setEncoding('utf8').on('data', (s: string) => (err += s));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    p.on('close', (code, signal) => r({ code, signal })),
  );
  onTestFinished(async () => {
    if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    await exited;
  });
  return { p, name, lines, exited, stderr: () => err };
}

/** Whether a spied look (`result`, `claim`) has answered with nothing at least once: the caller found nothing yet. */
const foundNothing = (look: { mock: { settledResults: { type: string; value: unknown }[] } }): boolean =>
  look.mock.settledResults.some((r) => r.type === 'fulfilled' && r.value === undefined);

describe('postgres queue: beyond the suite', () => {
  it('eight handles opened at once on a fresh database, three times: every one opens (the engine installs once, under a lock)', {
    timeout: scaled(120_000),
  }, async () => {
    for (let round = 0; round < 3; round++) {
      const url = await server.database();
      const opened = await Promise.allSettled(Array.from({ length: 8 }, () => openPostgresQueue(url)));
      for (const o of opened) if (o.status === 'fulfilled') onTestFinished(() => o.value.close());
      const failed = opened.flatMap((o) => (o.status === 'rejected' ? [String((o.reason as Error).message)] : []));
      expect(failed, `round ${round}`).toEqual([]);
      // And they work as one queue: a job published on one is taken on another.
      const [a, b] = opened.map((o) => (o.status === 'fulfilled' ? o.value : undefined));
      await a?.publish({ id: `j-${round}`, payload: { round } });
      expect(await b?.claim('w')).toMatchObject({ id: `j-${round}`, payload: { round } });
    }
  });

  it("a crash test's child names its sessions, so the suite sees them end (releasedBy)", async () => {
    const url = await server.database();
    const q = await openOn(`${url}${url.includes('?') ? '&' : '?'}application_name=${CHILD_APP}0`);
    await q.stats();
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    onTestFinished(() => pool.end());
    const named = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [
      `${CHILD_APP}0`,
    ]);
    expect(named.rows[0]?.n).toBeGreaterThan(0);
  });

  it('where and every error name the database with its password masked', async () => {
    const url = await server.database();
    const withPassword = url.replace(/^(postgres(?:ql)?:\/\/forge)@/, '$1:s3cret-pw@');
    expect(withPassword).toContain('s3cret-pw');
    const q = await openOn(withPassword);
    expect(q.where).not.toContain('s3cret-pw');
    expect(q.where).toContain('***');
    expect(q.where).toMatch(/#forge_calls$/);
    const bad = 'postgresql://forge:s3cret-pw@/nowhere?host=/nonexistent-forge-socket-dir';
    const err = await openPostgresQueue(bad).then(
      () => undefined,
      (e: unknown) => e as Error & { code: string },
    );
    expect(err?.code).toBe('queue_unusable');
    expect(err?.message).toContain('postgresql://forge:***@');
    expect(err?.message).not.toContain('s3cret-pw');
    expect(String((err?.cause as Error | undefined)?.message ?? '')).not.toContain('s3cret-pw');
  });

  it('wait wakes on a finish in another handle by its notification (the safety rescan is an hour away)', async () => {
    const url = await server.database();
    const waiter = await openOn(url, { rescanMs: 600_000 });
    const worker = await openOn(url);
    await worker.publish({ id: 'w1', payload: 1 });
    const looks = vi.spyOn(waiter, 'result');
    const got = waiter.wait('w1', { timeoutMs: scaled(30_000) });
    // Once the waiter has looked and found no result, only the finish's notification can wake it in time.
    await waitFor('the waiter to look for the result and find none', () => foundNothing(looks));
    const job = await worker.claim('w');
    expect(await worker.finish(job as never, { status: 'done', payload: { ok: true } })).toBe('finished');
    expect(await got).toMatchObject({ id: 'w1', status: 'done', payload: { ok: true }, attempt: 1 });
  });

  it('next() in a waiting handle is woken by a publish from another (the safety rescan is an hour away)', async () => {
    const url = await server.database();
    const w = await openOn(url, { rescanMs: 600_000 });
    const pub = await openOn(url);
    const ac = new AbortController();
    onTestFinished(() => ac.abort());
    const claims = vi.spyOn(w, 'claim');
    const got = w.next('w', { signal: ac.signal });
    // Once next() has tried to claim and found nothing, only the publish's notification can wake it in time.
    await waitFor('next() to try a claim and find nothing', () => foundNothing(claims));
    await pub.publish({ id: 'n1', payload: 'x' });
    expect(await got).toMatchObject({ id: 'n1', attempt: 1 });
  });

  it('two worker processes and a publisher: each job done once; a worker killed -9 mid-job has it redone by the other (attempt 2, with the note)', async () => {
    const url = await server.database();
    const q = await openOn(url, { leaseMs: 400 });
    const workers = [startWorker(url, 'wa', 400), startWorker(url, 'wb', 400)];
    await waitFor('the workers to start', () => workers.every((w) => w.lines.some((l) => 'ready' in l)));
    const ids = Array.from({ length: 30 }, (_, i) => `j${i}`);
    await q.publish({ id: 'hang', payload: { hang: true } });
    for (const id of ids) await q.publish({ id, payload: id });
    const holder = await waitFor('the hanging job to be noted', () => workers.find((w) => w.lines.some((l) => l.noted === 'hang')));
    holder.p.kill('SIGKILL');
    expect(await holder.exited).toEqual({ code: null, signal: 'SIGKILL' });
    const other = workers.find((w) => w !== holder) as (typeof workers)[number];
    const r = await q.wait('hang', { timeoutMs: scaled(30_000) });
    expect(r).toMatchObject({ status: 'done', attempt: 2, payload: { by: other.name, note: { step: 'half', by: holder.name } } });
    const results = await Promise.all(ids.map((id) => q.wait(id, { timeoutMs: scaled(30_000) })));
    expect(results.map((x) => x?.status)).toEqual(ids.map(() => 'done'));
    other.p.kill('SIGTERM');
    expect(await other.exited, other.stderr()).toEqual({ code: 0, signal: null });
    const claims = workers.flatMap((w) => w.lines.filter((l) => 'claimed' in l).map((l) => `${l.claimed}@${l.attempt}`));
    // Every job claimed once, but for the hanging one: once by the killed worker, then attempt 2.
    expect(claims.filter((c) => c.startsWith('j')).sort()).toEqual(ids.map((id) => `${id}@1`).sort());
    expect(claims.filter((c) => c.startsWith('hang')).sort()).toEqual(['hang@1', 'hang@2']);
    expect(await q.stats()).toEqual({ pending: 0, claimed: 0, done: ids.length + 1, failed: 0 });
  });

  it("a held job cancelled from another process: the holder process's signal aborts with the reason (NOTIFY to the holder) and it finishes the job", async () => {
    const url = await server.database();
    const q = await openOn(url, { leaseMs: 60_000 });
    const w = startWorker(url, 'wc', scaled(60_000));
    await waitFor('the worker to start', () => w.lines.some((l) => 'ready' in l));
    await q.publish({ id: 'held', payload: { hang: true } });
    await waitFor('the job to be held', () => w.lines.some((l) => l.noted === 'held'));
    expect(await q.cancel('held', 'stop it')).toBe('signalled');
    // Well before the holder's first renewal (a third of its lease: 20 s, scaled), which would also see the mark.
    expect(await q.wait('held', { timeoutMs: scaled(10_000) })).toMatchObject({
      status: 'failed',
      attempt: 1,
      payload: { error: 'cancelled', reason: 'stop it', by: 'wc' },
    });
    expect(w.lines).toContainEqual({ aborted: 'held', reason: 'stop it' });
    expect(await q.cancel('held', 'again')).toBe('finished');
  });
});
