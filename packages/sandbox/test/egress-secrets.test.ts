/**
 * Placeholder secrets end to end (`network.placeholders`): real bwrap, real clients inside
 * (Python urllib, Node fetch and https, curl) holding only the placeholder, the run's own CA in
 * their trust store, and a real HTTPS host on the host's loopback whose certificate the sandbox
 * does not trust (only the proxy does). The host gets the real value; the tool never sees it.
 */
import { once } from 'node:events';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { mintRunCa } from '../src/egress/ca.js';
import { type Mount, type NetworkAccess, type NetworkEvent, type RunResult, runSandboxed } from '../src/index.js';
import { which } from '../src/which.js';
import { nodeRuntime, pythonRuntime, requireSandbox } from './helpers.js';

const PLACEHOLDER = 'forge-secret-API_KEY-5b1f0c9d8e7a6b4c';
const VALUE = 'sk-live-REAL-9876543210';

let python: { interpreter: string; mounts: Mount[] };
let node: { interpreter: string; mounts: Mount[] };
let curl: string;

beforeAll(async () => {
  await requireSandbox();
  python = await pythonRuntime();
  node = await nodeRuntime();
  const found = which('curl');
  if (!found) throw new Error('these tests need curl on the host (apt-get install -y curl)');
  curl = found;
});

/** The real host: answers with the Authorization it got (an echo: the scrub must catch it). */
async function realHost(): Promise<{ port: number; got: string[]; caPem: string }> {
  const ca = mintRunCa(['api.test']);
  const { certPem, keyPem } = ca.leaf('api.test');
  const got: string[] = [];
  const server = createHttpsServer({ cert: certPem, key: keyPem }, (req, res) => {
    got.push(String(req.headers.authorization));
    res.end(`${req.url} saw ${req.headers.authorization}`);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  onTestFinished(() => {
    server.closeAllConnections();
    server.close();
  });
  return { port: (server.address() as AddressInfo).port, got, caPem: ca.certPem };
}

function network(events: NetworkEvent[], upstreamCa: string): NetworkAccess {
  return {
    grant: { network: 'allow', loopback: 'allow', allow_domains: ['api.test'] },
    resolver: async () => ['127.0.0.1'],
    onEvent: (e) => events.push(e),
    placeholders: [
      { name: 'API_KEY', placeholder: PLACEHOLDER, value: VALUE, hosts: ['api.test'], headers: ['authorization'], format: 'Bearer {}' },
    ],
    upstreamCa: [upstreamCa],
  };
}

function describeRun(r: RunResult): string {
  return `reason=${r.reason} exit=${r.exitCode}\n--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderrTail}`;
}

const PY = `
import base64, os, sys, urllib.request
key = os.environ['API_KEY']
req = urllib.request.Request(sys.argv[1] + '/python', headers={'Authorization': 'Bearer ' + key})
print(urllib.request.urlopen(req).read().decode())
# What a tool can do with what it holds: none of it is the value.
print(base64.b64encode(key.encode()).decode(), key[::-1], key[:8], key[8:])
print('key in trust store:', 'PRIVATE KEY' in open(os.environ['SSL_CERT_FILE']).read())
`;

const NODE = `(async () => {
  const url = process.argv[1];
  const auth = { authorization: 'Bearer ' + process.env.API_KEY };
  console.log(await fetch(url + '/fetch', { headers: auth }).then((r) => r.text(), (e) => 'FAILED ' + (e.cause?.message ?? e.message)));
  console.log(await new Promise((done) => require('node:https').get(url + '/get', { headers: auth }, (r) => { let b = ''; r.on('data', (d) => (b += d)); r.on('end', () => done(b)); }).on('error', (e) => done('FAILED ' + e.message))));
})();`;

describe('placeholder secrets through the sandbox', () => {
  it('python, node and curl reach the host with the real value in the header; the tool sees only the placeholder', async () => {
    const host = await realHost();
    const events: NetworkEvent[] = [];
    const net = network(events, host.caPem);
    const base = `https://api.test:${host.port}`;
    const env = { API_KEY: PLACEHOLDER };
    const runs = [
      await runSandboxed({ command: [python.interpreter, '-I', '-c', PY, base], mounts: python.mounts, env, network: net }),
      await runSandboxed({ command: [node.interpreter, '-e', NODE, base], mounts: node.mounts, env, network: net }),
      await runSandboxed({
        command: ['/bin/sh', '-c', '"$CURL" -sS -H "Authorization: Bearer $API_KEY" "$1/curl"', 'curl-client', base],
        env: { ...env, CURL: curl },
        network: net,
      }),
    ];
    const out = runs.map((r) => r.stdout.toString()).join('');
    expect(out, runs.map(describeRun).join('\n')).toContain(`/python saw Bearer ${PLACEHOLDER}\n`);
    expect(out).toContain(`/fetch saw Bearer ${PLACEHOLDER}\n/get saw Bearer ${PLACEHOLDER}\n`);
    expect(out).toContain(`/curl saw Bearer ${PLACEHOLDER}`);
    expect(out).toContain('key in trust store: False');
    // The host got the value every time; nothing the tool printed or logged holds it.
    expect(host.got).toEqual(Array(4).fill(`Bearer ${VALUE}`));
    for (const r of runs) {
      expect(r.stdout.toString() + r.stderrTail).not.toContain(VALUE);
      expect(r.stdout.toString()).not.toContain(Buffer.from(VALUE).toString('base64'));
    }
    expect(events.filter((e) => e.type === 'secret.substituted')).toHaveLength(4);
    expect(JSON.stringify(events)).not.toContain(VALUE);
  });

  it('a placeholder sent where policy does not put it is refused, and the host never gets it', async () => {
    const host = await realHost();
    const events: NetworkEvent[] = [];
    const r = await runSandboxed({
      command: ['/bin/sh', '-c', '"$CURL" -sS -w " %{http_code}" "$1/q?key=$API_KEY"', 'curl-client', `https://api.test:${host.port}`],
      env: { API_KEY: PLACEHOLDER, CURL: curl },
      network: network(events, host.caPem),
    });
    expect(r.stdout.toString(), describeRun(r)).toMatch(/placeholder may not be sent in the request target[\s\S]* 403$/);
    expect(host.got).toEqual([]);
    expect(events.find((e) => e.type === 'secret.refused')).toMatchObject({ secret: 'API_KEY', where: 'request target' });
  });

  it('a placeholder secret that cannot be delivered as given is refused before anything runs', async () => {
    const bad = {
      ...network([], ''),
      placeholders: [{ name: 'K', placeholder: 'short', value: 'v', hosts: ['api.test'], headers: ['authorization'], format: '{}' }],
    };
    await expect(runSandboxed({ command: ['/bin/true'], network: bad })).rejects.toMatchObject({
      code: 'invalid_profile',
      message: expect.stringMatching(/network\.placeholders\[0\] \(K\): placeholder must be a string of at least 16 characters/),
    });
  });
});
