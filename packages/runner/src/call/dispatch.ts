import { randomBytes } from 'node:crypto';
import { clampBudget, type PolicySnapshot } from '@forge/policy';
import type { JobResult, JsonValue } from '@forge/queue';
import type { DispatchOptions } from '../api.js';
import type { Engine } from '../engine.js';
import { type Envelope, failure } from '../envelope.js';
import type { RunPlan } from '../executor.js';
import { RefusalError, stopReason } from '../refusal.js';
import type { Call } from './call.js';
import type { RunOutcome } from './record.js';
import type { Target } from './resolve.js';

/**
 * A call as a front-end hands it to a worker: which tool (pinned by digest), the input, and who
 * calls. The worker trusts none of it: it resolves the tool itself, runs every gate and the input
 * validation again under its own policy, and refuses a tool whose digest is not the one named.
 */
export interface CallJob {
  v: 1;
  name: string;
  digest: string;
  version: number;
  scope: string;
  input: JsonValue;
  persona: string;
  session: string;
  task?: string;
  /** The caller's tool ACL (patterns), or null for all tools. */
  acl: string[] | null;
  /** The front-end that published it (`<host>-<pid>`). */
  from: string;
}

/** What a worker finishes a call job with: the answer, as recorded in the worker's log. */
export interface CallAnswer {
  envelope: Envelope;
  outcome: RunOutcome['outcome'];
}

const DEFAULT_START_WITHIN_MS = 30_000;
/** After a cancel reaches a running job, how long its worker has to stop the run and record it. */
const CANCEL_GRACE_MS = 15_000;
/** On top of the call's own time budget: the worker's sandbox set-up, record and finish. */
const RUN_GRACE_MS = 10_000;

/** A call id: the job's id in the queue and `call_id` in the worker's entries. */
export function newCallId(now: number): string {
  return `c${now.toString(36)}-${randomBytes(8).toString('hex')}`;
}

/**
 * The execute and record steps of a front-end that dispatches: the call is published as a job
 * and answered with what the worker that ran it recorded. A call no worker took in time is
 * withdrawn and refused here (`timeout`, or `cancelled` when the caller cancelled): no worker
 * will record it, so this front-end does. A cancel of a running call reaches the worker's
 * sandbox, and the worker records it.
 */
export async function dispatchCall(
  e: Engine,
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
    persona: ctx.persona,
    session: ctx.session,
    ...(ctx.task ? { task: ctx.task } : {}),
    acl: ctx.acl.all ? null : [...ctx.acl.patterns],
    from: e.workerName,
  };
  const where = `the ${queue.kind} job queue at ${queue.where}`;
  try {
    await queue.publish({ id, payload: job as unknown as JsonValue });
  } catch (err) {
    throw new RefusalError('internal', `${where} did not take the call: ${(err as Error).message}; check it with \`forge doctor\``);
  }
  const startWithin = d.startWithinMs ?? DEFAULT_START_WITHIN_MS;
  const { budget } = clampBudget(snap, plan.budget);
  const limit = startWithin + budget.timeout_ms + RUN_GRACE_MS;
  let result = await queue.wait(id, { ...(ctx.signal ? { signal: ctx.signal } : {}), timeoutMs: limit });
  if (!result) {
    const cancelled = ctx.signal?.aborted === true;
    const why = cancelled && ctx.signal ? stopReason(ctx.signal) : `no worker finished the call within ${limit} ms`;
    const c = await queue.cancel(id, why).catch((err: unknown) => {
      throw new RefusalError('internal', `${where} could not withdraw the call (${why}): ${(err as Error).message}`);
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
    result = c === 'finished' ? await queue.result(id) : await queue.wait(id, { timeoutMs: CANCEL_GRACE_MS });
    if (!result) {
      return {
        envelope: failure(
          cancelled ? 'cancelled' : 'timeout',
          `${why}; the worker running it was told to stop and has not finished it within ${CANCEL_GRACE_MS} ms; it records the call when it does (call_id ${id})`,
          { cache: 'off', duration_ms: e.now() - call.started },
        ),
        runId: '',
        outcome: 'none',
        ran: false,
      };
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

/** A call job read from a queue, or why it is not one. */
export function readCallJob(payload: JsonValue): { ok: true; job: CallJob } | { ok: false; reason: string } {
  if (!payload || typeof payload !== 'object' || Array.isArray(payload)) return { ok: false, reason: 'the payload is not an object' };
  const j = payload as Record<string, JsonValue>;
  if (j.v !== 1) return { ok: false, reason: `unknown call job version ${JSON.stringify(j.v)} (this worker reads version 1)` };
  for (const k of ['name', 'digest', 'scope', 'persona', 'session', 'from'] as const)
    if (typeof j[k] !== 'string' || j[k] === '') return { ok: false, reason: `"${k}" is not a non-empty string` };
  if (typeof j.version !== 'number' || !Number.isInteger(j.version)) return { ok: false, reason: '"version" is not an integer' };
  if (j.task !== undefined && typeof j.task !== 'string') return { ok: false, reason: '"task" is not a string' };
  if (j.acl !== null && !(Array.isArray(j.acl) && j.acl.every((p) => typeof p === 'string' && !p.includes(','))))
    return { ok: false, reason: '"acl" is neither null nor a list of patterns' };
  if (!('input' in j)) return { ok: false, reason: '"input" is missing' };
  return { ok: true, job: j as unknown as CallJob };
}
