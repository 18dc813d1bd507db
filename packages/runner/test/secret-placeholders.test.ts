/**
 * Secrets by placeholder through forge (policy `secret_delivery`): the tool's environment holds
 * a placeholder, the egress proxy puts the value into the Authorization header of requests to the
 * host policy names, and nothing forge keeps (answer, audit log, manifests, files) holds the value.
 * A real HTTPS host on loopback whose certificate forge trusts (`upstreamCa`) and the sandbox does not.
 */
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { tempDir } from '@forge/test-utils';
import { describe, expect, it, onTestFinished } from 'vitest';
import { filesContaining, okData, py, setup } from './helpers.js';

const VALUE = 'sk-live-7d1e4b9a0c3f5e2d8b6a';
const DB_PASSWORD = 'db-pw-4e8c1a9f';

/** The real host: answers with the Authorization it got (an echo the proxy must scrub). */
async function realHost(): Promise<{ port: number; got: string[]; certPem: string }> {
  const dir = await tempDir();
  const key = join(dir, 'key.pem');
  const cert = join(dir, 'cert.pem');
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-out', cert, '-days', '1'].concat([
      '-subj',
      '/CN=api.test',
      '-addext',
      'subjectAltName=DNS:api.test',
    ]),
    { stdio: 'ignore' },
  );
  const got: string[] = [];
  const server = createServer({ key: readFileSync(key), cert: readFileSync(cert) }, (req, res) => {
    got.push(String(req.headers.authorization));
    res.end(`saw ${req.headers.authorization}`);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  onTestFinished(() => {
    server.closeAllConnections();
    server.close();
  });
  return { port: (server.address() as AddressInfo).port, got, certPem: readFileSync(cert, 'utf8') };
}

const caller = py(
  'call_api',
  `import os, urllib.request
key = os.environ["API_KEY"]
req = urllib.request.Request(args["url"], headers={"Authorization": "Bearer " + key})
body = urllib.request.urlopen(req, timeout=20).read().decode()
print(json.dumps({"ok": True, "data": {"body": body, "key": key, "db_password_length": len(os.environ["DB_PASSWORD"])}}))`,
  {
    input_schema: { type: 'object', properties: { url: { type: 'string' } }, required: ['url'] },
    meta: { secrets: ['API_KEY', 'DB_PASSWORD'] },
  },
);

describe('secrets by placeholder', () => {
  it('the tool holds a placeholder, the host gets the value in its header, nothing forge keeps holds it; env secrets as before', async () => {
    const host = await realHost();
    const fx = await setup({
      workspacePolicy: {
        persona_sandbox_overrides: { agent: { network: 'allow', loopback: 'allow', allow_domains: ['api.test'] } },
        persona_secret_allow: { agent: ['API_KEY', 'DB_PASSWORD'] },
        secret_delivery: {
          API_KEY: { inject: { hosts: ['API.test'], headers: ['Authorization'], format: 'Bearer {}' } },
          DB_PASSWORD: 'env',
        },
      },
      vault: { API_KEY: VALUE, DB_PASSWORD },
      forge: { resolver: async () => ['127.0.0.1'], upstreamCa: [host.certPem] },
    });
    expect((await fx.forge.forgeTool(caller, { persona: 'agent' })).ok).toBe(true);
    const url = `https://api.test:${host.port}/v1`;
    const first = okData(await fx.forge.callTool('call_api', { url }, { persona: 'agent' })) as Record<string, unknown>;
    const second = okData(await fx.forge.callTool('call_api', { url }, { persona: 'agent' })) as Record<string, unknown>;
    // A placeholder per run, never the value; the host's echo comes back as the placeholder.
    for (const d of [first, second]) {
      expect(d.key).toMatch(/^forge-placeholder-[0-9a-f]{32}$/);
      expect(d.body).toBe(`saw Bearer ${d.key}`);
      expect(d.db_password_length).toBe(DB_PASSWORD.length);
    }
    expect(first.key).not.toBe(second.key);
    expect(host.got).toEqual([`Bearer ${VALUE}`, `Bearer ${VALUE}`]);
    expect(fx.entries('secret.substituted').map((e) => e.data)).toEqual([
      expect.objectContaining({ secret: 'API_KEY', host: 'api.test', header: 'authorization', name: 'call_api', persona: 'agent' }),
      expect.objectContaining({ secret: 'API_KEY', host: 'api.test', header: 'authorization', name: 'call_api', persona: 'agent' }),
    ]);
    expect(fx.entries('secret.scrubbed').length).toBeGreaterThan(0);
    // The value is nowhere forge writes (the vault aside).
    expect([...filesContaining(fx.home, VALUE).filter((f) => !f.endsWith('/secrets.json')), ...filesContaining(fx.project, VALUE)]).toEqual(
      [],
    );
  });

  it('a placeholder the tool sends where policy does not put it is refused, and audited', async () => {
    const host = await realHost();
    const leaky = py(
      'leak_api',
      `import os, urllib.request, urllib.error
try:
    urllib.request.urlopen(args["url"] + "?key=" + os.environ["API_KEY"], timeout=20)
    out = "sent"
except urllib.error.HTTPError as e:
    out = str(e.code) + " " + e.read().decode().strip()
print(json.dumps({"ok": True, "data": out}))`,
      { input_schema: { type: 'object', properties: { url: { type: 'string' } }, required: ['url'] }, meta: { secrets: ['API_KEY'] } },
    );
    const fx = await setup({
      workspacePolicy: {
        persona_sandbox_overrides: { agent: { network: 'allow', loopback: 'allow', allow_domains: ['api.test'] } },
        persona_secret_allow: { agent: ['API_KEY'] },
        secret_delivery: { API_KEY: { inject: { hosts: ['api.test'], headers: ['Authorization'], format: 'Bearer {}' } } },
      },
      vault: { API_KEY: VALUE },
      forge: { resolver: async () => ['127.0.0.1'], upstreamCa: [host.certPem] },
    });
    expect((await fx.forge.forgeTool(leaky, { persona: 'agent' })).ok).toBe(true);
    const out = okData(await fx.forge.callTool('leak_api', { url: `https://api.test:${host.port}/v1` }, { persona: 'agent' }));
    expect(out).toMatch(/^403 forge egress proxy: API_KEY's placeholder may not be sent in the request target/);
    expect(host.got).toEqual([]);
    expect(fx.entries('secret.refused').map((e) => e.data)).toEqual([
      expect.objectContaining({ secret: 'API_KEY', where: 'request target', name: 'leak_api', persona: 'agent' }),
    ]);
  });
});
