/**
 * Egress through the sandbox, end to end: real bwrap, real clients inside (python urllib, node
 * fetch and http, curl over HTTP, CONNECT and SOCKS5, raw sockets), real servers on the host's
 * loopback. Nothing outside this machine is reachable here, so an "allowed destination" is a
 * host loopback server reached by name (`allowed.test`, mapped to 127.0.0.1 by the resolver hook)
 * with `loopback: 'allow'` and an allow-list.
 *
 * Each client prints one line per URL: `REACHED <url> <body>` when the server answered,
 * `REFUSED <url> <why>` when the proxy refused, `FAILED <url> <why>` when there was no route.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, copyFileSync, linkSync, readdirSync, readFileSync, realpathSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer, type Server, type Socket } from 'node:net';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { waitFor } from '@forge/test-utils';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import {
  EGRESS_PORTS,
  type Mount,
  type NetworkAccess,
  type NetworkEvent,
  type NetworkGrant,
  type RunResult,
  resolveRuntimes,
  runSandboxed,
  type SandboxProfile,
} from '../src/index.js';
import { which } from '../src/which.js';
import { requireSandbox, runInChild, tempDir } from './helpers.js';

let python: { interpreter: string; mounts: Mount[] };
let node: { interpreter: string; mounts: Mount[] };
let curl: string;

beforeAll(async () => {
  await requireSandbox();
  const table = await resolveRuntimes();
  const mounts = (ms: string[]) => ms.map((source) => ({ source, mode: 'ro' as const }));
  const py = table.get('python3');
  const nd = table.get('node');
  python = { interpreter: py.interpreter, mounts: mounts(py.mounts) };
  node = { interpreter: nd.interpreter, mounts: mounts(nd.mounts) };
  const found = which('curl');
  if (!found) throw new Error('these tests need curl on the host (apt-get install -y curl)');
  curl = found;
});

/** Listens on `host` and `port` (default: ephemeral); closed (with its connections) when the test finishes. */
async function listen(server: Server, host = '127.0.0.1', port = 0): Promise<number> {
  const sockets = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  const failed = once(server, 'error').then(([err]) => {
    throw new Error(`this test needs ${host}:${port} free on the host: ${(err as Error).message}`);
  });
  server.listen(port, host);
  await Promise.race([once(server, 'listening'), failed]);
  onTestFinished(() => {
    server.close();
    for (const s of sockets) s.destroy();
  });
  return (server.address() as { port: number }).port;
}

/** An HTTP server on the host that answers `reached <path>`; `hits` lists the paths it served. */
async function hostHttp(host = '127.0.0.1', port = 0): Promise<{ port: number; hits: string[] }> {
  const hits: string[] = [];
  const server = createHttpServer((req, res) => {
    hits.push(req.url ?? '');
    res.end(`reached ${req.url}`);
  });
  return { port: await listen(server, host, port), hits };
}

/** A non-loopback IPv4 address of this host (tests need one to show it is refused). */
function hostIPv4(): string {
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  throw new Error('this test needs a host with a non-loopback IPv4 address');
}

const pyClient = `
import sys, urllib.request, urllib.error
for url in sys.argv[1:]:
    try:
        print('REACHED', url, urllib.request.urlopen(url, timeout=10).read().decode(), flush=True)
    except urllib.error.HTTPError as e:
        print('REFUSED', url, e.code, e.read().decode().strip(), flush=True)
    except Exception as e:
        print('FAILED', url, type(e).__name__, str(e).replace('\\n', ' '), flush=True)
`;

const nodeFetchClient = `(async () => {
  for (const url of process.argv.slice(1)) {
    try {
      const r = await fetch(url);
      console.log(r.ok ? 'REACHED' : 'REFUSED', url, (await r.text()).trim());
    } catch (e) {
      const why = String(e.cause?.message ?? e.message);
      console.log(why.includes('blocked by forge policy') ? 'REFUSED' : 'FAILED', url, why);
    }
  }
})();`;

const nodeHttpClient = `(async () => {
  const http = require('node:http');
  for (const url of process.argv.slice(1)) {
    await new Promise((done) => {
      http.get(url, (r) => {
        let body = '';
        r.on('data', (d) => (body += d));
        r.on('end', () => done(console.log('REACHED', url, body)));
      }).on('error', (e) => done(console.log(e.message.includes('blocked by forge policy') ? 'REFUSED' : 'FAILED', url, e.message)));
    });
  }
})();`;

