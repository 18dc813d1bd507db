import { createHash } from 'node:crypto';
import { networkFor, type PolicySnapshot } from '@forge/policy';
import stableStringify from 'fast-json-stable-stringify';

/**
 * A caller's authority as one value (docs/security.md, invariant 1): `sha256:` over the canonical
 * JSON of the sandbox grant policy gives the persona now — its network grant (network, loopback,
 * private networks, domains, ports) and the secrets it may use. Anything computed under one
 * caller's authority and kept for others (result cache entries, the single flight of identical
 * calls, the runs they point at, a gateway upstream connection) is keyed by this value, so it is
 * reused only by a caller whose authority is equal. Two personas with the same grant share; a
 * persona whose grant changes with the policy stops sharing with its old self. Where binds may
 * point is not a persona's grant (`bind_roots` are the same for every persona, and differ between
 * projects and hosts sharing one cache): a call with binds is never cached, and a gateway server's
 * binds are part of its connection's key.
 */
export function callAuthority(snap: PolicySnapshot, persona: string): string {
  let byPersona = memo.get(snap);
  if (!byPersona) {
    byPersona = new Map();
    memo.set(snap, byPersona);
  }
  const known = byPersona.get(persona);
  if (known) return known;
  const { denied_by: _why, ...network } = networkFor(snap, persona);
  const secrets = Object.hasOwn(snap.policy.persona_secret_allow, persona)
    ? [...(snap.policy.persona_secret_allow[persona] ?? [])].sort()
    : [];
  const grant = { v: 1, network, secrets };
  const digest = `sha256:${createHash('sha256').update(stableStringify(grant)).digest('hex')}`;
  byPersona.set(persona, digest);
  return digest;
}

const memo = new WeakMap<PolicySnapshot, Map<string, string>>();
