import { request } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type ServeHttpOptions, serveHttp } from '../src/index.js';
import { call, example, forgeOk, listChanges, newForge, py } from './helpers.js';

const INIT = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
};

async function serve(options: ServeHttpOptions = {}) {
  const forge = await newForge();
  const server = await serveHttp(forge, options);
  onTestFinished(() => server.close());
  return { forge, server };
}

async function httpClient(url: string, token?: string) {
  const transport = new StreamableHTTPClientTransport(
    new URL(url),
    token ? { requestInit: { headers: { Authorization: `Bearer ${token}` } } } : {},
  );
  const client = new Client({ name: 'forge-mcp-http-test', version: '1.0.0' });
  const changes = listChanges(client);
  await client.connect(transport);
  onTestFinished(() => client.close());
  return { client, changes, transport };
}

/** A raw POST of an initialize request, with the headers given (Host included). */
function rawInit(url: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
      },
      (res) => {
        let body = '';
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify(INIT));
  });
}

const TOKEN_READER = 'reader-token-0123456789abcdef';
const TOKEN_ADMIN = 'admin-token-0123456789abcdef';

describe('Streamable HTTP transport', () => {
  it('a good session on loopback: initialize, list, forge → list_changed, call', async () => {
    const { server } = await serve();
    expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    const { client, changes, transport } = await httpClient(server.url);
    expect(client.getServerCapabilities()).toEqual({ tools: { listChanged: true } });
    expect(transport.sessionId).toEqual(expect.any(String));
    expect(server.sessions()).toEqual([transport.sessionId]);
    expect((await client.listTools()).tools).toHaveLength(5);
    const changed = changes.next();
    await forgeOk(client, await example('fib'));
    await changed;
    expect((await client.listTools()).tools.map((t) => t.name)).toContain('fib');
    const { result } = await call(client, 'fib', { n: 30 });
    expect(result).toMatchObject({ isError: false, structuredContent: { n: 30, fib: '832040' } });
  });

  it('a bad Origin is 403; a loopback or listed Origin is served', async () => {
    const { server } = await serve({ allowedOrigins: ['https://app.example.com'] });
    const host = new URL(server.url).host;
    const evil = await rawInit(server.url, { host, origin: 'http://evil.example' });
    expect(evil.status).toBe(403);
    expect(JSON.parse(evil.body)).toMatchObject({ jsonrpc: '2.0', error: { message: expect.stringContaining('Origin') } });
    expect((await rawInit(server.url, { host, origin: 'https://app.example.com' })).status).toBe(200);
    expect((await rawInit(server.url, { host, origin: `http://localhost:5173` })).status).toBe(200);
  });

  it('a bad Host is 403 on a loopback bind (DNS rebinding)', async () => {
    const { server } = await serve();
    const port = new URL(server.url).port;
    const rebound = await rawInit(server.url, { host: `attacker.example:${port}` });
    expect(rebound.status).toBe(403);
    expect(rebound.body).toContain('Host');
    expect((await rawInit(server.url, { host: `localhost:${port}` })).status).toBe(200);
  });

  it('a non-loopback bind without tokens is refused with a clear message', async () => {
    const forge = await newForge();
    await expect(serveHttp(forge, { host: '0.0.0.0' })).rejects.toMatchObject({
      name: 'ForgeMcpError',
      code: 'tokens_required',
      message: expect.stringContaining('needs bearer tokens'),
    });
    await expect(serveHttp(forge, { tokens: { short: { persona: 'x' } } })).rejects.toMatchObject({ code: 'invalid_options' });
    await expect(serveHttp(forge, { tokens: { [TOKEN_ADMIN]: { persona: 'not a persona' } } })).rejects.toMatchObject({
      code: 'invalid_options',
    });
  });

  it('tokens: a missing or wrong token is 401; a token maps to its persona and ACL', async () => {
    const tokens = { [TOKEN_ADMIN]: { persona: 'admin' }, [TOKEN_READER]: { persona: 'reader', allowedTools: 'fib' } };
    const { forge, server } = await serve({ host: '0.0.0.0', tokens });
    const url = server.url.replace('0.0.0.0', '127.0.0.1');
    const host = new URL(url).host;
    expect((await rawInit(url, { host })).status).toBe(401);
    expect((await rawInit(url, { host, authorization: 'Bearer wrong-token-0123456789abcdef' })).status).toBe(401);
    expect((await rawInit(url, { host, authorization: `Bearer ${TOKEN_READER}` })).status).toBe(200);

    const calls: { persona: unknown; name: unknown; ok: unknown }[] = [];
    forge.on('audit', (e) => {
      if (e.type === 'forge.called' || e.type === 'acl.persona_denied')
        calls.push({ persona: e.data.persona, name: e.data.name, ok: e.data.ok });
    });
    const admin = await httpClient(url, TOKEN_ADMIN);
    await forgeOk(admin.client, await example('fib'));
    await forgeOk(admin.client, py('other', 'print(json.dumps({"ok": True, "data": 1}))'));
    const reader = await httpClient(url, TOKEN_READER);
    expect((await call(reader.client, 'fib', { n: 4 })).envelope).toMatchObject({ ok: true, data: { fib: '3' } });
    const denied = await call(reader.client, 'other');
    expect(denied.result.isError).toBe(true);
    expect(denied.envelope).toMatchObject({
      ok: false,
      error: { kind: 'acl.persona_denied', message: expect.stringContaining('"reader"') },
    });
    expect(calls).toEqual([
      { persona: 'reader', name: 'fib', ok: true },
      { persona: 'reader', name: 'other', ok: false },
    ]);
    // A session answers only the token that opened it.
    const hijack = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${TOKEN_READER}`,
        'mcp-session-id': admin.transport.sessionId ?? '',
        'mcp-protocol-version': '2025-06-18',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }),
    });
    expect(hijack.status).toBe(403);
  });

  it('two sessions are independent: each its own forge session and session scope', async () => {
    const { forge, server } = await serve();
    const a = await httpClient(server.url);
    const b = await httpClient(server.url);
    expect(a.transport.sessionId).not.toBe(b.transport.sessionId);
    await b.client.listTools();
    const sessions: unknown[] = [];
    forge.on('audit', (e) => {
      if (e.type === 'forge.created') sessions.push(e.data.session);
    });
    await forgeOk(a.client, py('mine', 'print(json.dumps({"ok": True, "data": 1}))'), { scope: 'session' });
    expect(sessions).toEqual([a.transport.sessionId]);
    expect((await a.client.listTools()).tools.map((t) => t.name)).toContain('mine');
    expect((await b.client.listTools()).tools.map((t) => t.name)).not.toContain('mine');
    expect((await call(b.client, 'forge_call', { name: 'mine' })).envelope).toMatchObject({ ok: false, error: { kind: 'unknown_tool' } });
    expect(b.changes.count()).toBe(0);
    expect(server.sessions().sort()).toEqual([a.transport.sessionId, b.transport.sessionId].sort());
    await a.transport.terminateSession();
    expect(server.sessions()).toEqual([b.transport.sessionId]);
  });

  it('a session whose client left without DELETE is closed after sessionIdleMs; an active one is kept; the expired id gets 404', async () => {
    const { server } = await serve({ sessionIdleMs: 300 });
    const idle = await httpClient(server.url);
    const busy = await httpClient(server.url);
    const idleId = idle.transport.sessionId as string;
    expect(server.sessions()).toHaveLength(2);
    // The first client goes away without DELETE: its notification stream closes, nothing else comes.
    await idle.transport.close();
    // Keep one session busy with requests while the other stays quiet.
    const until = Date.now() + 1200;
    while (Date.now() < until) {
      await busy.client.listTools();
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(server.sessions()).toEqual([busy.transport.sessionId]);
    const r = await fetch(server.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': idleId },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }),
    });
    expect(r.status).toBe(404);
  });

  it('close() lets a call in flight answer, then refuses new connections', async () => {
    const { server } = await serve({ graceMs: 5000 });
    const { client } = await httpClient(server.url);
    await forgeOk(client, py('slow', 'import time\ntime.sleep(0.5)\nprint(json.dumps({"ok": True, "data": "done"}))'));
    const pending = call(client, 'slow');
    await new Promise((r) => setTimeout(r, 150));
    await server.close();
    expect((await pending).envelope).toMatchObject({ ok: true, data: 'done' });
    await expect(fetch(server.url, { method: 'POST', body: '{}' })).rejects.toThrow();
  });
});
