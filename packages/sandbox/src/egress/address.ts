import { isIP } from 'node:net';

/**
 * What an IP address is, as far as egress is concerned. Only `public` is reachable by default;
 * `loopback` and `private` open with the grant; every other kind is always refused.
 */
export type AddressKind =
  | 'public'
  | 'loopback'
  | 'private'
  | 'unspecified'
  | 'link_local'
  | 'metadata'
  | 'multicast'
  | 'broadcast'
  | 'reserved';

/** The class of one address, with the range that decided it. */
export interface AddressClass {
  kind: AddressKind;
  /** The range or endpoint that matched (`127.0.0.0/8`, `169.254.169.254`), absent for `public`. */
  range?: string;
  /** For an IPv6 form that carries an IPv4 address (mapped, NAT64, 6to4, …): that address. */
  embedded?: string;
}

/** Cloud metadata and platform endpoints, refused even when private ranges or loopback are allowed. */
const METADATA = new Map<string, string>([
  ['169.254.169.254', 'cloud metadata (AWS, GCP, Azure, OpenStack, …)'],
  ['169.254.170.2', 'AWS ECS task metadata'],
  ['169.254.170.23', 'AWS EKS pod identity'],
  ['169.254.0.23', 'Tencent Cloud metadata'],
  ['169.254.42.42', 'Scaleway metadata'],
  ['100.100.100.200', 'Alibaba Cloud metadata'],
  ['192.0.0.192', 'Oracle Cloud metadata'],
  ['168.63.129.16', 'Azure WireServer'],
  ['fd00:ec2:0:0:0:0:0:254', 'AWS metadata (IPv6)'],
  ['fd00:ec2:0:0:0:0:0:23', 'AWS EKS pod identity (IPv6)'],
  ['fd20:ce:0:0:0:0:0:254', 'GCP metadata (IPv6)'],
]);

type Row = readonly [prefix: string, bits: number, kind: AddressKind];

