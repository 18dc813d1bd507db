/**
 * Secrets by placeholder at the egress proxy (egress/intercept.ts), on the host, without a
 * sandbox: a real HTTPS server on loopback with its own CA (trusted by the proxy, not by the
 * client), the proxy with the run's CA (trusted by the client), and real clients (curl, Python)
 * that hold only the placeholder.
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import type { Server } from 'node:net';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { tempDir } from '@forge/test-utils';
import { beforeAll, describe, expect, it } from 'vitest';
import { mintRunCa } from '../src/egress/ca.js';
import type { SecretRule } from '../src/egress/intercept.js';
import { EgressProxy, type NetworkEvent } from '../src/egress/proxy.js';
import { attachProxy, listenLoopback as listen, runCommand } from './helpers.js';

const PLACEHOLDER = 'forge-secret-7f3a9c1e2b';
const VALUE = 'sk-live-REAL-0123456789';

beforeAll(() => {
  for (const cmd of ['curl', 'python3']) {
    const r = spawnSync(cmd, ['--version'], { stdio: 'ignore' });
    if (r.error) throw new Error(`this test needs ${cmd}: apt-get install -y ${cmd} (${r.error.message})`);
  }
});

interface Seen {
  path: string;
  authorization?: string;
  other?: string;
  body: string;
  complete: boolean;
}

/** The real host: HTTPS with a CA of its own; records what it got; `/echo` sends the Authorization back, `/gzip` answers gzip. */
async function realHost(name: string): Promise<{ port: number; seen: Seen[]; caPem: string }> {
  const ca = mintRunCa([name]);
  const { certPem, keyPem } = ca.leaf(name);
  const seen: Seen[] = [];
  const server = createHttpsServer({ cert: certPem, key: keyPem }, (req, res) => {
    const s: Seen = {
      path: req.url ?? '',
      ...(req.headers.authorization ? { authorization: req.headers.authorization } : {}),
      ...(req.headers['x-other'] ? { other: String(req.headers['x-other']) } : {}),
      body: '',
      complete: false,
    };
    seen.push(s);
    req.on('data', (c) => {
      s.body += c;
    });
    req.on('end', () => {
      s.complete = true;
      const auth = String(req.headers.authorization ?? '');
      if (s.path === '/gzip') {
        res.writeHead(200, { 'content-encoding': 'gzip' });
        return res.end(gzipSync(auth));
      }
      if (s.path === '/echo') {
        res.writeHead(200, `OK ${auth}`, { 'x-echo': auth });
        // In pieces, so that the value is split across chunks.
        const text = `you sent ${auth} and ${auth}.`;
        res.write(text.slice(0, 13));
        res.write(text.slice(13, 20));
        return res.end(text.slice(20));
      }
      res.end(`ok ${s.path}`);
    });
  });
  const port = await listen(server as unknown as Server);
  return { port, seen, caPem: ca.certPem };
}

async function fixture(o: { trustUpstream?: boolean } = {}) {
  const api = await realHost('api.test');
  const other = await realHost('other.test');
  const runCa = mintRunCa(['api.test']);
  const dir = await tempDir();
  const caFile = join(dir, 'run-ca.pem');
  writeFileSync(caFile, runCa.certPem);
  const otherCaFile = join(dir, 'other-ca.pem');
  writeFileSync(otherCaFile, other.caPem);
  const rule: SecretRule = {
    name: 'API_KEY',
    placeholder: PLACEHOLDER,
    value: VALUE,
    hosts: ['api.test'],
    headers: ['authorization'],
    format: 'Bearer {}',
  };
  const events: NetworkEvent[] = [];
  const proxy = new EgressProxy({
    grant: { network: 'allow', loopback: 'allow', allow_domains: ['api.test', 'other.test'] },
    resolver: async () => ['127.0.0.1'],
    onEvent: (e) => events.push(e),
    maxConnections: 16,
    idleTimeoutMs: 10_000,
    connectTimeoutMs: 5_000,
    hostAddresses: new Set(),
    substitution: { ca: runCa, rules: [rule], ...(o.trustUpstream === false ? {} : { upstreamCa: [api.caPem] }) },
  });
  const { http, socks } = await attachProxy(proxy);
  /** curl through the proxy (HTTP CONNECT, or SOCKS5 with `socks`), trusting the run's CA only. */
  const curl = (args: string[], socks5 = false) =>
    runCommand('curl', [
      '-sS',
      '-i',
      '--max-time',
      '30',
      ...(socks5 ? ['--socks5-hostname', `127.0.0.1:${socks}`] : ['-x', `http://127.0.0.1:${http}`]),
      '--cacert',
      caFile,
      ...args,
    ]);
  const url = (path: string) => `https://api.test:${api.port}${path}`;
  return {
    api,
    other,
    events,
    curl,
    url,
    caFile,
    otherCaFile,
    http,
    secretEvents: () => events.filter((e) => e.type.startsWith('secret.')),
  };
}