/**
 * curl over each URL: `mode` picks the proxy path (the variables as set, CONNECT, SOCKS5 only, or
 * the variables with NO_PROXY overridden, so that even loopback literals go to the proxy).
 */
function curlClient(mode: 'env' | 'connect' | 'socks' | 'forced'): string {
  const pre = mode === 'socks' ? 'env -u http_proxy -u HTTP_PROXY -u https_proxy -u HTTPS_PROXY ' : '';
  const flags = mode === 'connect' ? '-p ' : mode === 'forced' ? "--noproxy '' " : '';
  return `for u in "$@"; do
  out=$(${pre}"$CURL" -sS --max-time 10 ${flags}-w ' %{http_code}' "$u" 2>&1); rc=$?
  case "$rc:$out" in
    0:*' 200') echo "REACHED $u \${out% 200}";;
    0:*|56:*403*|97:*) echo "REFUSED $u rc=$rc $out";;
    *) echo "FAILED $u rc=$rc $out";;
  esac
done`;
}

type Client = 'python' | 'fetch' | 'node-http' | 'curl' | 'curl-connect' | 'curl-socks' | 'curl-forced';
const CLIENTS: Client[] = ['python', 'fetch', 'node-http', 'curl', 'curl-connect', 'curl-socks'];

/** Runs `client` on `urls` in a sandbox with `network` (or none). */
function runClient(client: Client, urls: string[], network?: NetworkAccess, extra: Partial<SandboxProfile> = {}): Promise<RunResult> {
  let profile: SandboxProfile;
  if (client === 'python') {
    profile = { command: [python.interpreter, '-I', '-c', pyClient, ...urls], mounts: python.mounts };
  } else if (client === 'fetch' || client === 'node-http') {
    profile = { command: [node.interpreter, '-e', client === 'fetch' ? nodeFetchClient : nodeHttpClient, ...urls], mounts: node.mounts };
  } else {
    const mode = ({ curl: 'env', 'curl-connect': 'connect', 'curl-socks': 'socks', 'curl-forced': 'forced' } as const)[client];
    profile = { command: ['/bin/sh', '-c', curlClient(mode), 'curl-client', ...urls], env: { CURL: curl } };
  }
  return runSandboxed({ ...profile, ...extra, ...(network ? { network } : {}), limits: { timeoutMs: 20_000 } });
}

/** The verdict per URL, from a client's output. */
function verdicts(r: RunResult): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of r.stdout.toString().split('\n')) {
    const m = /^(REACHED|REFUSED|FAILED) (\S+)/.exec(line);
    if (m) out[m[2] as string] = m[1] as string;
  }
  return out;
}

function describeRun(r: RunResult): string {
  return `reason=${r.reason} exit=${r.exitCode}\n--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderrTail}`;
}

/** A grant like a persona's: loopback opened to stand in for "the outside", and an allow-list. */
function granted(events: NetworkEvent[], grant: Partial<NetworkGrant> = {}): NetworkAccess {
  return {
    grant: { network: 'allow', loopback: 'allow', allow_domains: ['allowed.test'], ...grant },
    resolver: async (name) => (name.endsWith('.test') ? ['127.0.0.1'] : []),
    onEvent: (e) => events.push(e),
  };
}

describe('without a grant there is no route out, for any client', () => {
  it.each(CLIENTS)('%s cannot reach a host loopback server (no grant, and a grant that says deny)', async (client) => {
    const server = await hostHttp();
    const url = `http://127.0.0.1:${server.port}/nogrant`;
    for (const network of [undefined, { grant: { network: 'deny' as const, loopback: 'allow' as const } }]) {
      const r = await runClient(client, [url], network);
      expect(verdicts(r), describeRun(r)).toEqual({ [url]: 'FAILED' });
      expect(r.network).toBeUndefined();
    }
    expect(server.hits).toEqual([]);
  });

  it('sets no proxy variables and starts no relay', async () => {
    const r = await runSandboxed({
      command: [
        '/bin/bash',
        '-c',
        'env | grep -i -e proxy -e NODE_ || echo none; (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null && echo LISTENING',
      ],
    });
    expect(r.stdout.toString().trim()).toBe('none');
  });
});

