import { createHash } from 'node:crypto';
import { bindAllow, bindRoots, networkFor, type PolicySnapshot } from '@forge/policy';
import stableStringify from 'fast-json-stable-stringify';

/**
 * A caller's authority as one value (docs/security.md, invariant 1): `sha256:` over the canonical
 * JSON of the effective sandbox grant policy gives the persona now — its network grant (network,
 * loopback, private networks, domains, ports), the secrets it may use, and where binds may point.
 * Anything computed under one caller's authority and kept for others (result cache entries, the
 * single flight of identical calls, the runs they point at) is keyed by this value, so it is reused
 * only by a caller whose authority is equal. Two personas with the same grant share; a persona
 * whose grant changes with the policy stops sharing with its old self.
 */
export function callAuthority(snap: PolicySnapshot, persona: string, where: { project?: string; home?: string }): string {
  let byPersona = memo.get(snap);
  if (!byPersona) {
    byPersona = new Map();
    memo.set(snap, byPersona);
  }
  const key = `${persona}\0${where.project ?? ''}\0${where.home ?? ''}`;
  const known = byPersona.get(key);
  if (known) return known;
  const { denied_by: _why, ...network } = networkFor(snap, persona);
  const secrets = Object.hasOwn(snap.policy.persona_secret_allow, persona)
    ? [...(snap.policy.persona_secret_allow[persona] ?? [])].sort()
    : [];
  const grant = { v: 1, network, secrets, bind_roots: bindRoots(snap, where), bind_allow: bindAllow(snap, where) };
  const digest = `sha256:${createHash('sha256').update(stableStringify(grant)).digest('hex')}`;
  byPersona.set(key, digest);
  return digest;
}

const memo = new WeakMap<PolicySnapshot, Map<string, string>>();
