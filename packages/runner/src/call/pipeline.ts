import { join } from 'node:path';
import { checkSecrets, clampBudget, type PolicySnapshot } from '@forge/policy';
import type { Context } from '@opentelemetry/api';
import type { CallContext, DispatchOptions } from '../api.js';
import type { Engine } from '../engine.js';
import { type Envelope, failure } from '../envelope.js';
import type { Executor, RunJob, RunPlan } from '../executor.js';
import { sandboxExecutor } from '../executors/sandbox.js';
import { sourceExecutor } from '../executors/source.js';
import { decidePost, type PostDecisions, postHooks, preHooks } from '../hooks/apply.js';
import { newRunId } from '../manifest.js';
import type { Clock, PolicyPort, Setup } from '../ports.js';
import { CallReceipts, collectReceipts, withReceipt } from '../receipts.js';
import { type SecretList, secretList } from '../redact.js';
import { RefusalError } from '../refusal.js';
import { traceCall } from '../telemetry.js';
import { readSecrets } from '../vault.js';
import { cachedOrRun } from './cached.js';
import { type Call, openCall, type RefusePorts, refuseCall } from './call.js';
import { dispatchCall } from './dispatch.js';
import { type Admitted, type Denied, passGates, passNameGates } from './gates.js';
import type { CallAnswer } from './job.js';
import { type RecordPorts, type RunOutcome, recordRun } from './record.js';
import { type Target, targetEvent, targetName, type Unresolved } from './resolve.js';
import { type CallRoute, frontEndRoute } from './route.js';
import { validateInput } from './validate.js';

/** What the executors of a call pipeline are: the sandbox for forged tools, the source's own for the others. */
export interface CallExecutors {
  forged: Executor;
  sourced: Executor;
}

/**
 * The call pipeline (DESIGN "The two pipelines"): `callTool` over one engine, on the front-end's
 * route. Every refusal is audited and is an envelope.
 */
export function makeCallTool(e: Engine): (name: string, input: unknown, c?: CallContext) => Promise<Envelope> {
  const executors = callExecutors(e);
  const route = frontEndRoute(e);
  return async (asked, input, c = {}) => (await runCall(e, executors, openCall(e, asked, input, c), route)).envelope;
}

/** The executors of a call pipeline: the sandbox for forged tools, the source's own for the others. */
export function callExecutors(e: Engine): CallExecutors {
  return { forged: sandboxExecutor(e) as Executor, sourced: sourceExecutor(e) as Executor };
}

/**
 * One call through every step, top to bottom: resolve → gates → validate → execute (plan,
 * secrets, the executor's run, or the cache) → record. Cheap, policy-level refusals come before
 * anything touches the disk or starts a process; only the executor differs by where a tool lives.
 */
export function runCall(e: Engine, executors: CallExecutors, call: Call, route: CallRoute, parent?: Context): Promise<CallAnswer> {
  return traceCall(
    call.name,
    call.caller.persona,
    parent,
    async () => {
      let settle = () => {};
      call.answered = new Promise<void>((resolve) => {
        settle = resolve;
      });
      try {
        const receipts = new CallReceipts();
        const answer = await collectReceipts(receipts, () => callSteps(e, executors, call, route));
        return { ...answer, envelope: withReceipt(answer.envelope, receipts.of(call.eventType)) };
      } finally {
        settle();
      }
    },
    (answer) => ({
      envelope: answer.envelope,
      name: call.name,
      eventType: call.eventType,
      ...(call.dispatched ? { callId: call.dispatched.callId } : {}),
    }),
  );
}

async function callSteps(e: Engine, executors: CallExecutors, call: Call, route: CallRoute): Promise<CallAnswer> {
  const no = await e.admit(call.ctx, 'the tool did not run');
  if (no) return refused(e, call, no);
  const found = await route.resolve(call);
  if (!found.ok) return unresolved(e, call, found);
  const target = named(call, found.target);
  const gate = passGates(e, call, target);
  if (!gate.ok) return refused(e, call, gate);
  return validateExecuteRecord(e, executors, call, target, gate, route.dispatch);
}

/** A refusal of the call as its answer: nothing ran. */
async function refused(e: RefusePorts, call: Call, r: Denied): Promise<CallAnswer> {
  const { eventType, extra } = r;
  return { envelope: await refuseCall(e, call, r.kind, r.message, eventType ?? call.eventType, extra ?? {}), outcome: 'none' };
}

/**
 * Step 1's refusal: audited under the name it gives (a damaged record's forge name, a pinned
 * tool's), else the name asked. A damaged record is refused after the gates that judge the name
 * alone, so a persona learns nothing of a tool it may not call.
 */
async function unresolved(e: RefusePorts & PolicyPort, call: Call, found: Unresolved): Promise<CallAnswer> {
  if (found.name !== undefined) call.name = found.name;
  if (found.eventType !== undefined) call.eventType = found.eventType;
  if (found.kind === 'tool_damaged') {
    const gate = passNameGates(e, call);
    if (!gate.ok) return refused(e, call, gate);
  }
  return refused(e, call, found);
}

