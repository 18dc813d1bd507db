import { createHash, generateKeyPairSync, type KeyObject, randomBytes, sign } from 'node:crypto';
import { isIP } from 'node:net';

/**
 * A certificate authority of one run, for the egress proxy's TLS interception (secrets
 * substituted at the proxy, never in the sandbox): the run's trust store holds its certificate,
 * its key never leaves this process, and it certifies only the hosts it was made for. Its
 * certificate carries X.509 name constraints naming exactly those hosts, so a leaf it signed for
 * any other name is refused by the client's own verification (OpenSSL, Node, curl), whatever
 * became of the key; a leaf is minted per host on first use and kept while the CA lives.
 *
 * Certificates are ECDSA P-256 with SHA-256, written here in DER (RFC 5280): the fields below and
 * nothing else, so what a client sees is all in this file.
 */
export interface RunCa {
  /** The CA certificate (PEM): what the run's trust store adds. */
  readonly certPem: string;
  /** The hosts it certifies (lower-case names, or IP literals). */
  readonly hosts: readonly string[];
  /** The leaf certificate and key (PEM) for `host`, one of {@link hosts}; throws for any other. */
  leaf(host: string): { certPem: string; keyPem: string };
}

/** How long a run's certificates are valid: from a little before now (clock skew) for a day. */
const SKEW_MS = 5 * 60_000;
const LIFETIME_MS = 24 * 3_600_000;

/**
 * A new CA for a run that may reach `hosts` (host names or IP literals, at least one). `label`
 * names it in its subject (the run, for whoever reads the certificate).
 */
export function mintRunCa(hosts: readonly string[], label = 'forge run', now = new Date()): RunCa {
  const names = [...new Set(hosts.map(normalHost))];
  if (names.length === 0) throw new Error('a run CA needs at least one host to certify');
  const ca = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const caSpki = ca.publicKey.export({ type: 'spki', format: 'der' });
  const caKeyId = keyId(caSpki);
  const subject = distinguishedName(`${label} CA`);
  const validity = validityOf(now);
  const certPem = certificate(ca.privateKey, {
    issuer: subject,
    subject,
    validity,
    spki: caSpki,
    extensions: [
      extension(OID.basicConstraints, true, seq(bool(true), int(Buffer.from([0])))),
      extension(OID.keyUsage, true, keyUsageBits(KEY_CERT_SIGN | CRL_SIGN)),
      extension(OID.subjectKeyId, false, octets(caKeyId)),
      extension(OID.nameConstraints, true, seq(ctx(0, true, Buffer.concat(names.map((h) => seq(generalName(h, true))))))),
    ],
  });
  const leaves = new Map<string, { certPem: string; keyPem: string }>();
  return {
    certPem,
    hosts: names,
    leaf(host) {
      const name = normalHost(host);
      if (!names.includes(name)) throw new Error(`this run's CA certifies ${names.join(', ')}, not ${host}`);
      let leaf = leaves.get(name);
      if (!leaf) {
        const key = generateKeyPairSync('ec', { namedCurve: 'P-256' });
        const spki = key.publicKey.export({ type: 'spki', format: 'der' });
        leaf = {
          certPem: certificate(ca.privateKey, {
            issuer: subject,
            // No subject: the name is in the subjectAltName (critical, as RFC 5280 asks then), where
            // clients look; a common name that is an address would be checked as a DNS name
            // against the CA's constraints.
            subject: seq(),
            validity,
            spki,
            extensions: [
              extension(OID.basicConstraints, true, seq()),
              extension(OID.keyUsage, true, keyUsageBits(DIGITAL_SIGNATURE)),
              extension(OID.extKeyUsage, false, seq(oid(OID.serverAuth))),
              extension(OID.subjectAltName, true, seq(generalName(name, false))),
              extension(OID.subjectKeyId, false, octets(keyId(spki))),
              extension(OID.authorityKeyId, false, seq(ctx(0, false, caKeyId))),
            ],
          }),
          keyPem: key.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
        };
        leaves.set(name, leaf);
      }
      return leaf;
    },
  };
}

/** A host as certificates name it: a lower-case DNS name without a trailing dot, or an IP literal. */
function normalHost(host: string): string {
  const h = host.trim().replace(/^\[(.*)\]$/, '$1');
  if (isIP(h)) return h;
  const name = h.toLowerCase().replace(/\.$/, '');
  if (!/^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*$/.test(name))
    throw new Error(`"${host}" is not a host name or IP address a certificate can name`);
  return name;
}

// ——— DER, as much as these certificates need ———

const OID = {
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  commonName: '2.5.4.3',
  subjectKeyId: '2.5.29.14',
  keyUsage: '2.5.29.15',
  subjectAltName: '2.5.29.17',
  basicConstraints: '2.5.29.19',
  nameConstraints: '2.5.29.30',
  authorityKeyId: '2.5.29.35',
  extKeyUsage: '2.5.29.37',
  serverAuth: '1.3.6.1.5.5.7.3.1',
} as const;

const DIGITAL_SIGNATURE = 0x80;
const KEY_CERT_SIGN = 0x04;
const CRL_SIGN = 0x02;

function tlv(tag: number, content: Buffer): Buffer {
  const n = content.length;
  let len: Buffer;
  if (n < 0x80) len = Buffer.from([n]);
  else {
    const bytes: number[] = [];
    for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
    len = Buffer.from([0x80 | bytes.length, ...bytes]);
  }
  return Buffer.concat([Buffer.from([tag]), len, content]);
}

