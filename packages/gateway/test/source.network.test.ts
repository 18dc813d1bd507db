import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, onTestFinished, test } from 'vitest';
import { fixtureEntry, gatewayWith, job, requireBwrap, textOf, tool } from './fixtures/harness.js';

requireBwrap();

/** A loopback HTTP server on the host that counts what reaches it. */
async function hostService(): Promise<{ port: number; hits: string[] }> {
  const hits: string[] = [];
  const srv = createServer((req, res) => {
    hits.push(req.url ?? '');
    res.end('REACHED');
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  onTestFinished(() => new Promise<void>((r) => srv.close(() => r())));
  return { port: (srv.address() as AddressInfo).port, hits };
}

describe("an upstream's network", () => {
  test('without a grant the upstream has no route at all; with one, its traffic goes through the egress proxy, under the grant, and every decision is audited with the server, the secret kept out of it', async () => {
    const svc = await hostService();
    // Names map to the host's loopback, which the proxy refuses unless granted: what reaches the
    // service is what slipped past the proxy.
    const resolver = async (name: string) => (name.endsWith('.test') ? ['127.0.0.1'] : []);
    const TOKEN = 'tok9f3ac1d2e7';
    const h = await gatewayWith(
      {
        closed: fixtureEntry(),
        open: fixtureEntry({}, { network: { allow_domains: ['allowed.test'] }, secrets: { API_TOKEN: 'api_token' } }),
      },
      { resolver },
    );
    expect(await h.gateway.approve('closed', ['fetch'], 'operator')).toMatchObject({ ok: true });
    expect(await h.gateway.approve('open', ['fetch'], 'operator')).toMatchObject({ ok: true });

    const closed = await h.gateway.execute(job(await tool(h.gateway, 'closed.fetch'), { url: `http://127.0.0.1:${svc.port}/direct` }));
    expect(closed.ok && textOf(closed.content)).toMatch(/^FAILED /);
    const byName = await h.gateway.execute(job(await tool(h.gateway, 'closed.fetch'), { url: `http://allowed.test:${svc.port}/byname` }));
    expect(byName.ok && textOf(byName.content)).toMatch(/^FAILED /);

    const secrets = new Map([['api_token', TOKEN]]);
    const openTool = await tool(h.gateway, 'open.fetch');
    const denied = await h.gateway.execute(job(openTool, { url: `http://other.test:${svc.port}/other` }, { secrets }));
    expect(denied.ok && textOf(denied.content)).toMatch(/403|FAILED/);
    const loop = await h.gateway.execute(job(openTool, { url: `http://allowed.test:${svc.port}/loopback` }, { secrets }));
    // allowed.test resolves to loopback, which the server's grant does not open.
    expect(loop.ok && textOf(loop.content)).toMatch(/403|FAILED/);
    const leak = await h.gateway.execute(job(openTool, { url: `http://${TOKEN}.other.test:${svc.port}/leak` }, { secrets }));
    expect(leak.ok).toBe(true);
    expect(svc.hits).toEqual([]);

    const net = h.host.entries.filter((e) => e.type.startsWith('network.'));
    expect(net.length).toBeGreaterThanOrEqual(3);
    expect(net.every((e) => e.data.server === 'open')).toBe(true);
    expect(net.filter((e) => e.type === 'network.denied').length).toBeGreaterThanOrEqual(3);
    expect(JSON.stringify(h.host.entries)).not.toContain(TOKEN);
    expect(JSON.stringify(net)).toContain('<redacted:api_token>');
  });
});