describe('with a grant, every client goes through the proxy', () => {
  it.each(CLIENTS)('%s reaches an allowed destination and is refused a denied one', async (client) => {
    const server = await hostHttp();
    const events: NetworkEvent[] = [];
    const allowed = `http://allowed.test:${server.port}/${client}`;
    const denied = `http://denied.test:${server.port}/${client}`;
    const r = await runClient(client, [allowed, denied], granted(events));
    expect(verdicts(r), describeRun(r)).toEqual({ [allowed]: 'REACHED', [denied]: 'REFUSED' });
    expect(r.stdout.toString()).toContain(`reached /${client}`);
    expect(server.hits).toEqual([`/${client}`]);
    const denials = events.filter((e) => e.type === 'network.denied');
    expect(denials).toEqual([
      expect.objectContaining({
        host: 'denied.test',
        port: server.port,
        rule: 'allow_domains',
        message: 'blocked by forge policy: denied.test is not in the allowed domains (allowed.test) — do not retry through another route',
      }),
    ]);
    const protocol = client === 'python' || client === 'curl' ? 'http' : client === 'curl-socks' ? 'socks5' : 'connect';
    // A kept-alive connection may close after the denial: compare without order.
    expect(events.map((e) => `${e.type}/${'protocol' in e ? e.protocol : '-'}`).sort()).toEqual([
      `network.allowed/${protocol}`,
      `network.closed/${protocol}`,
      `network.denied/${protocol}`,
    ]);
    expect(r.network).toMatchObject({ connections: 1, denied: 1 });
    expect(r.network?.bytesUp).toBeGreaterThan(0);
    expect(r.network?.bytesDown).toBeGreaterThan(0);
  });

  it('the refusal the tool sees says why and not to retry (HTTP 403 body)', async () => {
    const events: NetworkEvent[] = [];
    const r = await runClient(
      'python',
      ['http://10.1.2.3:9/', 'http://sneaky.test:9/'],
      granted(events, { loopback: 'deny', allow_domains: [] }),
    );
    expect(r.stdout.toString().trim().split('\n')).toEqual([
      'REFUSED http://10.1.2.3:9/ 403 blocked by forge policy: 10.1.2.3 is in a private range (10.0.0.0/8) — do not retry through another route',
      'REFUSED http://sneaky.test:9/ 403 blocked by forge policy: sneaky.test resolves to 127.0.0.1, which is loopback — do not retry through another route',
    ]);
  });

  it('refuses cloud metadata, the host’s own addresses, IPv4-mapped forms and names that resolve to loopback', async () => {
    const local = await hostHttp();
    const anyAddr = await hostHttp('0.0.0.0');
    const hostIp = hostIPv4();
    const urls = {
      metadata: 'http://169.254.169.254/latest/meta-data/',
      metadataMapped: 'http://[::ffff:169.254.169.254]/latest/meta-data/',
      metadataV6: 'http://[fd00:ec2::254]/latest/meta-data/',
      alibaba: 'http://100.100.100.200/latest/meta-data/',
      loopbackMapped: `http://[::ffff:127.0.0.1]:${local.port}/mapped`,
      loopbackMappedHex: `http://[::ffff:7f00:1]:${local.port}/mapped-hex`,
      nat64: `http://[64:ff9b::7f00:1]:${local.port}/nat64`,
      sneakyName: `http://sneaky.test:${local.port}/sneaky`,
      hostAddress: `http://${hostIp}:${anyAddr.port}/host`,
      unspecified: `http://0.0.0.0:${anyAddr.port}/zero`,
    };
    for (const client of ['curl', 'python', 'fetch'] as const) {
      const events: NetworkEvent[] = [];
      // No loopback, no allow-list: everything above must be refused on its own merits.
      const network: NetworkAccess = {
        grant: { network: 'allow' },
        resolver: async (name) => (name === 'sneaky.test' ? ['127.0.0.1'] : []),
        onEvent: (e) => events.push(e),
      };
      const r = await runClient(client, Object.values(urls), network);
      const v = verdicts(r);
      for (const [what, url] of Object.entries(urls)) expect(`${what}: ${v[url]}`, describeRun(r)).toBe(`${what}: REFUSED`);
      // Clients spell IPv6 differently (curl and WHATWG URL compress ::ffff:127.0.0.1 to ::ffff:7f00:1).
      const denied = events.filter((e) => e.type === 'network.denied');
      expect(denied.map((e) => e.rule).sort(), client).toEqual([
        'host_address',
        'loopback',
        'loopback',
        'loopback',
        'loopback',
        'metadata',
        'metadata',
        'metadata',
        'metadata',
        'unspecified',
      ]);
      expect(denied.find((e) => e.rule === 'host_address')?.host).toBe(hostIp);
      expect(denied.find((e) => e.host === 'sneaky.test')).toMatchObject({ rule: 'loopback', address: '127.0.0.1' });
      expect(denied.every((e) => !e.host.startsWith('['))).toBe(true);
      expect(r.network?.connections, client).toBe(0);
    }
    expect([...local.hits, ...anyAddr.hits]).toEqual([]);
  });

  it('loopback literals are in-sandbox (NO_PROXY); sent to the proxy anyway, they are refused as loopback', async () => {
    const local = await hostHttp();
    const urls = [`http://127.0.0.1:${local.port}/v4`, `http://[::1]:${local.port}/v6`, `http://localhost:${local.port}/name`];
    const events: NetworkEvent[] = [];
    const direct = await runClient('curl', urls, { grant: { network: 'allow' }, onEvent: (e) => events.push(e) });
    expect(Object.values(verdicts(direct)), describeRun(direct)).toEqual(['FAILED', 'FAILED', 'FAILED']);
    expect(events).toEqual([]); // NO_PROXY: they never reached the proxy, and found nothing in here
    const forced = await runClient('curl-forced', urls, { grant: { network: 'allow' }, onEvent: (e) => events.push(e) });
    expect(Object.values(verdicts(forced)), describeRun(forced)).toEqual(['REFUSED', 'REFUSED', 'REFUSED']);
    expect(events.map((e) => e.type === 'network.denied' && `${e.host} ${e.rule}`)).toEqual([
      '127.0.0.1 loopback',
      '::1 loopback',
      'localhost loopback',
    ]);
    expect(local.hits).toEqual([]);
  });

  it('with loopback and private ranges opened, metadata and the host’s own addresses stay refused', async () => {
    const anyAddr = await hostHttp('0.0.0.0');
    const hostIp = hostIPv4();
    const events: NetworkEvent[] = [];
    const urls = [
      'http://169.254.169.254/',
      'http://[::ffff:169.254.169.254]/',
      `http://${hostIp}:${anyAddr.port}/host`,
      `http://[::ffff:${hostIp}]:${anyAddr.port}/host-mapped`,
      `http://127.0.0.1:${anyAddr.port}/loopback`,
    ];
    const r = await runClient('curl-forced', urls, granted(events, { private_networks: 'allow', allow_domains: [] }));
    const v = verdicts(r);
    expect(
      urls.map((u) => v[u]),
      describeRun(r),
    ).toEqual(['REFUSED', 'REFUSED', 'REFUSED', 'REFUSED', 'REACHED']);
    expect(events.filter((e) => e.type === 'network.denied').map((e) => e.type === 'network.denied' && e.rule)).toEqual([
      'metadata',
      'metadata',
      'host_address',
      'host_address',
    ]);
    expect(anyAddr.hits).toEqual(['/loopback']);
  });

  it('a raw socket that ignores the proxy has no route, with the grant in place', async () => {
    const server = await hostHttp();
    const anyAddr = await hostHttp('0.0.0.0');
    const targets = [
      ['127.0.0.1', server.port],
      [hostIPv4(), anyAddr.port],
      ['169.254.169.254', 80],
      ['8.8.8.8', 53],
    ] as const;
    const code = `
import socket, sys, json
for host, port in json.loads(sys.argv[1]):
    try:
        socket.create_connection((host, port), timeout=5).close()
        print('ESCAPE', host, port)
    except OSError as e:
        print('NOROUTE', host, port, e.errno)
# Control: the proxy is there, and answers.
s = socket.create_connection(('127.0.0.1', 3128), timeout=5); s.close(); print('CONTROL proxy')
`;
    const r = await runSandboxed({
      command: [python.interpreter, '-I', '-c', code, JSON.stringify(targets)],
      mounts: python.mounts,
      network: granted([], { allow_domains: [] }),
    });
    const out = r.stdout.toString();
    expect(out, describeRun(r)).toContain('CONTROL proxy');
    expect(out).not.toContain('ESCAPE');
    expect(out.match(/^NOROUTE/gm)?.length).toBe(targets.length);
    expect([...server.hits, ...anyAddr.hits]).toEqual([]);
  });
});

