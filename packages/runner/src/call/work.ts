import type { ClaimedJob, ExhaustedJob, JobQueue, JsonValue } from '@forge/queue';
import type { WorkOptions } from '../api.js';
import { callerOf } from '../caller.js';
import type { Engine } from '../engine.js';
import { failure } from '../envelope.js';
import { extractTrace } from '../telemetry.js';
import { openCall } from './call.js';
import { type CallAnswer, type CallJob, readCallJob } from './job.js';
import { type CallNote, fromNote, lostAnswer, readNote } from './note.js';
import { type CallExecutors, callExecutors, runCall } from './pipeline.js';
import { pinnedRoute } from './route.js';

/**
 * The worker loop (`Forge.work`): `concurrency` slots, each taking the next job, running it
 * through this engine's pipeline and finishing it, until `signal` aborts. A job the queue
 * delivers again after its worker was lost goes on from that worker's note when it left one.
 */
export async function work(e: Engine, o: WorkOptions): Promise<void> {
  const executors = callExecutors(e);
  const worker = o.worker ?? e.workerName;
  const slots = Math.max(1, Math.floor(o.concurrency ?? 1));
  const onExhausted = (job: ExhaustedJob) => lostAnswer(e, job);
  const slot = async (n: number) => {
    const name = slots > 1 ? `${worker}-${n}` : worker;
    while (!o.signal.aborted) {
      let job: ClaimedJob | undefined;
      try {
        job = await o.queue.next(name, { signal: o.signal, onExhausted });
      } catch (err) {
        // A queue that failed for a moment (a lost connection, a full disk) is asked again, a
        // second later; the worker stays up.
        if (o.signal.aborted) return;
        process.emitWarning(`forge worker: taking a job from ${o.queue.where} failed: ${(err as Error).message}; trying again in 1 s`);
        await pause(1000, o.signal);
        continue;
      }
      if (!job) return;
      await runJob(e, executors, o, job).catch(async (err: unknown) => {
        // Not a refusal (those are answers): the job is finished as failed, saying so, rather
        // than held (its lease renewed) by a worker that gave up on it.
        const message = `the worker failed while handling call ${job.id}: ${(err as Error).message}; its record may be missing — check the worker's log`;
        process.emitWarning(`forge worker: ${message}`);
        const payload: CallAnswer = { envelope: failure('internal', message, { cache: 'off' }), outcome: 'failure' };
        await o.queue.finish(job, { status: 'failed', payload: payload as unknown as JsonValue }).catch(() => {});
      });
    }
  };
  await Promise.all(Array.from({ length: slots }, (_, i) => slot(i + 1)));
}

async function runJob(e: Engine, executors: CallExecutors, o: WorkOptions, job: ClaimedJob): Promise<void> {
  const started = e.now();
  const read = readCallJob(job.payload);
  let answer: CallAnswer;
  let from: 'run' | 'note' | 'invalid' = 'run';
  const note = readNote(job.note);
  if (note) {
    from = 'note';
    answer = await fromNote(e, job.id, note);
  } else if (!read.ok) {
    from = 'invalid';
    const message = `job ${job.id} in the ${o.queue.kind} job queue at ${o.queue.where} is not a call job: ${read.reason}; it was not run`;
    // Audited before it is answered, as every refusal is.
    await e.record('dispatch.job_invalid', { call_id: job.id, reason: read.reason });
    answer = { envelope: failure('internal', message, { cache: 'off' }), outcome: 'none' };
  } else {
    answer = await runDispatched(e, executors, o.queue, job, read.job);
  }
  const done = await o.queue.finish(job, { status: 'done', payload: answer as unknown as JsonValue }).catch((err: unknown) => {
    process.emitWarning(`forge worker: finishing job ${job.id} failed: ${(err as Error).message}`);
    return 'conflict' as const;
  });
  if (done === 'conflict')
    process.emitWarning(`forge worker: job ${job.id} had an answer already or was taken from this worker; its answer was not kept`);
  const env = answer.envelope;
  o.onJob?.({
    id: job.id,
    ...(read.ok ? { name: read.job.name } : {}),
    ok: env.ok,
    ...(env.ok ? {} : { kind: env.error.kind }),
    attempt: job.attempt,
    ms: e.now() - started,
    from,
  });
}

/** Runs one call job through the pipeline, as the caller it names, with the job's cancel signal. */
async function runDispatched(e: Engine, executors: CallExecutors, queue: JobQueue, job: ClaimedJob, cj: CallJob): Promise<CallAnswer> {
  const call = openCall(e, cj.name, cj.input, {
    ...callerOf(cj),
    ...(cj.acl !== null ? { allowedTools: cj.acl.join(',') } : {}),
    signal: job.signal,
  });
  call.dispatched = {
    callId: job.id,
    async beforeRecord(entries, answer, outcome) {
      // The durable head is enough (no flush): every entry of this call comes after it.
      const head = await e.audit.head();
      const n: CallNote = { v: 1, head: head.seq, entries, answer, outcome };
      await queue.note(job, n as unknown as JsonValue);
    },
  };
  // A malformed or absent trace context is no context: the span starts a trace of its own.
  return runCall(e, executors, call, pinnedRoute(e, cj.digest), extractTrace(cj.trace, 'root'));
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
