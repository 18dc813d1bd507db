import { clampBudget, type PolicySnapshot } from '@forge/policy';
import type { JobResult, JsonValue } from '@forge/queue';
import type { DispatchOptions } from '../api.js';
import { AUDIT_UNAVAILABLE } from '../auditGate.js';
import { type Envelope, failure } from '../envelope.js';
import type { RunPlan } from '../executor.js';
import type { AuditPort, CachePort, Clock, RunsPort, Setup } from '../ports.js';
import { RefusalError, stopReason } from '../refusal.js';
import { injectTrace } from '../telemetry.js';
import type { Call } from './call.js';
import { type CallAnswer, type CallJob, newCallId } from './job.js';
import { lostAnswer } from './note.js';
import type { RunOutcome } from './record.js';
import type { Target } from './resolve.js';

const DEFAULT_START_WITHIN_MS = 30_000;
/** After a cancel reaches a running job, how long its worker has to stop the run and record it (default). */
const CANCEL_GRACE_MS = 15_000;
/** On top of the call's own time budget: the worker's sandbox set-up, record and finish. */
const RUN_GRACE_MS = 10_000;

/**
 * The execute and record steps of a front-end that dispatches: the call is published as a job
 * and answered with what the worker that ran it recorded. A call no worker took in time is
 * withdrawn and refused here (`timeout`, or `cancelled` when the caller cancelled): no worker
 * will record it, so this front-end does. A cancel of a running call reaches the worker's
 * sandbox, and the worker records it.
 */
/** The ports of dispatching: the log, the clock, the call counts and the cache, this process's name. */
export type DispatchPorts = Pick<AuditPort, 'record' | 'unaudited' | 'audit'> & Clock & RunsPort & CachePort & Pick<Setup, 'workerName'>;

export async function dispatchCall(
  e: DispatchPorts,
  call: Call,
  target: Extract<Target, { kind: 'forged' }>,
  plan: RunPlan,
  snap: PolicySnapshot,
  d: DispatchOptions,
): Promise<RunOutcome> {
  const { queue } = d;
  const stored = target.stored;
  const { ctx } = call;
  const id = newCallId(e.now());
  const job: CallJob = {
    v: 1,
    name: stored.name,
    digest: stored.digest,
    version: stored.version,
    scope: stored.scope,
    input: (call.input ?? {}) as JsonValue,
    ...call.caller,
    acl: ctx.acl.all ? null : [...ctx.acl.patterns],
    from: e.workerName,
  };
  // The worker's span of the call continues this trace (nothing when nothing records).
  const trace = injectTrace();
  if (trace.traceparent) job.trace = trace;
  const where = `the ${queue.kind} job queue at ${queue.where}`;
  try {
    await queue.publish({ id, payload: job as unknown as JsonValue });
  } catch (err) {
    throw new RefusalError('internal', `${where} did not take the call: ${(err as Error).message}; check it with \`forge doctor\``);
  }
  const startWithin = d.startWithinMs ?? DEFAULT_START_WITHIN_MS;
  const { budget } = clampBudget(snap, plan.budget);
  const limit = startWithin + budget.timeout_ms + RUN_GRACE_MS;
  const cancelGrace = d.cancelGraceMs ?? CANCEL_GRACE_MS;
  /**
   * The queue could not be read while the call is in it: the call may still run, and its worker
   * records it (one forge.called per call), so this front-end records only that it lost sight
   * of it, under another type.
   */
  const lostSight = (what: string, err: unknown) =>
    new RefusalError(
      'internal',
      `${where} failed while ${what} call ${id} (${(err as Error).message}); the call was handed to the workers and may still run: its worker records it under call_id ${id} (see \`forge audit tail\`) — check \`forge doctor\` before calling again`,
      'dispatch.unanswered',
      { call_id: id },
    );
  let result = await waitRecovering(e, queue, id, limit, ctx.signal).catch((err: unknown) => {
    throw lostSight('waiting for', err);
  });
  if (!result) {
    const cancelled = ctx.signal?.aborted === true;
    const why = cancelled && ctx.signal ? stopReason(ctx.signal) : `no worker finished the call within ${limit} ms`;
    const c = await queue.cancel(id, why).catch((err: unknown) => {
      throw lostSight(`withdrawing (${why})`, err);
    });
    if (c === 'cancelled' || c === 'unknown') {
      // No worker took it, and none will: this front-end records it.
      if (cancelled) throw new RefusalError('cancelled', `${why}; the tool did not run`);
      const stats = await queue.stats().catch(() => undefined);
      throw new RefusalError(
        'timeout',
        `no worker took the call within ${startWithin} ms (${where}${stats ? `: ${stats.pending} pending, ${stats.claimed} running` : ''}); start workers with \`forge worker\` or \`forge serve --workers N\`, or try again`,
      );
    }
    result = await (c === 'finished' ? queue.result(id) : waitRecovering(e, queue, id, cancelGrace)).catch((err: unknown) => {
      throw lostSight('reading the answer of', err);
    });
    if (!result) {
      // A live worker holds it (its lease is renewed: a dead one's would have been recovered and
      // withdrawn above) and records the call when it stops; this answer is recorded as unanswered.
      const kind = cancelled ? 'cancelled' : 'timeout';
      const message = `${why}; the worker running it was told to stop and has not finished it within ${cancelGrace} ms; it records the call when it does (call_id ${id})`;
      const meta = { cache: 'off' as const, duration_ms: e.now() - call.started };
      const f = await e.record('dispatch.unanswered', { ok: false, name: stored.name, ...call.caller, kind, message, call_id: id });
      const envelope = f
        ? failure(AUDIT_UNAVAILABLE, e.unaudited(f, kind, message), meta, { refused: kind })
        : failure(kind, message, meta);
      return { envelope, runId: '', outcome: 'none', ran: false };
    }
  }
  // Finished by the queue, not by a worker (withdrawn by someone else; lost with no worker's
  // answer): nothing recorded the call, so this front-end does.
  const p = result.payload as { reason?: unknown; error?: unknown; attempts?: unknown } | null;
  if (result.status === 'cancelled')
    throw new RefusalError(
      'cancelled',
      `the call was withdrawn from ${where} before a worker took it (${String(p?.reason ?? 'no reason given')}); the tool did not run`,
    );
  if (result.status === 'failed' && p?.error === 'worker_lost')
    throw new RefusalError(
      'internal',
      `the call was lost: the worker running it stopped (killed or crashed) ${String(p.attempts ?? 'too many')} time(s) before it finished, so it is not run again; check the workers' logs and call it again`,
    );
  const answer = readAnswer(result);
  if (!answer) {
    await e.record('dispatch.answer_invalid', { call_id: id, name: stored.name, status: result.status });
    throw new RefusalError(
      'internal',
      `${where} gave an answer for call ${id} that is not a call answer (status ${result.status}); see the worker's log`,
    );
  }
  const { envelope } = answer;
  const runId = typeof envelope.meta.run_id === 'string' ? envelope.meta.run_id : '';
  e.calls.set(call.name, (e.calls.get(call.name) ?? 0) + 1);
  if (envelope.ok && plan.cacheKey && e.cache && runId) await e.cache.set(plan.cacheKey, envelope, runId);
  return { envelope, runId, outcome: answer.outcome, ran: runId !== '' };
}

