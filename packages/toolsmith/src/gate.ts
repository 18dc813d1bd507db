import { type PolicySnapshot, type ToolsmithSettings, toolsmithFor } from '@forge/policy';
import type { Forge, Refusal } from '@forge/runner';
import type { ToolsmithStatus } from './contract.js';

/** What passing the gate gives a step: the policy now and the toolsmith's settings for the persona. */
export type GateOk = { ok: true; snap: PolicySnapshot; t: ToolsmithSettings };

const PERSONA_PATTERN = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;

/**
 * The policy check every step starts with: the policy is re-read each time, so an operator's
 * `toolsmith.enabled: false` or `paused` stops the next step. A pause is audited once per policy
 * and reason (`toolsmith.paused`), not once per refused step.
 */
export class PolicyGate {
  readonly #forge: Pick<Forge, 'policy'>;
  readonly #record: (type: string, data: Record<string, unknown>) => Promise<Refusal | undefined>;
  #pausedNoted: string | undefined;

  constructor(forge: Pick<Forge, 'policy'>, record: (type: string, data: Record<string, unknown>) => Promise<Refusal | undefined>) {
    this.#forge = forge;
    this.#record = record;
  }

  /**
   * The policy and the toolsmith's settings for `persona`, or why `step` (a past participle for
   * the message: `proposed`) may not run. `needsEnabled: false` and `pausable: false` let a step
   * run while the toolsmith is off or paused.
   */
  async check(persona: string, step: string, o: { needsEnabled?: boolean; pausable?: boolean } = {}): Promise<GateOk | Refusal> {
    const pol = this.#forge.policy();
    if (!pol.ok) return pol;
    const t = toolsmithFor(pol.snapshot, persona);
    if (o.needsEnabled !== false && !t.enabled)
      return {
        ok: false,
        kind: 'policy_denied',
        message: `the toolsmith is off (policy toolsmith.enabled is false), so nothing can be ${step}; an operator enables it in policy.json`,
      };
    if (o.pausable !== false && t.paused) {
      const why = t.pausedWhy ?? 'paused';
      if (this.#pausedNoted !== `${pol.snapshot.digest}:${why}`) {
        this.#pausedNoted = `${pol.snapshot.digest}:${why}`;
        await this.#record('paused', { step, reason: why, policy: pol.snapshot.digest });
      }
      return { ok: false, kind: 'policy_denied', message: `the toolsmith is paused, so nothing can be ${step}: ${why}` };
    }
    return { ok: true, snap: pol.snapshot, t };
  }

  /** See `Toolsmith.status`. An unusable policy reads as paused. */
  status(persona = 'default'): ToolsmithStatus {
    const pol = this.#forge.policy();
    if (!pol.ok) return { enabled: false, paused: true, pausedWhy: pol.message, mode: 'governed', approvesInClient: false };
    const t = toolsmithFor(pol.snapshot, persona);
    return {
      enabled: t.enabled,
      paused: t.paused,
      ...(t.pausedWhy ? { pausedWhy: t.pausedWhy } : {}),
      mode: t.mode,
      approvesInClient: t.approvesInClient,
    };
  }
}

/** Why the operator `by` may not `what` (e.g. `approve proposals`) under `toolsmith.approvers`, or undefined. */
export function approverRefusal(snap: PolicySnapshot, by: unknown, what: string): Refusal | undefined {
  if (typeof by !== 'string' || !PERSONA_PATTERN.test(by))
    return {
      ok: false,
      kind: 'validation_failed',
      message: `the approver's identity must be a name of letters, digits, "_" and "-" (got ${JSON.stringify(by)}); pass --as <name> or set FORGE_OPERATOR`,
    };
  const list = snap.policy.toolsmith.approvers;
  if (!list.includes(by))
    return {
      ok: false,
      kind: 'policy_denied',
      message:
        list.length === 0
          ? `"${by}" may not ${what}: policy toolsmith.approvers names no one; an operator adds approvers to policy.json`
          : `"${by}" may not ${what}: not in policy toolsmith.approvers (${list.join(', ')})`,
    };
  return undefined;
}