const seq = (...parts: Buffer[]) => tlv(0x30, Buffer.concat(parts));
const set = (...parts: Buffer[]) => tlv(0x31, Buffer.concat(parts));
const bool = (v: boolean) => tlv(0x01, Buffer.from([v ? 0xff : 0]));
const octets = (b: Buffer) => tlv(0x04, b);
const utf8 = (s: string) => tlv(0x0c, Buffer.from(s, 'utf8'));
/** A context-specific tag `n`: constructed (explicit, or an implicit SEQUENCE) or primitive. */
const ctx = (n: number, constructed: boolean, content: Buffer) => tlv((constructed ? 0xa0 : 0x80) | n, content);

/** A non-negative INTEGER from big-endian bytes. */
function int(bytes: Buffer): Buffer {
  let i = 0;
  while (i < bytes.length - 1 && bytes[i] === 0) i++;
  const b = bytes.subarray(i);
  return tlv(0x02, (b[0] as number) & 0x80 ? Buffer.concat([Buffer.from([0]), b]) : b);
}

function oid(dotted: string): Buffer {
  const [a, b, ...rest] = dotted.split('.').map(Number) as [number, number, ...number[]];
  const out = [40 * a + b];
  for (const v of rest) {
    const sevens: number[] = [v & 0x7f];
    for (let x = Math.floor(v / 128); x > 0; x = Math.floor(x / 128)) sevens.unshift(0x80 | (x & 0x7f));
    out.push(...sevens);
  }
  return tlv(0x06, Buffer.from(out));
}

function bits(b: Buffer, unused = 0): Buffer {
  return tlv(0x03, Buffer.concat([Buffer.from([unused]), b]));
}

/** KeyUsage: one byte of flags, its trailing zero bits not counted (DER). */
function keyUsageBits(flags: number): Buffer {
  let unused = 0;
  while (unused < 7 && !(flags & (1 << unused))) unused++;
  return bits(Buffer.from([flags]), unused);
}

function time(d: Date): Buffer {
  const iso = d.toISOString(); // YYYY-MM-DDTHH:MM:SS.sssZ
  const digits = iso.slice(0, 19).replace(/[-:T]/g, '');
  // UTCTime through 2049, GeneralizedTime after (RFC 5280 4.1.2.5).
  return d.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(`${digits.slice(2)}Z`)) : tlv(0x18, Buffer.from(`${digits}Z`));
}

function validityOf(now: Date): Buffer {
  return seq(time(new Date(now.getTime() - SKEW_MS)), time(new Date(now.getTime() + LIFETIME_MS)));
}

function distinguishedName(cn: string): Buffer {
  return seq(set(seq(oid(OID.commonName), utf8(cn.slice(0, 64)))));
}

function extension(id: string, critical: boolean, value: Buffer): Buffer {
  return seq(oid(id), ...(critical ? [bool(true)] : []), octets(value));
}

/** A GeneralName for `host`: dNSName, or iPAddress (with an all-ones mask in a name constraint). */
function generalName(host: string, constraint: boolean): Buffer {
  const family = isIP(host);
  if (family === 0) return ctx(2, false, Buffer.from(host, 'ascii'));
  const addr = family === 4 ? Buffer.from(host.split('.').map(Number)) : ipv6Bytes(host);
  return ctx(7, false, constraint ? Buffer.concat([addr, Buffer.alloc(addr.length, 0xff)]) : addr);
}

function ipv6Bytes(host: string): Buffer {
  const [head = '', tail = ''] = host.split('::');
  const groups = (s: string) => (s ? s.split(':') : []);
  let h = groups(head);
  let t = groups(tail);
  // A dotted IPv4 tail (::ffff:1.2.3.4) is two groups.
  const v4 = (g: string[]) => {
    const last = g[g.length - 1];
    if (!last?.includes('.')) return g;
    const [a, b, c, d] = last.split('.').map(Number) as [number, number, number, number];
    return [...g.slice(0, -1), ((a << 8) | b).toString(16), ((c << 8) | d).toString(16)];
  };
  if (host.includes('::')) t = v4(t);
  else h = v4(h);
  const fill = host.includes('::') ? Array.from({ length: 8 - h.length - t.length }, () => '0') : [];
  const out = Buffer.alloc(16);
  [...h, ...fill, ...t].forEach((g, i) => {
    out.writeUInt16BE(Number.parseInt(g, 16), i * 2);
  });
  return out;
}

/** The key identifier of a public key: SHA-1 of its key bits (RFC 5280 4.2.1.2, method 1), from its SPKI. */
function keyId(spki: Buffer): Buffer {
  // An EC P-256 SPKI ends with the BIT STRING of the 65-byte point (tag, length, unused-bits byte).
  return createHash('sha1')
    .update(spki.subarray(spki.length - 65))
    .digest();
}

function certificate(
  signer: KeyObject,
  c: { issuer: Buffer; subject: Buffer; validity: Buffer; spki: Buffer; extensions: Buffer[] },
): string {
  const serial = randomBytes(16);
  serial[0] = ((serial[0] as number) & 0x7f) | 0x01; // positive, and 16 bytes long
  const algorithm = seq(oid(OID.ecdsaWithSha256));
  const tbs = seq(
    ctx(0, true, int(Buffer.from([2]))), // v3
    int(serial),
    algorithm,
    c.issuer,
    c.validity,
    c.subject,
    c.spki,
    ctx(3, true, seq(...c.extensions)),
  );
  const der = seq(tbs, algorithm, bits(sign('sha256', tbs, signer)));
  const b64 = der.toString('base64').replace(/.{1,64}/g, '$&\n');
  return `-----BEGIN CERTIFICATE-----\n${b64}-----END CERTIFICATE-----\n`;
}