/**
 * Waits up to `ms` for the answer of job `id`, woken by the queue's notifications. Once a lease
 * (the queue's `leaseMs`) it also returns to the queue the jobs whose workers stopped renewing
 * their leases (killed, frozen, cut off): an idle worker does that too, but when every worker is
 * busy the call would wait until one is free; this way a dead worker's call is back in the
 * queue within one lease of its last renewal, and recorded as lost when it was tried too often.
 */
async function waitRecovering(
  e: Pick<AuditPort, 'record' | 'audit'>,
  queue: DispatchOptions['queue'],
  id: string,
  ms: number,
  signal?: AbortSignal,
) {
  const deadline = Date.now() + ms;
  for (;;) {
    const left = deadline - Date.now();
    const r = await queue.wait(id, { ...(signal ? { signal } : {}), timeoutMs: Math.max(0, Math.min(left, queue.leaseMs)) });
    if (r || signal?.aborted || Date.now() >= deadline) return r;
    await queue.recover({ onExhausted: (job) => lostAnswer(e, job) });
  }
}

/** A worker's answer read from a job result, or undefined when it is not one (a queue that was written by hand). */
function readAnswer(r: JobResult): CallAnswer | undefined {
  const p = r.payload as Partial<CallAnswer> | null;
  if (!p || typeof p !== 'object') return undefined;
  const env = p.envelope as Envelope | undefined;
  if (!env || typeof env !== 'object' || typeof env.ok !== 'boolean' || !env.meta || typeof env.meta !== 'object') return undefined;
  if (!env.ok && (!env.error || typeof env.error.kind !== 'string' || typeof env.error.message !== 'string')) return undefined;
  const outcome = p.outcome === 'success' || p.outcome === 'failure' ? p.outcome : 'none';
  return { envelope: env, outcome };
}