describe('a loopback grant reaches the host’s loopback, for every client', () => {
  it.each(CLIENTS)('%s reaches a host service by 127.0.0.1 and localhost with the grant, and not without it', async (client) => {
    const server = await hostHttp();
    const urls = [`http://127.0.0.1:${server.port}/v4-${client}`, `http://localhost:${server.port}/name-${client}`];
    const events: NetworkEvent[] = [];
    const r = await runClient(client, urls, { grant: { network: 'allow', loopback: 'allow' }, onEvent: (e) => events.push(e) });
    expect(verdicts(r), describeRun(r)).toEqual({ [urls[0] as string]: 'REACHED', [urls[1] as string]: 'REACHED' });
    expect(server.hits).toEqual([`/v4-${client}`, `/name-${client}`]);
    expect(events.filter((e) => e.type === 'network.allowed').map((e) => e.type === 'network.allowed' && `${e.host} ${e.rule}`)).toEqual([
      '127.0.0.1 loopback',
      'localhost loopback',
    ]);
    // Without the grant: the sandbox's own loopback (nothing there), and the host's stays unreached.
    const without = await runClient(client, urls, { grant: { network: 'allow' }, onEvent: (e) => events.push(e) });
    expect(Object.values(verdicts(without)), describeRun(without)).toEqual(['FAILED', 'FAILED']);
    expect(server.hits).toHaveLength(2);
  });

  it('proxying loopback never reaches the proxy itself: its ports on the host’s loopback are the host’s', async () => {
    // The relay's ports inside are the proxy's; the same ports on the host's loopback are other
    // sockets. Held here, they answer as themselves: a loop would show the proxy's own answer.
    const http = await hostHttp('127.0.0.1', EGRESS_PORTS.http);
    const socks = await hostHttp('127.0.0.1', EGRESS_PORTS.socks5);
    const urls = [`http://127.0.0.1:${EGRESS_PORTS.http}/loop`, `http://localhost:${EGRESS_PORTS.socks5}/loop`];
    for (const client of CLIENTS) {
      const events: NetworkEvent[] = [];
      const r = await runClient(client, urls, { grant: { network: 'allow', loopback: 'allow' }, onEvent: (e) => events.push(e) });
      expect(verdicts(r), `${client}\n${describeRun(r)}`).toEqual({ [urls[0] as string]: 'REACHED', [urls[1] as string]: 'REACHED' });
      expect(r.stdout.toString()).not.toContain('forge egress proxy');
      expect(r.network?.connections, client).toBe(2);
    }
    expect(http.hits).toEqual(Array(CLIENTS.length).fill('/loop'));
    expect(socks.hits).toEqual(Array(CLIENTS.length).fill('/loop'));
  });
});

