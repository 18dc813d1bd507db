import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it, onTestFinished } from 'vitest';
import { okData, py, setup, tool } from './helpers.js';

/** A real HTTP server on the host's loopback, closed when the test ends. */
async function hostServer(body: string): Promise<number> {
  const server = createServer((_req, res) => res.end(body));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
  return (server.address() as AddressInfo).port;
}

// urllib follows HTTP_PROXY; the answer (or the proxy's refusal) comes back as data.
const fetcher = py(
  'fetch_url',
  `import urllib.request, urllib.error
try:
    with urllib.request.urlopen(args["url"], timeout=5) as r:
        out = {"status": r.status, "body": r.read().decode()}
except urllib.error.HTTPError as e:
    out = {"status": e.code, "body": e.read().decode()}
except Exception as e:
    out = {"status": None, "body": type(e).__name__ + ": " + str(e)}
print(json.dumps({"ok": True, "data": out}))`,
  { input_schema: { type: 'object', properties: { url: { type: 'string' } }, required: ['url'] } },
);

describe('network grants go through the egress proxy', () => {
  it('a granted persona reaches an allowed host; the metadata address is refused; every decision is audited', async () => {
    const port = await hostServer('hello from the host');
    const fx = await setup({
      workspacePolicy: {
        persona_sandbox_overrides: { browser: { network: 'allow', loopback: 'allow', allow_domains: ['local.test', '169.254.169.254'] } },
      },
      // local.test resolves to the host's loopback, as a real allowed name would resolve elsewhere.
      forge: { resolver: async (host: string) => (host === 'local.test' ? ['127.0.0.1'] : []) },
    });
    // Forged by the granted persona: for anyone else, the static check flags network use.
    expect((await fx.forge.forgeTool(fetcher, { persona: 'browser' })).ok).toBe(true);

    const ok = await fx.forge.callTool('fetch_url', { url: `http://local.test:${port}/` }, { persona: 'browser' });
    expect(okData(ok)).toEqual({ status: 200, body: 'hello from the host' });
    expect(ok.meta.sandbox).toBe('bwrap+net+loopback');

    const meta = okData(
      await fx.forge.callTool('fetch_url', { url: 'http://169.254.169.254/latest/meta-data/' }, { persona: 'browser' }),
    ) as {
      status: number;
      body: string;
    };
    expect(meta.status).toBe(403);
    expect(meta.body).toContain('blocked by forge policy');

    expect(fx.entries('network.allowed').map((e) => e.data)).toEqual([
      expect.objectContaining({ host: 'local.test', port, address: '127.0.0.1', name: 'fetch_url', persona: 'browser' }),
    ]);
    expect(fx.entries('network.denied').map((e) => e.data)).toEqual([
      expect.objectContaining({ host: '169.254.169.254', rule: 'metadata', name: 'fetch_url', persona: 'browser' }),
    ]);
    const called = fx.entries('forge.called').map((e) => e.data);
    expect(called[0]).toMatchObject({ ok: true, network: { connections: 1, denied: 0 } });
    expect(called[1]).toMatchObject({ ok: true, network: { denied: 1 } });
  });

  it('a persona granted loopback reaches a service on the host by 127.0.0.1 and localhost, from python and node alike', async () => {
    const port = await hostServer('hello from the host loopback');
    const nodeFetcher = tool(
      'fetch_url_node',
      'node',
      `let s = ''; process.stdin.on('data', (d) => (s += d)).on('end', async () => {
  const { url } = JSON.parse(s);
  const data = await fetch(url).then(async (r) => ({ status: r.status, body: await r.text() }), (e) => ({ status: null, body: String(e.cause?.code ?? e.message) }));
  console.log(JSON.stringify({ ok: true, data }));
});`,
      { input_schema: { type: 'object', properties: { url: { type: 'string' } }, required: ['url'] } },
    );
    const grant = { network: 'allow', loopback: 'allow' };
    const fx = await setup({ workspacePolicy: { persona_sandbox_overrides: { browser: grant, plain: { network: 'allow' } } } });
    for (const spec of [fetcher, nodeFetcher]) expect((await fx.forge.forgeTool(spec, { persona: 'browser' })).ok).toBe(true);
    for (const name of ['fetch_url', 'fetch_url_node']) {
      for (const host of ['127.0.0.1', 'localhost']) {
        const env = await fx.forge.callTool(name, { url: `http://${host}:${port}/` }, { persona: 'browser' });
        expect(okData(env), `${name} ${host}`).toEqual({ status: 200, body: 'hello from the host loopback' });
        expect(env.meta.sandbox).toBe('bwrap+net+loopback');
        // Network without loopback: 127.0.0.1 is the sandbox's own, where nothing listens.
        const other = okData(await fx.forge.callTool(name, { url: `http://${host}:${port}/` }, { persona: 'plain' }));
        expect(other, `${name} ${host} without loopback`).toMatchObject({ status: null });
      }
    }
    expect(fx.entries('network.allowed').map((e) => (e.data as { host: string }).host)).toEqual([
      '127.0.0.1',
      'localhost',
      '127.0.0.1',
      'localhost',
    ]);
  });

  it('a persona without a grant has no route at all: same tool, same host server', async () => {
    const port = await hostServer('unreachable');
    const fx = await setup({ workspacePolicy: { persona_sandbox_overrides: { browser: { network: 'allow', loopback: 'allow' } } } });
    const made = await fx.forge.forgeTool(fetcher);
    expect(made.ok ? '' : made.kind).toBe('static_check_failed'); // forging it without a grant is flagged
    expect((await fx.forge.forgeTool(fetcher, { persona: 'browser' })).ok).toBe(true);
    const env = await fx.forge.callTool('fetch_url', { url: `http://127.0.0.1:${port}/` });
    const data = okData(env) as { status: number | null; body: string };
    expect(data.status).toBeNull();
    expect(data.body).not.toContain('unreachable');
    expect(env.meta.sandbox).toBe('bwrap');
    expect(fx.entries('network.allowed')).toEqual([]);
  });
});
