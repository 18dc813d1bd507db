import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { type AddressKind, canonicalAddress, classifyAddress, metadataLabel } from './address.js';
import { checkDomainPattern, matchesDomain, normalizeHost } from './domains.js';

/**
 * The network a run may reach, decided by whoever embeds the sandbox (in forge, `@forge/policy`'s
 * `networkFor()`): the same plain shape, so a policy decision can be passed as it is.
 */
export interface NetworkGrant {
  /** `deny` (or anything but `allow`): no proxy, no route out; the sandbox is as without a grant. */
  network: 'allow' | 'deny';
  /** `allow`: loopback addresses of the host (`127.0.0.0/8`, `::1`) become reachable. Default `deny`. */
  loopback?: 'allow' | 'deny';
  /** `allow`: private ranges (`10/8`, `172.16/12`, `192.168/16`, `100.64/10`, `fc00::/7`) become reachable. Default `deny`. */
  private_networks?: 'allow' | 'deny';
  /** Names that may be reached: `example.com` or `*.example.com` (subdomains only). Empty or absent: any name. */
  allow_domains?: readonly string[];
  /** Names never reached, same syntax; wins over `allow_domains`. */
  deny_domains?: readonly string[];
  /** Destination ports that may be reached. Empty or absent: any port. */
  allow_ports?: readonly number[];
}

/** Resolves a host name to its IP addresses (all of them). The default uses the system resolver. */
export type Resolver = (hostname: string) => Promise<readonly string[]>;

/** Why the proxy did not connect. Stable strings. */
export type DenyRule =
  | 'invalid_target'
  | 'unsupported'
  | 'allow_ports'
  | 'deny_domains'
  | 'allow_domains'
  | 'resolve_failed'
  | 'host_address'
  | 'connection_limit'
  | Exclude<AddressKind, 'public'>;

/** The class of address a connection was allowed to: `public`, or what the grant opened. */
export type AllowRule = 'public' | 'loopback' | 'private';

export type Decision =
  | { ok: true; host: string; port: number; addresses: string[]; rule: AllowRule }
  | { ok: false; host: string; port: number; address?: string; rule: DenyRule; message: string };

export interface GuardContext {
  grant: NetworkGrant;
  resolver: Resolver;
  /** Canonical addresses of this host's interfaces. */
  hostAddresses: ReadonlySet<string>;
}

const defaultResolver: Resolver = async (hostname) => (await lookup(hostname, { all: true, verbatim: true })).map((a) => a.address);

export { defaultResolver };

/** Canonical text of every address of this host's interfaces, read now. */
export function hostAddresses(): Set<string> {
  const out = new Set<string>();
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) {
      const c = canonicalAddress(a.address);
      if (c) out.add(c);
    }
  }
  return out;
}

/** Checks a grant's shape; returns what is wrong with it, naming the field. */
export function checkGrant(grant: NetworkGrant): string | undefined {
  if (grant === null || typeof grant !== 'object') return 'grant must be an object';
  for (const k of ['network', 'loopback', 'private_networks'] as const) {
    const v = grant[k];
    if (v !== undefined && v !== 'allow' && v !== 'deny') return `grant.${k} must be "allow" or "deny" (got ${JSON.stringify(v)})`;
  }
  for (const k of ['allow_domains', 'deny_domains'] as const) {
    const list = grant[k] ?? [];
    if (!Array.isArray(list)) return `grant.${k} must be an array of domain patterns`;
    for (const p of list) {
      const why = checkDomainPattern(p);
      if (why) return `grant.${k} entry ${JSON.stringify(p)}: ${why}`;
    }
  }
  const ports = grant.allow_ports ?? [];
  if (!Array.isArray(ports) || !ports.every((p) => Number.isInteger(p) && p >= 1 && p <= 65535)) {
    return `grant.allow_ports must be an array of port numbers 1–65535 (got ${JSON.stringify(ports)})`;
  }
  return undefined;
}

const KIND_TEXT: Record<Exclude<AddressKind, 'public'>, string> = {
  loopback: 'loopback',
  private: 'in a private range',
  unspecified: 'an unspecified ("this network") address',
  link_local: 'link-local',
  metadata: 'a cloud metadata endpoint',
  multicast: 'multicast',
  broadcast: 'broadcast',
  reserved: 'in a reserved range',
};