describe('TLS through CONNECT', () => {
  it('fetch, https.get, curl and python reach an https server by name, certificate checked', async () => {
    const dir = await tempDir();
    const key = join(dir, 'key.pem');
    const cert = join(dir, 'cert.pem');
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:P-256',
        '-nodes',
        '-keyout',
        key,
        '-out',
        cert,
        '-days',
        '1',
        '-subj',
        '/CN=allowed.test',
        '-addext',
        'subjectAltName=DNS:allowed.test',
      ],
      { stdio: 'ignore' },
    );
    const server = createHttpsServer({ key: readFileSync(key), cert: readFileSync(cert) }, (req, res) => res.end(`secure ${req.url}`));
    const port = await listen(server);
    const ca = { source: cert, target: '/tmp/ca.pem', mode: 'ro' as const };
    const env = { NODE_EXTRA_CA_CERTS: '/tmp/ca.pem', SSL_CERT_FILE: '/tmp/ca.pem', CURL_CA_BUNDLE: '/tmp/ca.pem' };
    const https = `(async () => {
  const url = process.argv[1];
  const viaFetch = await fetch(url + '/fetch').then((r) => r.text(), (e) => 'FAILED ' + (e.cause?.message ?? e.message));
  const viaGet = await new Promise((done) => require('node:https').get(url + '/get', (r) => { let b = ''; r.on('data', (d) => (b += d)); r.on('end', () => done(b)); }).on('error', (e) => done('FAILED ' + e.message)));
  console.log(viaFetch); console.log(viaGet);
})();`;
    const base = `https://allowed.test:${port}`;
    const events: NetworkEvent[] = [];
    const network = granted(events);
    const runs = [
      await runSandboxed({ command: [node.interpreter, '-e', https, base], mounts: [...node.mounts, ca], env, network }),
      await runSandboxed({ command: [curl, '-sS', `${base}/curl`], mounts: [ca], env, network }),
      await runSandboxed({
        command: [
          python.interpreter,
          '-I',
          '-c',
          'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())',
          `${base}/python`,
        ],
        mounts: [...python.mounts, ca],
        env,
        network,
      }),
    ];
    expect(runs.map((r) => r.stdout.toString().trim()).join('\n'), runs.map(describeRun).join('\n')).toBe(
      ['secure /fetch', 'secure /get', 'secure /curl', 'secure /python'].join('\n'),
    );
    expect(events.filter((e) => e.type === 'network.allowed').map((e) => e.protocol)).toEqual(['connect', 'connect', 'connect', 'connect']);
  });
});

