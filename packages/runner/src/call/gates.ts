import { type Breakers, checkAllowRule, checkPersonaAcl, checkRuntime, checkToolName, type PolicySnapshot } from '@forge/policy';
import { META_TOOLS } from '../api.js';
import type { BreakersPort, PolicyPort } from '../ports.js';
import type { Refusal } from '../refusal.js';
import type { Call } from './call.js';
import type { Target } from './resolve.js';

/** The call may go on: the policy it is judged by, and the tool's breaker, which now expects an outcome. */
export interface Admitted {
  ok: true;
  snap: PolicySnapshot;
  breakers: Breakers;
  settings: PolicySnapshot['policy']['breakers'];
  trial: boolean | undefined;
}

/** A refusal of a step of the call pipeline, the entry type that records it and more facts for it. */
export type Denied = Refusal & { eventType?: string; extra?: Record<string, unknown> };

/**
 * The gates that judge the name alone: the persona's ACL, the policy (a malformed one refuses),
 * forbidden names (a policy edit after forging still blocks) and allow-rules (`allow p_t
 * tool:<name> execute`). A call to a damaged record passes these before it is refused, so a
 * persona learns nothing of a tool it may not call.
 */
export function passNameGates(
  e: Pick<PolicyPort, 'policyNow'>,
  call: Pick<Call, 'ctx' | 'name'>,
): { ok: true; snap: PolicySnapshot } | Denied {
  const { ctx, name } = call;
  const acl = checkPersonaAcl(ctx.acl, ctx.persona, name, META_TOOLS);
  if (!acl.ok) return { ok: false, kind: acl.kind, message: acl.message, eventType: 'acl.persona_denied' };
  const pol = e.policyNow();
  if (!pol.ok) return { ok: false, kind: pol.kind, message: pol.message };
  const snap = pol.snap;
  for (const d of [checkToolName(snap, name), checkAllowRule(snap, ctx.persona, 'tool', name, 'execute')])
    if (!d.ok) return { ok: false, kind: d.kind, message: d.message };
  return { ok: true, snap };
}

/**
 * Step 2, gates, cheapest first and before anything touches the disk: the name's gates
 * ({@link passNameGates}), the runtime (forged tools), then the tool's rate and failure
 * breakers. The same for every target.
 */
export function passGates(e: PolicyPort & BreakersPort, call: Pick<Call, 'ctx' | 'name'>, target: Target): Admitted | Denied {
  const { ctx, name } = call;
  const named = passNameGates(e, call);
  if (!named.ok) return named;
  const snap = named.snap;
  if (target.kind === 'forged') {
    const d = checkRuntime(snap, target.stored.runtime);
    if (!d.ok) return { ok: false, kind: d.kind, message: d.message };
  }
  const breakers = e.breakersOf(ctx.session);
  const settings = snap.policy.breakers;
  const gate = breakers.checkCall(name, settings);
  if (!gate.ok) return { ok: false, kind: gate.kind, message: gate.message, extra: { retry_after_ms: gate.retryAfterMs } };
  return { ok: true, snap, breakers, settings, trial: gate.trial };
}
