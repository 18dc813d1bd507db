import { checkRuntime, checkToolName } from '@forge/policy';
import type { StoredTool } from '@forge/registry';
import type { TrialOptions, TrialResult } from '../api.js';
import { creatorOf } from '../caller.js';
import type { Engine } from '../engine.js';
import { sandboxExecutor } from '../executors/sandbox.js';
import type { ExecutorsPort } from '../ports.js';
import { type Refusal, RefusalError } from '../refusal.js';
import { openCall, refuseCall } from './call.js';
import { execute } from './pipeline.js';
import { validateInput } from './validate.js';

/** `<name> <version>` of the runtime `name` resolves to now (rejects when it is not installed). */
export async function runtimeLabel(e: Pick<ExecutorsPort, 'runtimes'>, name: string): Promise<string> {
  const rt = await (await e.runtimes()).resolve(name);
  return rt.version ? `${rt.name} ${rt.version}` : rt.name;
}

/** The audit entry of a trial run. */
export const TRIAL_EVENT = 'toolsmith.trial_run';

/**
 * A trial run (`Forge.trialCall`): a spec that is not in the registry, run as a call of it would
 * run, from the gates on. Its shape is checked as forging checks it; then the policy, forbidden
 * names and the runtime; the input against its schema (an invalid input is refused before
 * anything runs); the sandbox with what the persona's policy grants; the output checked; a
 * manifest and a `toolsmith.trial_run` entry. Never cached, never counted by breakers, and the
 * spec's state is `pending` throughout (a trial is not a call of a live tool).
 */
export function makeTrialCall(e: Engine): (spec: unknown, input: unknown, o?: TrialOptions) => Promise<TrialResult | Refusal> {
  const sandbox = sandboxExecutor(e);
  return async (spec, input, o = {}) => {
    await e.lookUpRuntimeNames(); // the registry checks the spec's runtime against them
    const checked = e.base.validate(spec);
    if (!checked.ok) return checked as Refusal;
    const ctx = e.context(o);
    const stored: StoredTool = {
      ...checked.spec,
      version: 0,
      digest: checked.digest,
      created_at: new Date(e.now()).toISOString(),
      created_by: creatorOf(ctx),
      scope: 'project',
      state: 'pending',
    };
    let runtime: string;
    try {
      runtime = await runtimeLabel(e, stored.runtime);
    } catch (err) {
      return { ok: false, kind: 'validation_failed', message: `runtime: ${(err as Error).message}` };
    }
    const call = openCall(e, stored.name, input, o);
    call.eventType = TRIAL_EVENT;
    const purpose = o.purpose ? { purpose: o.purpose } : {};
    const done = (envelope: TrialResult['envelope'], ran: boolean): TrialResult => ({ envelope, ran, runtime });
    const refused = async (kind: Refusal['kind'], message: string, extra: Record<string, unknown> = {}) =>
      done(await refuseCall(e, call, kind, message, TRIAL_EVENT, { ...purpose, ...extra }), false);
    const no = await e.admit(call.ctx, 'the trial did not run');
    if (no) return refused(no.kind, no.message);
    const pol = e.policyNow();
    if (!pol.ok) return refused(pol.kind, pol.message);
    const snap = pol.snap;
    for (const d of [checkToolName(snap, stored.name), checkRuntime(snap, stored.runtime)]) if (!d.ok) return refused(d.kind, d.message);
    const target = { kind: 'forged' as const, stored };
    const valid = validateInput(e, call, target);
    if (!valid.ok) return refused(valid.kind, valid.message, valid.extra);
    try {
      const plan = await sandbox.plan(call, target, snap);
      const { cacheKey: _never, ...uncached } = plan;
      const r = await execute(e, call, target, uncached, snap, sandbox);
      return done(r.envelope, r.ran);
    } catch (err) {
      if (err instanceof RefusalError) return refused(err.kind, err.message);
      return refused('internal', `forge failed in a trial run of "${stored.name}": ${(err as Error).message}`);
    }
  };
}
