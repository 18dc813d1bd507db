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
import { passGates } from './gates.js';
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
  const executors = { forged: sandboxExecutor(e), sourced: sourceExecutor(e) };
  const executorOf = (t: Target) => (t.kind === 'forged' ? executors.forged : executors.sourced) as Executor;

  return async (asked, input, c = {}) => {
    const call = openCall(e, asked, input, c);
    const no = await e.admit(call.ctx, 'the tool did not run');
    if (no) return no.audited ? call.refuse(no.kind, no.message) : call.unrecorded(no.kind, no.message);

    // 1. resolve
    const found = await resolveTarget(e, call.ctx, asked);
    if (!found.ok) {
      let hint: string | undefined;
      try {
        hint = e.options.onUnknownTool?.(asked, { persona: call.ctx.persona, session: call.ctx.session });
      } catch {
        hint = undefined;
      }
      return call.refuse('unknown_tool', typeof hint === 'string' && hint !== '' ? `${found.message}; ${hint}` : found.message);
    }
    const target = found.target;
    // Every gate, the audit entry and the manifest name the tool by its forge name.
    call.name = target.kind === 'forged' ? target.stored.name : target.tool.name;
    if (target.kind === 'sourced') call.eventType = `${target.source.kind}.called`;

    // 2. gates
    const gate = passGates(e, call, target);
    if (!gate.ok) return call.refuse(gate.kind, gate.message, gate.eventType, gate.extra);
    // From here the breaker expects an outcome.
    let outcome: RunOutcome['outcome'] = 'none';
    try {
      // 3. validate
      const valid = validateInput(e, call, target);
      if (!valid.ok) return await call.refuse(valid.kind, valid.message, valid.eventType, valid.extra);
      // 4. execute, 5. record
      const executor = executorOf(target);
      const plan = await executor.plan(call, target, gate.snap);
      const runOnce = () => execute(e, call, target, plan, gate.snap, executor);
      const r = plan.cacheKey
        ? await cachedOrRun(e, call, target, { ...plan, cacheKey: plan.cacheKey }, gate.snap, runOnce)
        : await runOnce();
      outcome = r.outcome;
      return r.envelope;
    } catch (err) {
      if (err instanceof RefusalError)
        return await call.refuse(err.kind, err.message, err.eventType === 'forge.called' ? call.eventType : err.eventType);
      outcome = 'failure';
      return await call.refuse('internal', `forge failed while calling "${call.name}": ${(err as Error).message}`);
    } finally {
      gate.breakers.recordOutcome(call.name, outcome, gate.settings, gate.trial);
    }
  };
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