const bearer = ['-H', `Authorization: Bearer ${PLACEHOLDER}`];

/** The status of the last response curl printed (the proxy's own `200 Connection Established` comes first). */
const status = (out: string) => [...out.matchAll(/^HTTP\/1\.1 (\d{3})/gm)].at(-1)?.[1];

describe('secrets by placeholder at the egress proxy', () => {
  it('puts the real value in the named header only, over a verified connection; the answer comes back with the placeholder', async () => {
    const f = await fixture();
    const r = await f.curl([...bearer, f.url('/v1/things')]);
    expect(r.code, r.err).toBe(0);
    expect(status(r.out)).toBe('200');
    expect(r.out).toContain('ok /v1/things');
    expect(f.api.seen).toEqual([{ path: '/v1/things', authorization: `Bearer ${VALUE}`, body: '', complete: true }]);
    expect(f.secretEvents()).toEqual([
      { type: 'secret.substituted', secret: 'API_KEY', host: 'api.test', port: f.api.port, header: 'authorization' },
    ]);
    // An echo of the value, in a header and split across body chunks, reaches the tool as the placeholder.
    const echo = await f.curl([...bearer, f.url('/echo')]);
    expect(echo.code, echo.err).toBe(0);
    expect(echo.out).not.toContain(VALUE);
    expect(echo.out).toContain(`x-echo: Bearer ${PLACEHOLDER}`);
    expect(echo.out).toContain(`200 OK Bearer ${PLACEHOLDER}`); // the status line too
    expect(echo.out).toContain(`you sent Bearer ${PLACEHOLDER} and Bearer ${PLACEHOLDER}.`);
    expect(f.secretEvents().map((e) => `${e.type} ${'where' in e ? e.where : ''}`)).toEqual(
      expect.arrayContaining(['secret.scrubbed response headers', 'secret.scrubbed response body']),
    );
    // No event carries the value.
    expect(JSON.stringify(f.events)).not.toContain(VALUE);
  });

  it('intercepts the host however its name is spelt: case, a trailing dot', async () => {
    const f = await fixture();
    const r = await f.curl([...bearer, '--resolve', `API.Test.:${f.api.port}:127.0.0.1`, `https://API.Test.:${f.api.port}/spelt`]);
    expect(r.code, r.err).toBe(0);
    expect(f.api.seen).toEqual([{ path: '/spelt', authorization: `Bearer ${VALUE}`, body: '', complete: true }]);
  });

  it('keeps the connection for the next request, and serves SOCKS5 and Python as it serves curl', async () => {
    const f = await fixture();
    const two = await f.curl([...bearer, f.url('/one'), f.url('/two')]);
    expect(two.code, two.err).toBe(0);
    expect(f.api.seen.map((s) => `${s.path} ${s.authorization}`)).toEqual([`/one Bearer ${VALUE}`, `/two Bearer ${VALUE}`]);
    expect(f.events.filter((e) => e.type === 'network.allowed')).toHaveLength(1); // one connection, kept
    const socks = await f.curl([...bearer, f.url('/socks')], true);
    expect(socks.code, socks.err).toBe(0);
    expect(f.api.seen.at(-1)).toMatchObject({ path: '/socks', authorization: `Bearer ${VALUE}` });
    const { code, out, err } = await runCommand('python3', [
      '-c',
      `import ssl, urllib.request
ctx = ssl.create_default_context(cafile=${JSON.stringify(f.caFile)})
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"https": "http://127.0.0.1:${f.http}"}), urllib.request.HTTPSHandler(context=ctx))
req = urllib.request.Request(${JSON.stringify(f.url('/python'))}, headers={"Authorization": "Bearer ${PLACEHOLDER}"})
print(opener.open(req).read().decode())`,
    ]);
    expect({ code, out }, err).toEqual({ code: 0, out: 'ok /python\n' });
    expect(f.api.seen.at(-1)).toMatchObject({ path: '/python', authorization: `Bearer ${VALUE}` });
  });

  it('refuses the placeholder anywhere else: request target, another header, another form, the body, plain http', async () => {
    const f = await fixture();
    const cases: [string, string[], RegExp][] = [
      ['request target', [f.url(`/q?key=${PLACEHOLDER}`)], /placeholder may not be sent in the request target/],
      ['header x-other', ['-H', `X-Other: ${PLACEHOLDER}`, f.url('/h')], /placeholder may not be sent in the x-other header/],
      [
        'header authorization',
        ['-H', `Authorization: ${PLACEHOLDER}`, f.url('/form')],
        /may hold API_KEY's placeholder only as "Bearer \{\}"/,
      ],
      [
        'body',
        ['--data-binary', `a=${'x'.repeat(100_000)}${PLACEHOLDER}`, f.url('/body')],
        /placeholder may not be sent in the request body/,
      ],
    ];
    for (const [where, args, message] of cases) {
      const r = await f.curl(args);
      expect(status(r.out), where).toBe('403');
      expect(r.out, where).toMatch(message);
      expect(f.secretEvents().at(-1), where).toMatchObject({ type: 'secret.refused', secret: 'API_KEY', where });
    }
    // The host never had a complete request carrying it (the body's was cut off before its end).
    expect(f.api.seen.filter((s) => s.complete)).toEqual([]);
    // A request in absolute form, which would ask the host to pass it on elsewhere.
    const absolute = await f.curl([...bearer, '--request-target', 'https://elsewhere.test/x', f.url('/')]);
    expect(status(absolute.out)).toBe('400');
    expect(absolute.out).toMatch(/names its path \(origin form/);
    expect(f.api.seen.filter((s) => s.complete)).toEqual([]);
    const plain = await f.curl(['-H', `X-Key: ${PLACEHOLDER}`, `http://api.test:${f.api.port}/plain`]);
    expect(status(plain.out)).toBe('403');
    expect(plain.out).toMatch(/may not be sent in a plain http:\/\/ request/);
    expect(JSON.stringify(f.events)).not.toContain(VALUE);
  });

  it('a host policy does not name gets no substitution: its connection is a plain tunnel', async () => {
    const f = await fixture();
    const r = await f.curl(['--cacert', f.otherCaFile, ...bearer, `https://other.test:${f.other.port}/x`]);
    expect(r.code, r.err).toBe(0);
    expect(f.other.seen).toEqual([{ path: '/x', authorization: `Bearer ${PLACEHOLDER}`, body: '', complete: true }]);
    expect(f.secretEvents()).toEqual([]);
  });

  it('fails closed: a real host whose certificate is not trusted, an answer it cannot scan', async () => {
    const untrusting = await fixture({ trustUpstream: false });
    const r = await untrusting.curl([...bearer, untrusting.url('/v1')]);
    expect(status(r.out)).toBe('502');
    expect(r.out).toMatch(/api\.test's certificate could not be verified \(UNABLE_TO_VERIFY_LEAF_SIGNATURE\)/);
    expect(untrusting.api.seen).toEqual([]);
    const f = await fixture();
    const gz = await f.curl([...bearer, f.url('/gzip')]);
    expect(status(gz.out)).toBe('502');
    expect(gz.out).toMatch(/answered with a gzip body, which cannot be checked for secrets/);
    expect(gz.out).not.toContain(VALUE);
  });
});
