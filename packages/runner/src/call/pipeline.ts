import { join } from 'node:path';
import { checkSecrets, clampBudget, type PolicySnapshot } from '@forge/policy';
import type { CallContext } from '../api.js';
import type { Engine } from '../engine.js';
import type { Envelope } from '../envelope.js';
import type { Executor, RunJob, RunPlan } from '../executor.js';
import { sandboxExecutor } from '../executors/sandbox.js';
import { sourceExecutor } from '../executors/source.js';
import { newRunId } from '../manifest.js';
import { type SecretList, secretList } from '../redact.js';
import { RefusalError } from '../refusal.js';
import { readSecrets } from '../vault.js';
import { cachedOrRun } from './cached.js';
import { type Call, openCall } from './call.js';
import { dispatchCall } from './dispatch.js';
import { passGates, passNameGates } from './gates.js';
import { type RunOutcome, recordRun } from './record.js';
import { resolveTarget, type Target } from './resolve.js';
import { validateInput } from './validate.js';

/**
 * The call pipeline (DESIGN "The two pipelines"), top to bottom:
 * resolve → gates → validate → execute (plan, secrets, the executor's run, or the cache) →
 * record. Every refusal is audited and is an envelope; cheap, policy-level refusals come before
 * anything touches the disk or starts a process. Only the executor differs by where a tool lives.
 */
export function makeCallTool(e: Engine): (name: string, input: unknown, c?: CallContext) => Promise<Envelope> {
  const executors = callExecutors(e);
  return async (asked, input, c = {}) => (await runCall(e, executors, openCall(e, asked, input, c))).envelope;
}

/** The executors of a call pipeline: the sandbox for forged tools, the source's own for the others. */
export function callExecutors(e: Engine): { forged: Executor; sourced: Executor } {
  return { forged: sandboxExecutor(e) as Executor, sourced: sourceExecutor(e) as Executor };
}

/**
 * One call through every step. A front-end with a job queue (`ForgeOptions.dispatch`) hands a
 * forged tool's execute and record steps to a worker (dispatch.ts); a worker runs them itself for
 * the job it holds, with `pinned` the digest the front-end resolved (the tool must not have
 * changed in between).
 */
export async function runCall(
  e: Engine,
  executors: { forged: Executor; sourced: Executor },
  call: Call,
  options: { pinned?: string } = {},
): Promise<{ envelope: Envelope; outcome: RunOutcome['outcome'] }> {
  const asked = call.name;
  const no = await e.admit(call.ctx, 'the tool did not run');
  if (no) return { envelope: no.audited ? await call.refuse(no.kind, no.message) : call.unrecorded(no.kind, no.message), outcome: 'none' };

  // 1. resolve (a worker whose registry has not seen the tool the front-end resolved yet, or not
  // its latest version, reads the stores again before it refuses)
  let found = await resolveTarget(e, call.ctx, asked);
  if (options.pinned !== undefined && !(found.ok && found.target.kind === 'forged' && found.target.stored.digest === options.pinned)) {
    await e.reloadTools(call.ctx);
    found = await resolveTarget(e, call.ctx, asked);
  }
  if (!found.ok && found.kind === 'tool_damaged') {
    // Audited under the record's forge name, after the gates that judge the name alone.
    call.name = found.name ?? asked;
    const named = passNameGates(e, call);
    const [kind, message, eventType] = named.ok ? [found.kind, found.message] : [named.kind, named.message, named.eventType];
    return { envelope: await call.refuse(kind, message, eventType), outcome: 'none' };
  }
  if (!found.ok) {
    let hint: string | undefined;
    try {
      hint =
        options.pinned === undefined
          ? e.options.onUnknownTool?.(asked, { persona: call.ctx.persona, session: call.ctx.session })
          : undefined;
    } catch {
      hint = undefined;
    }
    const message = typeof hint === 'string' && hint !== '' ? `${found.message}; ${hint}` : found.message;
    return { envelope: await call.refuse('unknown_tool', message), outcome: 'none' };
  }
  const target = found.target;
  // Every gate, the audit entry and the manifest name the tool by its forge name.
  call.name = target.kind === 'forged' ? target.stored.name : target.tool.name;
  if (target.kind === 'sourced') call.eventType = `${target.source.kind}.called`;
  if (options.pinned !== undefined) {
    const now = target.kind === 'forged' ? target.stored : undefined;
    if (now?.digest !== options.pinned) {
      const what = now ? `is now ${now.digest} (version ${now.version})` : 'is not a forged tool here';
      return {
        envelope: await call.refuse(
          'internal',
          `tool "${call.name}" changed between the front-end and this worker: the call was for ${options.pinned}, and the tool ${what}; call it again`,
        ),
        outcome: 'none',
      };
    }
  }

  // 2. gates
  const gate = passGates(e, call, target);
  if (!gate.ok) return { envelope: await call.refuse(gate.kind, gate.message, gate.eventType, gate.extra), outcome: 'none' };
  // From here the breaker expects an outcome.
  let outcome: RunOutcome['outcome'] = 'none';
  try {
    // 3. validate
    const valid = validateInput(e, call, target);
    if (!valid.ok) return { envelope: await call.refuse(valid.kind, valid.message, valid.eventType, valid.extra), outcome };
    // 4. execute, 5. record: here, or by a worker (the front-end waits for its answer).
    const executor = target.kind === 'forged' ? executors.forged : executors.sourced;
    const plan = await executor.plan(call, target, gate.snap);
    const remote = options.pinned === undefined ? e.options.dispatch : undefined;
    const runOnce =
      remote && target.kind === 'forged'
        ? () => dispatchCall(e, call, target, plan, gate.snap, remote)
        : () => execute(e, call, target, plan, gate.snap, executor);
    const r = plan.cacheKey
      ? await cachedOrRun(e, call, target, { ...plan, cacheKey: plan.cacheKey }, gate.snap, runOnce)
      : await runOnce();
    outcome = r.outcome;
    return { envelope: r.envelope, outcome };
  } catch (err) {
    if (err instanceof RefusalError) {
      const envelope = await call.refuse(
        err.kind,
        err.message,
        err.eventType === 'forge.called' ? call.eventType : err.eventType,
        err.extra,
      );
      return { envelope, outcome };
    }
    outcome = 'failure';
    return { envelope: await call.refuse('internal', `forge failed while calling "${call.name}": ${(err as Error).message}`), outcome };
  } finally {
    gate.breakers.recordOutcome(call.name, outcome, gate.settings, gate.trial);
  }
}

/** Step 4, execute: the secrets (the persona's allow-list first, fail closed; then the vault), the executor's run, then the record. */
export async function execute(
  e: Engine,
  call: Call,
  target: Target,
  plan: RunPlan,
  snap: PolicySnapshot,
  executor: Executor,
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
  return recordRun(e, job, exec);
}