/** The sentence every refusal ends with: the tool should stop, not look for a way around. */
export function blocked(what: string): string {
  return `blocked by forge policy: ${what} — do not retry through another route`;
}

function list(xs: readonly (string | number)[]): string {
  return xs.join(', ');
}

/**
 * Decides whether `host:port` may be reached, resolving a name exactly once: every address the
 * name resolves to must pass, and the addresses returned are the ones to connect to (never
 * resolve again, or a second answer could differ from the checked one). Order of checks:
 * target syntax, port allow-list, domain deny-list then allow-list, resolution, then per address
 * cloud metadata, this host's own addresses, and the address class (loopback and private ranges
 * as the grant says; link-local, multicast, broadcast, unspecified and reserved never).
 */
export async function decide(rawHost: string, port: number, ctx: GuardContext): Promise<Decision> {
  const { grant } = ctx;
  let target: ReturnType<typeof normalizeHost>;
  const deny = (rule: DenyRule, message: string, address?: string): Decision => ({
    ok: false,
    host: target?.host ?? rawHost,
    port,
    ...(address !== undefined ? { address } : {}),
    rule,
    message,
  });
  if (!Number.isInteger(port) || port < 1 || port > 65535) return deny('invalid_target', `port ${port} is not a valid port`);
  target = normalizeHost(rawHost);
  if (!target) {
    return deny('invalid_target', `${JSON.stringify(rawHost)} is not a host name or IP address (numeric names like 127.1 are refused)`);
  }
  const host = target.host;
  const ports = grant.allow_ports ?? [];
  if (ports.length > 0 && !ports.includes(port)) {
    return deny('allow_ports', blocked(`port ${port} is not in the allowed ports (${list(ports)})`));
  }
  const denied = (grant.deny_domains ?? []).find((p) => matchesDomain(host, p));
  if (denied !== undefined) return deny('deny_domains', blocked(`${host} is in the denied domains (${denied})`));
  const allowed = grant.allow_domains ?? [];
  if (allowed.length > 0 && !allowed.some((p) => matchesDomain(host, p))) {
    return deny('allow_domains', blocked(`${host} is not in the allowed domains (${list(allowed)})`));
  }

  let addresses: string[];
  if (target.kind === 'ip') {
    addresses = [host];
  } else {
    try {
      addresses = [...(await ctx.resolver(host))];
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      return deny('resolve_failed', `forge egress proxy: cannot resolve ${host} (${code})`);
    }
    if (addresses.length === 0 || !addresses.every((a) => typeof a === 'string' && isIP(a) !== 0)) {
      return deny('resolve_failed', `forge egress proxy: cannot resolve ${host} (no addresses)`);
    }
  }

  let rule: AllowRule = 'public';
  for (const address of addresses) {
    const says = target.kind === 'ip' ? host : `${host} resolves to ${address}, which`;
    const cls = classifyAddress(address);
    const form = cls.embedded ? ` (an IPv6 form of ${cls.embedded})` : '';
    // The range says which one for the kinds that span several.
    const range = (cls.kind === 'private' || cls.kind === 'reserved') && cls.range ? ` (${cls.range})` : '';
    if (cls.kind === 'metadata') {
      const label = metadataLabel(cls.embedded ?? address);
      return deny('metadata', blocked(`${says} is ${KIND_TEXT.metadata}${label ? `: ${label}` : ''}${form}`), address);
    }
    const canonical = canonicalAddress(address) as string;
    const isHost = ctx.hostAddresses.has(canonical) || (cls.embedded !== undefined && ctx.hostAddresses.has(cls.embedded));
    if (isHost && cls.kind !== 'loopback') return deny('host_address', blocked(`${says} is an address of this host${form}`), address);
    if (cls.kind === 'public') continue;
    const open = (cls.kind === 'loopback' && grant.loopback === 'allow') || (cls.kind === 'private' && grant.private_networks === 'allow');
    if (!open) {
      return deny(cls.kind, blocked(`${says} is ${KIND_TEXT[cls.kind]}${range}${form}`), address);
    }
    if (rule === 'public') rule = cls.kind as AllowRule;
  }
  return { ok: true, host, port, addresses, rule };
}