describe('the relay and its channel', () => {
  it('the tool never holds the relay’s channel, and the proxy variables are set (NO_PROXY only without loopback)', async () => {
    const show = 'ls /proc/self/fd | sort -n | tr "\\n" " "; echo; env | grep -e NODE_CHANNEL -e _proxy= -e _PROXY= | sort';
    const proxies = [
      'ALL_PROXY=socks5h://127.0.0.1:1080',
      'HTTPS_PROXY=http://127.0.0.1:3128',
      'HTTP_PROXY=http://127.0.0.1:3128',
      'all_proxy=socks5h://127.0.0.1:1080',
      'http_proxy=http://127.0.0.1:3128',
      'https_proxy=http://127.0.0.1:3128',
    ];
    // A profile's own proxy variables never survive: forge's route is the only one.
    const env = { NO_PROXY: 'example.com', https_proxy: 'http://elsewhere:8080' };
    for (const [grant, expected] of [
      [{ loopback: 'allow' as const }, proxies],
      [{ loopback: 'deny' as const }, [...proxies, 'NO_PROXY=localhost,127.0.0.1,::1', 'no_proxy=localhost,127.0.0.1,::1'].sort()],
    ] as const) {
      const r = await runSandboxed({ command: ['/bin/sh', '-c', show], env, network: granted([], grant) });
      const [fds, ...lines] = r.stdout.toString().trim().split('\n');
      expect(fds?.split(' ')).not.toContain('5');
      expect(lines, grant.loopback).toEqual(expected);
    }
  });

  it('when the relay cannot start, the tool does not run (sandbox_unavailable)', async () => {
    const relayNode = realpathSync(process.execPath);
    const err = await runSandboxed({
      command: ['/bin/sh', '-c', 'echo TOOL-RAN'],
      mounts: [{ source: '/bin/false', target: relayNode, mode: 'ro' }],
      network: granted([]),
    }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'sandbox_unavailable' });
    expect(String((err as Error).message)).toMatch(/network relay did not start, so the tool did not run/);
  });

  it('the relay starts, and the tool does not when it cannot, with node outside /usr too', async () => {
    // An embedding process whose node lives outside /usr (nvm, volta, a tarball): a copy of this one.
    const dir = await tempDir();
    const node = join(dir, 'node');
    try {
      linkSync(realpathSync(process.execPath), node);
    } catch {
      copyFileSync(realpathSync(process.execPath), node);
    }
    const r = await runInChild(
      `const relayNode = (await import('node:fs')).realpathSync(process.execPath);
      const network = { grant: { network: 'allow' } };
      const ok = await module.runSandboxed({ command: ['/bin/sh', '-c', 'echo TOOL-RAN'], network });
      const err = await module.runSandboxed({
        command: ['/bin/sh', '-c', 'echo TOOL-RAN'],
        mounts: [{ source: '/bin/false', target: relayNode, mode: 'ro' }],
        network,
      }).then((r) => r.stdout.toString().trim(), (e) => e.code + ' ' + /network relay did not start/.test(e.message));
      console.log(relayNode, ok.stdout.toString().trim(), err);`,
      { node },
    );
    expect(r.out.trim(), r.err).toBe(`${node} TOOL-RAN sandbox_unavailable true`);
  });

  it('leaves no preload file on the host: gone once mounted, after a run that fails, and in a process killed later', async () => {
    const dir = await tempDir();
    chmodSync(dir, 0o711); // the child's temp dir: a sandbox that runs as another uid (forge as root) passes through it
    const r = await runInChild(
      `process.env.TMPDIR = ${JSON.stringify(dir)};
      const { readdirSync } = await import('node:fs');
      const { createServer } = await import('node:http');
      const preloads = () => readdirSync(${JSON.stringify(dir)}).filter((n) => n.startsWith('forge-sandbox-egress-'));
      let during;
      const server = createServer((req, res) => { during = preloads(); res.end('host'); }).listen(0, '127.0.0.1');
      await new Promise((r) => server.once('listening', r));
      const nd = (await module.resolveRuntimes()).get('node');
      const network = { grant: { network: 'allow', loopback: 'allow' } };
      const ran = await module.runSandboxed({
        command: [nd.interpreter, '-e', 'fetch(process.argv[1]).then((r) => r.text()).then(console.log)', 'http://127.0.0.1:' + server.address().port],
        mounts: nd.mounts.map((source) => ({ source, mode: 'ro' })),
        network,
      });
      const after = preloads();
      const failed = await module.runSandboxed({ command: ['/bin/true'], env: { 'NOT A NAME': 'x' }, network }).catch((e) => e.code);
      console.log(JSON.stringify({ out: ran.stdout.toString().trim(), during, after, failed, afterFailed: preloads() }));
      process.kill(process.pid, 'SIGKILL');`,
    );
    expect(r.out, r.err).toMatch(/^\{/);
    expect(JSON.parse(r.out), r.err).toEqual({ out: 'host', during: [], after: [], failed: 'invalid_profile', afterFailed: [] });
    expect(r.child.signalCode).toBe('SIGKILL');
    expect(readdirSync(dir).filter((n) => n.startsWith('forge-sandbox-egress-'))).toEqual([]);
  });

  it('the first preload a process writes removes those of processes that died mid-setup (older than a minute)', async () => {
    const dir = await tempDir();
    chmodSync(dir, 0o711);
    const gone = spawnSync('/bin/true').pid as number; // a process that has exited
    const old = new Date(Date.now() - 120_000);
    const files = {
      stale: `forge-sandbox-egress-${gone}-0123456789ab.cjs`,
      young: `forge-sandbox-egress-${gone}-ba9876543210.cjs`,
      alive: `forge-sandbox-egress-${process.pid}-0123456789ab.cjs`,
      other: `forge-sandbox-egress-${gone}-notours.cjs`,
    };
    for (const [what, name] of Object.entries(files)) {
      writeFileSync(join(dir, name), '');
      if (what !== 'young') utimesSync(join(dir, name), old, old);
    }
    const r = await runInChild(
      `process.env.TMPDIR = ${JSON.stringify(dir)};
      const ran = await module.runSandboxed({ command: ['/bin/true'], network: { grant: { network: 'allow' } } });
      console.log(ran.exitCode);`,
    );
    expect(r.out.trim(), r.err).toBe('0');
    expect(
      readdirSync(dir)
        .filter((n) => n.startsWith('forge-sandbox-egress-'))
        .sort(),
    ).toEqual([files.young, files.alive, files.other].sort());
  });

  it('refuses a malformed grant before running anything (invalid_profile)', async () => {
    const err = await runSandboxed({
      command: ['/bin/true'],
      network: { grant: { network: 'allow', allow_ports: [70000] } },
    }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'invalid_profile' });
    expect((err as Error).message).toMatch(/^network\.grant\.allow_ports/);
  });

  it('tears the proxy down with the run: open tunnels are cut and no descriptor is left', async () => {
    const ends: string[] = [];
    const tcp = createServer((s) => {
      s.on('error', () => {});
      s.once('close', () => ends.push('closed'));
    });
    const port = await listen(tcp);
    const before = openDescriptors();
    // Open a tunnel, then outlive the deadline while holding it.
    const r = await runSandboxed({
      command: [
        '/bin/bash',
        '-c',
        `exec 3<>/dev/tcp/127.0.0.1/3128; printf 'CONNECT allowed.test:${port} HTTP/1.1\\r\\n\\r\\n' >&3; head -c 39 <&3; echo; sleep 30`,
      ],
      network: granted([]),
      limits: { timeoutMs: 1500 },
    });
    expect(r.reason, describeRun(r)).toBe('timeout');
    expect(r.stdout.toString()).toContain('HTTP/1.1 200 Connection Established');
    await waitFor('the tunnel to the destination to be cut', () => ends.length > 0);
    expect(ends).toEqual(['closed']);
    expect(openDescriptors()).toBeLessThanOrEqual(before);
  });
});

/** How many descriptors this process has open. */
function openDescriptors(): number {
  return readdirSync('/proc/self/fd').length;
}