/** Every gate, the audit entry and the manifest name the tool by its forge name (a client may call by the wire name). */
function named(call: Call, target: Target): Target {
  call.name = targetName(target);
  call.eventType = targetEvent(target);
  return target;
}

/**
 * Steps 3 to 5, once the breaker expects an outcome (told in every case): validate, then execute
 * and record, here or by a worker (the front-end waits for its answer), or from the cache.
 */
async function validateExecuteRecord(
  e: Engine,
  executors: CallExecutors,
  call: Call,
  target: Target,
  gate: Admitted,
  remote: DispatchOptions | undefined,
): Promise<CallAnswer> {
  let outcome: RunOutcome['outcome'] = 'none';
  // The pre hooks' decisions that let the call go on: written while it runs, durable before its answer.
  let preAudited: Promise<Denied | undefined> | undefined;
  const answer = async (r: CallAnswer): Promise<CallAnswer> => {
    const lost = await preAudited;
    return lost ? { envelope: failure(lost.kind, lost.message, r.envelope.meta), outcome: r.outcome } : r;
  };
  try {
    const valid = validateInput(e, call, target);
    if (!valid.ok) return await refused(e, call, valid);
    const pre = await preHooks(e, call, target, gate.snap);
    if (!pre.ok) return await refused(e, call, pre);
    preAudited = pre.audited;
    // A pre hook may have rewritten the input: from here on the call is the one it left.
    call = pre.call;
    const executor = target.kind === 'forged' ? executors.forged : executors.sourced;
    const plan = await executor.plan(call, target, gate.snap);
    const runOnce =
      remote && target.kind === 'forged'
        ? () => dispatchCall(e, call, target, plan, gate.snap, remote)
        : () => execute(e, call, target, plan, gate.snap, executor, (ran) => decidePost(e, call, target, ran, gate.snap));
    const r = plan.cacheKey
      ? await cachedOrRun(e, call, target, { ...plan, cacheKey: plan.cacheKey }, gate.snap, runOnce)
      : await runOnce();
    outcome = r.outcome;
    // The post hooks ran before the record when this call ran the tool here (see execute), else now.
    const early = (r as Partial<RunOutcome>).answered;
    const answered = early ?? (await postHooks(e, call, target, r.envelope, gate.snap));
    return await answer({ envelope: answered, outcome });
  } catch (err) {
    if (err instanceof RefusalError) {
      const eventType = err.eventType === 'forge.called' ? call.eventType : err.eventType;
      return await answer({ envelope: await refuseCall(e, call, err.kind, err.message, eventType, err.extra), outcome });
    }
    outcome = 'failure';
    return await answer({
      envelope: await refuseCall(e, call, 'internal', `forge failed while calling "${call.name}": ${(err as Error).message}`),
      outcome,
    });
  } finally {
    gate.breakers.recordOutcome(call.name, outcome, gate.settings, gate.trial);
  }
}

/** Step 4, execute: the secrets (the persona's allow-list first, fail closed; then the vault), the executor's run, then the record. */
export async function execute(
  e: RecordPorts & Clock & Pick<Setup, 'paths'>,
  call: Call,
  target: Target,
  plan: RunPlan,
  snap: PolicySnapshot,
  executor: Executor,
  /** The post hooks, run on the answer before it is recorded (their decisions join its entry). */
  post?: (answer: Envelope) => Promise<PostDecisions>,
): Promise<RunOutcome> {
  const allowed = checkSecrets(snap, call.ctx.persona, plan.secretNames);
  if (!allowed.ok) throw new RefusalError(allowed.kind, allowed.message, 'acl.persona_secret_denied');
  let secrets: SecretList = [];
  let values: ReadonlyMap<string, string> = new Map();
  if (plan.secretNames.length > 0) {
    const read = readSecrets(e.paths.vault, plan.secretNames);
    if (!read.ok) throw new RefusalError(read.kind, read.message, read.event ?? call.eventType);
    values = read.values;
    secrets = secretList(read.values);
    call.secrets = secrets;
  }
  const { budget, clamped } = clampBudget(snap, plan.budget);
  const startedAt = e.now();
  const { id: runId, dirName } = newRunId(new Date(startedAt));
  const job: RunJob = {
    call,
    target,
    snap,
    plan,
    budget,
    clamped,
    secrets,
    secretValues: values,
    runId,
    runDir: join(e.paths.runsDir, dirName),
    startedAt,
  };
  const exec = await executor.run(job);
  // The run is recorded whatever the post hooks do (a throw is the call's internal failure after).
  let decisions: PostDecisions | undefined;
  let thrown: { err: unknown } | undefined;
  try {
    decisions = post && (await post(exec.envelope));
  } catch (err) {
    thrown = { err };
  }
  const recorded = await recordRun(e, job, exec, decisions);
  if (thrown) throw thrown.err;
  return recorded;
}
