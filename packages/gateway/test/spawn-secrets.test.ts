/**
 * A stdio server's secrets under policy `secret_delivery`: one delivered by placeholder reaches a
 * sandboxed server as a placeholder in its variable, with the rule its egress proxy substitutes by
 * (the substitution itself: @forge/sandbox's egress-secrets and egress-intercept tests); an
 * unsandboxed server, which no proxy stands in front of, gets the value as before.
 */
import { describe, expect, it } from 'vitest';
import { serverConfig } from '../src/config.js';
import { planUpstream } from '../src/spawn.js';
import { requireBwrap } from './fixtures/harness.js';

requireBwrap();

const TOKEN = 'tok-5c1e9a7f3b2d';
const secrets = new Map([['api_token', TOKEN]]);
const inject = { name: 'api_token', hosts: ['api.test'], headers: ['authorization'], format: 'Bearer {}' };
const entry = (extra: Record<string, unknown> = {}) =>
  serverConfig(
    'api',
    { command: 'node', args: ['/usr/share/doc'], secrets: { API_TOKEN: 'api_token' }, ...extra } as never,
    'user',
    '/dev/null',
  );

async function envAndNetwork(server: ReturnType<typeof entry>, delivered: boolean) {
  const r = await planUpstream(server, secrets, {
    forgeState: [],
    ...(delivered ? { secretDelivery: (names: readonly string[]) => ({ inject: names.includes('api_token') ? [inject] : [] }) } : {}),
    upstreamCa: ['-----BEGIN CERTIFICATE-----\n…'],
  });
  if (!r.ok) throw new Error(r.message);
  return r.plan.sandboxed ? { env: r.plan.profile.env ?? {}, network: r.plan.profile.network } : { env: r.plan.env, network: undefined };
}

describe("a stdio server's secrets by placeholder", () => {
  it('a sandboxed server with network gets a placeholder, and its proxy the rule with the value', async () => {
    const { env, network } = await envAndNetwork(entry({ network: { allow_domains: ['api.test'] } }), true);
    expect(env.API_TOKEN).toMatch(/^forge-placeholder-[0-9a-f]{32}$/);
    expect(JSON.stringify(env)).not.toContain(TOKEN);
    expect(network?.placeholders).toEqual([{ ...inject, placeholder: env.API_TOKEN, value: TOKEN }]);
    expect(network?.upstreamCa).toEqual(['-----BEGIN CERTIFICATE-----\n…']);
    // A new placeholder at each start.
    const again = await envAndNetwork(entry({ network: { allow_domains: ['api.test'] } }), true);
    expect(again.env.API_TOKEN).not.toBe(env.API_TOKEN);
  });

  it('without network the value stays out all the same; without the policy entry, or unsandboxed, the value as before', async () => {
    const closed = await envAndNetwork(entry(), true);
    expect(closed.env.API_TOKEN).toMatch(/^forge-placeholder-/);
    expect(closed.network).toBeUndefined();
    expect((await envAndNetwork(entry({ network: { allow_domains: ['api.test'] } }), false)).env.API_TOKEN).toBe(TOKEN);
    expect((await envAndNetwork(entry({ unsandboxed: true }), true)).env.API_TOKEN).toBe(TOKEN);
  });
});
