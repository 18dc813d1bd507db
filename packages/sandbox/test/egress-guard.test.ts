/**
 * The egress guard as pure functions: the address classifier, the domain matcher and `decide()`
 * (with a resolver hook, so no DNS is involved).
 */
import { describe, expect, it } from 'vitest';
import { canonicalAddress } from '../src/egress/address.js';
import { checkDomainPattern, matchesDomain, normalizeHost } from '../src/egress/domains.js';
import { checkGrant, type Decision, decide, type NetworkGrant } from '../src/egress/guard.js';
import { classifyAddress } from '../src/index.js';

describe('classifyAddress', () => {
  const table: [address: string, kind: string, embedded?: string][] = [
    // IPv4
    ['8.8.8.8', 'public'],
    ['1.1.1.1', 'public'],
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'unspecified'],
    ['10.0.0.1', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['172.32.0.1', 'public'],
    ['192.168.1.1', 'private'],
    ['100.64.0.1', 'private'],
    ['100.127.255.255', 'private'],
    ['100.128.0.1', 'public'],
    ['169.254.1.1', 'link_local'],
    ['169.254.169.254', 'metadata'],
    ['169.254.170.2', 'metadata'],
    ['100.100.100.200', 'metadata'],
    ['192.0.0.192', 'metadata'],
    ['168.63.129.16', 'metadata'],
    ['224.0.0.1', 'multicast'],
    ['239.255.255.250', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['240.0.0.1', 'reserved'],
    ['192.0.2.1', 'reserved'],
    ['198.18.0.1', 'reserved'],
    ['198.51.100.7', 'reserved'],
    ['203.0.113.9', 'reserved'],
    // IPv6
    ['2606:4700:4700::1111', 'public'],
    ['::1', 'loopback'],
    ['0:0:0:0:0:0:0:1', 'loopback'],
    ['::', 'unspecified'],
    ['fe80::1', 'link_local'],
    ['fe80::1%eth0', 'link_local'],
    ['fc00::1', 'private'],
    ['fd12:3456::1', 'private'],
    ['fec0::1', 'private'],
    ['ff02::1', 'multicast'],
    ['2001:db8::1', 'reserved'],
    ['2001::1', 'reserved'],
    ['100::1', 'reserved'],
    ['4000::1', 'reserved'],
    ['fd00:ec2::254', 'metadata'],
    ['FD00:EC2:0:0:0:0:0:254', 'metadata'],
    ['fd20:ce::254', 'metadata'],
    // IPv6 forms that carry an IPv4 address get that address's class
    ['::ffff:127.0.0.1', 'loopback', '127.0.0.1'],
    ['::ffff:7f00:1', 'loopback', '127.0.0.1'],
    ['0:0:0:0:0:ffff:7f00:0001', 'loopback', '127.0.0.1'],
    ['::ffff:169.254.169.254', 'metadata', '169.254.169.254'],
    ['::ffff:a9fe:a9fe', 'metadata', '169.254.169.254'],
    ['::ffff:10.1.2.3', 'private', '10.1.2.3'],
    ['::ffff:8.8.8.8', 'public', '8.8.8.8'],
    ['::ffff:0:127.0.0.1', 'loopback', '127.0.0.1'],
    ['64:ff9b::127.0.0.1', 'loopback', '127.0.0.1'],
    ['64:ff9b::a9fe:a9fe', 'metadata', '169.254.169.254'],
    ['64:ff9b::192.168.0.1', 'private', '192.168.0.1'],
    ['64:ff9b::8.8.8.8', 'public', '8.8.8.8'],
    ['64:ff9b:1::1', 'reserved'],
    ['2002:7f00:1::', 'loopback', '127.0.0.1'],
    ['2002:a9fe:a9fe::1', 'metadata', '169.254.169.254'],
    ['::127.0.0.1', 'loopback', '127.0.0.1'],
    ['::169.254.169.254', 'metadata', '169.254.169.254'],
  ];
  it.each(table)('%s is %s', (address, kind, embedded) => {
    const c = classifyAddress(address);
    expect(c.kind).toBe(kind);
    expect(c.embedded).toBe(embedded);
  });

  it('throws on anything that is not an IP address', () => {
    for (const bad of ['localhost', '127.1', '2130706433', '0x7f.0.0.1', '1.2.3.4.5', '::ffff:999.1.1.1', '']) {
      expect(() => classifyAddress(bad), bad).toThrow(TypeError);
    }
  });

  it('canonical forms agree across spellings', () => {
    expect(canonicalAddress('::ffff:127.0.0.1')).toBe(canonicalAddress('0:0:0:0:0:ffff:7f00:1'));
    expect(canonicalAddress('FD00:EC2::254')).toBe('fd00:ec2:0:0:0:0:0:254');
    expect(canonicalAddress('not-an-ip')).toBeUndefined();
  });
});

describe('domain matching', () => {
  it.each([
    ['example.com', 'example.com', true],
    ['EXAMPLE.com.', 'example.com', true],
    ['example.com', 'Example.COM.', true],
    ['a.example.com', 'example.com', false],
    ['a.example.com', '*.example.com', true],
    ['a.b.example.com', '*.example.com', true],
    ['example.com', '*.example.com', false],
    ['badexample.com', '*.example.com', false],
    ['example.com.evil.net', '*.example.com', false],
    ['127.0.0.1', '127.0.0.1', true],
    ['::1', '0:0:0:0:0:0:0:1', true],
    ['127.0.0.1', '*.0.0.1', false],
    ['xn--bcher-kva.example', 'bücher.example', true],
  ])('%s against %s: %s', (host, pattern, expected) => {
    const h = normalizeHost(host);
    expect(h).toBeDefined();
    expect(matchesDomain(h?.host as string, pattern)).toBe(expected);
  });

  it('normalizes hosts, and refuses names the C resolver would read as IPv4', () => {
    expect(normalizeHost('[::1]')).toEqual({ kind: 'ip', host: '::1' });
    expect(normalizeHost('Example.COM.')).toEqual({ kind: 'name', host: 'example.com' });
    for (const bad of ['127.1', '2130706433', '0x7f.1', '0x7f000001', 'a b.com', '-a.com', 'a..com', '', 'a'.repeat(64)]) {
      expect(normalizeHost(bad), bad).toBeUndefined();
    }
  });

  it('checks patterns', () => {
    expect(checkDomainPattern('*.example.com')).toBeUndefined();
    expect(checkDomainPattern('example.com')).toBeUndefined();
    expect(checkDomainPattern('a.*.com')).toMatch(/first label/);
    expect(checkDomainPattern('*.')).toMatch(/not a domain/);
    expect(checkDomainPattern('exa mple.com')).toMatch(/not a domain/);
  });
});

describe('checkGrant', () => {
  it('accepts a policy grant and names the bad field otherwise', () => {
    const ok: NetworkGrant = {
      network: 'allow',
      loopback: 'deny',
      private_networks: 'deny',
      allow_domains: ['*.example.com'],
      deny_domains: [],
      allow_ports: [443],
    };
    expect(checkGrant(ok)).toBeUndefined();
    expect(checkGrant({ ...ok, loopback: 'yes' as 'allow' })).toMatch(/^grant.loopback/);
    expect(checkGrant({ ...ok, allow_ports: [0] })).toMatch(/^grant.allow_ports/);
    expect(checkGrant({ ...ok, allow_domains: ['a.*'] })).toMatch(/^grant.allow_domains entry "a.\*"/);
  });
});

describe('decide', () => {
  const hostAddresses = new Set(['192.0.2.2', canonicalAddress('fd00::2') as string, '127.0.0.1', canonicalAddress('::1') as string]);
  const names: Record<string, string[]> = {
    'public.test': ['93.184.215.14'],
    'v6.test': ['2606:4700::1'],
    'loop.test': ['127.0.0.1'],
    'mixed.test': ['93.184.215.14', '10.0.0.5'],
    'meta.test': ['169.254.169.254'],
    'private.test': ['10.0.0.5'],
    'host.test': ['192.0.2.2'],
    'mapped.test': ['::ffff:127.0.0.1'],
  };
  const calls: string[] = [];
  const resolver = async (h: string) => {
    calls.push(h);
    const a = names[h];
    if (!a) throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
    return a;
  };
  const grant: NetworkGrant = { network: 'allow' };
  const run = (host: string, port = 443, g: Partial<NetworkGrant> = {}) =>
    decide(host, port, { grant: { ...grant, ...g }, resolver, hostAddresses });
  const summary = (d: Decision) => (d.ok ? `ok ${d.rule} ${d.addresses.join(',')}` : `${d.rule}: ${d.message}`);

  it('allows public destinations and returns the checked addresses', async () => {
    expect(summary(await run('public.test'))).toBe('ok public 93.184.215.14');
    expect(summary(await run('8.8.8.8'))).toBe('ok public 8.8.8.8');
    expect(summary(await run('[2606:4700::1]'))).toBe('ok public 2606:4700::1');
  });

  it('refuses with a reason the tool can act on', async () => {
    expect(summary(await run('127.0.0.1'))).toMatchInlineSnapshot(
      `"loopback: blocked by forge policy: 127.0.0.1 is loopback — do not retry through another route"`,
    );
    expect(summary(await run('loop.test'))).toMatchInlineSnapshot(
      `"loopback: blocked by forge policy: loop.test resolves to 127.0.0.1, which is loopback — do not retry through another route"`,
    );
    expect(summary(await run('169.254.169.254', 80, { loopback: 'allow', private_networks: 'allow' }))).toMatchInlineSnapshot(
      `"metadata: blocked by forge policy: 169.254.169.254 is a cloud metadata endpoint: cloud metadata (AWS, GCP, Azure, OpenStack, …) — do not retry through another route"`,
    );
    expect(summary(await run('::ffff:169.254.169.254'))).toMatchInlineSnapshot(
      `"metadata: blocked by forge policy: ::ffff:169.254.169.254 is a cloud metadata endpoint: cloud metadata (AWS, GCP, Azure, OpenStack, …) (an IPv6 form of 169.254.169.254) — do not retry through another route"`,
    );
    expect(summary(await run('10.1.2.3'))).toMatchInlineSnapshot(
      `"private: blocked by forge policy: 10.1.2.3 is in a private range (10.0.0.0/8) — do not retry through another route"`,
    );
    expect(summary(await run('nowhere.test'))).toMatchInlineSnapshot(
      `"resolve_failed: forge egress proxy: cannot resolve nowhere.test (ENOTFOUND)"`,
    );
  });

  it('refuses every always-closed class, whatever the grant opens', async () => {
    const open = { loopback: 'allow', private_networks: 'allow' } as const;
    for (const [host, rule] of [
      ['0.0.0.0', 'unspecified'],
      ['::', 'unspecified'],
      ['169.254.1.1', 'link_local'],
      ['fe80::1', 'link_local'],
      ['224.0.0.1', 'multicast'],
      ['255.255.255.255', 'broadcast'],
      ['240.0.0.1', 'reserved'],
      ['fd00:ec2::254', 'metadata'],
      ['100.100.100.200', 'metadata'],
      ['meta.test', 'metadata'],
      ['64:ff9b::a9fe:a9fe', 'metadata'],
    ]) {
      const d = await run(host as string, 80, open);
      expect(d.ok ? 'ok' : d.rule, host).toBe(rule);
    }
  });

  it("refuses the host's own addresses, also in their mapped forms and with private ranges open", async () => {
    for (const host of ['192.0.2.2', 'fd00::2', '::ffff:192.0.2.2', 'host.test']) {
      const d = await run(host, 80, { loopback: 'allow', private_networks: 'allow' });
      expect(d.ok ? 'ok' : d.rule, host).toBe('host_address');
    }
  });

  it('opens loopback and private ranges only as granted', async () => {
    expect(summary(await run('loop.test', 80, { loopback: 'allow' }))).toBe('ok loopback 127.0.0.1');
    expect(summary(await run('mapped.test', 80, { loopback: 'allow' }))).toBe('ok loopback ::ffff:127.0.0.1');
    expect((await run('private.test', 80, { loopback: 'allow' })).ok).toBe(false);
    expect(summary(await run('private.test', 80, { private_networks: 'allow' }))).toBe('ok private 10.0.0.5');
    expect((await run('loop.test', 80, { private_networks: 'allow' })).ok).toBe(false);
  });

  it('checks every resolved address: one bad answer refuses the name', async () => {
    const d = await run('mixed.test');
    expect(d.ok ? 'ok' : `${d.rule} ${d.address}`).toBe('private 10.0.0.5');
  });

  it('resolves once per decision, and never for IP literals or names refused by the lists', async () => {
    calls.length = 0;
    await run('public.test');
    await run('8.8.8.8');
    await run('public.test', 443, { allow_domains: ['other.test'] });
    await run('public.test', 443, { deny_domains: ['*.test'] });
    await run('public.test', 22, { allow_ports: [443] });
    expect(calls).toEqual(['public.test']);
  });

  it('applies ports, deny-list over allow-list, and the allow-list to IP literals too', async () => {
    const lists = { allow_domains: ['*.test', '8.8.8.8'], deny_domains: ['meta.test'], allow_ports: [443, 8443] };
    const rule = async (host: string, port = 443) => {
      const d = await run(host, port, lists);
      return d.ok ? 'ok' : d.rule;
    };
    expect(await rule('public.test')).toBe('ok');
    expect(await rule('public.test', 80)).toBe('allow_ports');
    expect(await rule('meta.test')).toBe('deny_domains');
    expect(await rule('example.com')).toBe('allow_domains');
    expect(await rule('8.8.8.8')).toBe('ok');
    expect(await rule('1.1.1.1')).toBe('allow_domains');
    expect(await rule('127.1')).toBe('invalid_target');
    expect(await rule('public.test', 0)).toBe('invalid_target');
  });

  it('refuses a resolver answer that is not an address', async () => {
    const d = await decide('odd.test', 443, { grant, resolver: async () => ['localhost'], hostAddresses });
    expect(d.ok ? 'ok' : d.rule).toBe('resolve_failed');
  });
});