// First match wins; anything unmatched is public.
const V4: readonly Row[] = [
  ['0.0.0.0', 8, 'unspecified'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'private'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link_local'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'reserved'],
  ['192.0.2.0', 24, 'reserved'],
  ['192.88.99.0', 24, 'reserved'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'reserved'],
  ['198.51.100.0', 24, 'reserved'],
  ['203.0.113.0', 24, 'reserved'],
  ['224.0.0.0', 4, 'multicast'],
  ['255.255.255.255', 32, 'broadcast'],
  ['240.0.0.0', 4, 'reserved'],
];

// Forms that carry an IPv4 address are handled before this table (see embeddedV4).
const V6: readonly Row[] = [
  ['::', 128, 'unspecified'],
  ['::1', 128, 'loopback'],
  ['64:ff9b:1::', 48, 'reserved'],
  ['100::', 64, 'reserved'],
  ['2001::', 32, 'reserved'], // Teredo: the IPv4 inside is obfuscated, and a relay is involved
  ['2001:10::', 28, 'reserved'],
  ['2001:20::', 28, 'reserved'],
  ['2001:db8::', 32, 'reserved'],
  ['3fff::', 20, 'reserved'],
  ['fc00::', 7, 'private'],
  ['fec0::', 10, 'private'],
  ['fe80::', 10, 'link_local'],
  ['ff00::', 8, 'multicast'],
  ['2000::', 3, 'public'],
  ['::', 0, 'reserved'], // outside global unicast: unassigned
];

/** The 4 bytes of a dotted-quad IPv4 address. */
function v4Bytes(a: string): number[] {
  return a.split('.').map(Number);
}

/**
 * The 16 bytes of an IPv6 address (`::` compression, a trailing dotted quad, a `%zone` suffix),
 * or undefined when `a` is not one.
 */
export function ipv6Bytes(a: string): number[] | undefined {
  const s = a.replace(/%.*$/, '');
  if (isIP(s) !== 6) return undefined;
  let head = s;
  let tail4: number[] = [];
  const lastColon = s.lastIndexOf(':');
  if (s.slice(lastColon + 1).includes('.')) {
    tail4 = v4Bytes(s.slice(lastColon + 1));
    head = `${s.slice(0, lastColon + 1)}0:0`; // placeholder groups, replaced below
  }
  const [l, r] = head.includes('::') ? (head.split('::') as [string, string]) : [head, undefined];
  const left = l ? l.split(':') : [];
  const right = r ? r.split(':') : [];
  const groups = r === undefined ? left : [...left, ...new Array(8 - left.length - right.length).fill('0'), ...right];
  const bytes: number[] = [];
  for (const g of groups) {
    const n = Number.parseInt(g || '0', 16);
    bytes.push(n >> 8, n & 0xff);
  }
  if (tail4.length === 4) bytes.splice(12, 4, ...tail4);
  return bytes;
}

function matches(bytes: readonly number[], prefix: readonly number[], bits: number): boolean {
  for (let i = 0; i < bits; i += 8) {
    const take = Math.min(8, bits - i);
    const mask = (0xff << (8 - take)) & 0xff;
    if (((bytes[i / 8] as number) & mask) !== ((prefix[i / 8] as number) & mask)) return false;
  }
  return true;
}

const V4_ROWS = V4.map(([p, bits, kind]) => ({ bytes: v4Bytes(p), bits, kind, range: `${p}/${bits}` }));
// Built on first use: parsing IPv6 text compiles node's address patterns, which a process that
// never guards an address (most of them) need not pay for at load.
let v6Rows: { bytes: number[]; bits: number; kind: AddressKind; range: string }[] | undefined;
const V6_ROWS = () => (v6Rows ??= V6.map(([p, bits, kind]) => ({ bytes: ipv6Bytes(p) as number[], bits, kind, range: `${p}/${bits}` })));

/** The canonical text of an address: dotted quad, or eight lowercase hex groups without compression. */
export function canonicalAddress(a: string): string | undefined {
  if (isIP(a) === 4) return a;
  const b = ipv6Bytes(a);
  if (!b) return undefined;
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((((b[i] as number) << 8) | (b[i + 1] as number)).toString(16));
  return groups.join(':');
}

/**
 * The IPv4 address an IPv6 address stands for: IPv4-mapped (`::ffff:0:0/96`), IPv4-translated
 * (`::ffff:0:0:0/96`), IPv4-compatible (`::/96`, deprecated, but kernels may still route it),
 * NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`). Undefined for any other address.
 */
export function embeddedV4(bytes: readonly number[]): string | undefined {
  const zero = (from: number, to: number) => bytes.slice(from, to).every((x) => x === 0);
  const last4 = bytes.slice(12, 16).join('.');
  if (zero(0, 10) && bytes[10] === 0xff && bytes[11] === 0xff) return last4;
  if (zero(0, 8) && bytes[8] === 0xff && bytes[9] === 0xff && zero(10, 12)) return last4;
  if (matches(bytes, ipv6Bytes('64:ff9b::') as number[], 96)) return last4;
  if (bytes[0] === 0x20 && bytes[1] === 0x02) return bytes.slice(2, 6).join('.');
  // ::/96 with something in the last 32 bits other than :: and ::1.
  if (zero(0, 12) && !(zero(12, 15) && (bytes[15] === 0 || bytes[15] === 1))) return last4;
  return undefined;
}

function classifyV4(a: string): AddressClass {
  if (METADATA.has(a)) return { kind: 'metadata', range: a };
  const b = v4Bytes(a);
  for (const row of V4_ROWS) if (matches(b, row.bytes, row.bits)) return { kind: row.kind, range: row.range };
  return { kind: 'public' };
}

/**
 * Classifies an IP address (v4 or v6, any textual form `net.isIP` accepts, with or without a
 * `%zone`). An IPv6 form that carries an IPv4 address gets the class of that address, so
 * `::ffff:127.0.0.1` and `64:ff9b::a9fe:a9fe` are as refused as `127.0.0.1` and
 * `169.254.169.254`. Throws a TypeError when `address` is not an IP address.
 */
export function classifyAddress(address: string): AddressClass {
  if (isIP(address) === 4) return classifyV4(address);
  const bytes = ipv6Bytes(address);
  if (!bytes) throw new TypeError(`not an IP address: ${JSON.stringify(address)}`);
  const canonical = canonicalAddress(address) as string;
  if (METADATA.has(canonical)) return { kind: 'metadata', range: address };
  const v4 = embeddedV4(bytes);
  if (v4 !== undefined) return { ...classifyV4(v4), embedded: v4 };
  for (const row of V6_ROWS()) {
    if (matches(bytes, row.bytes, row.bits)) return row.kind === 'public' ? { kind: 'public' } : { kind: row.kind, range: row.range };
  }
  return { kind: 'reserved', range: '::/0' };
}

/** What a metadata endpoint is, for messages. */
export function metadataLabel(address: string): string | undefined {
  return METADATA.get(canonicalAddress(address) ?? address);
}
