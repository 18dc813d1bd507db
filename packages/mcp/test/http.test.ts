import { request } from 'node:http';
import { scaled, waitFor } from '@forge/test-utils';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type ServeHttpOptions, serveHttp } from '../src/index.js';
import { CAPABILITIES, call, example, forgeOk, listChanges, newForge, py, runsStarted, tempDirs } from './helpers.js';

const INIT = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
};

async function serve(options: ServeHttpOptions = {}) {
  const dirs = tempDirs();
  const forge = await newForge(dirs);
  const server = await serveHttp(forge, options);
  onTestFinished(() => server.close());
  return { forge, server, dirs };
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
    expect(client.getServerCapabilities()).toEqual(CAPABILITIES);
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
    // A refused token is named by its place and a fingerprint, never by any of its characters.
    const err = await serveHttp(forge, { tokens: { [TOKEN_ADMIN]: { persona: 'not a persona' } } }).catch((e: Error) => e);
    expect((err as Error).message).toMatch(/token #1 \(sha256 [0-9a-f]{8}\)/);
    expect((err as Error).message).not.toContain(TOKEN_ADMIN.slice(0, 4));
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
    // Keep one session busy with requests while the other stays quiet, until the quiet one is closed.
    const busyAsks = async () => {
      await busy.client.listTools();
      return true;
    };
    await waitFor('the idle session to be closed', async () => (await busyAsks()) && !server.sessions().includes(idleId), {
      intervalMs: 100,
    });
    // Lets time pass: the busy session must outlive several more idle periods (sessionIdleMs 300)
    // while it keeps asking; its staying open is the absence of an event (no close to wait for).
    for (let i = 0; i < 9; i++) {
      await busyAsks();
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
    const { server, dirs } = await serve({ graceMs: scaled(5000) });
    const { client } = await httpClient(server.url);
    await forgeOk(client, py('slow', 'import time\ntime.sleep(0.5)\nprint(json.dumps({"ok": True, "data": "done"}))'));
    const runs = runsStarted(dirs.project);
    const pending = call(client, 'slow');
    await waitFor('the call to start its run', () => runsStarted(dirs.project) > runs);
    await server.close();
    expect((await pending).envelope).toMatchObject({ ok: true, data: 'done' });
    await expect(fetch(server.url, { method: 'POST', body: '{}' })).rejects.toThrow();
  });
});

/** A raw initialize by fetch: status, Retry-After, the JSON-RPC body and the new session's id. */
async function initRaw(url: string, token?: string) {
  const r = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...(token ? { authorization: `Bearer ${token}` } : {}),
    },
    body: JSON.stringify(INIT),
  });
  const text = await r.text();
  const body = r.headers.get('content-type')?.includes('json') ? (JSON.parse(text) as Record<string, unknown>) : text;
  return { status: r.status, retryAfter: r.headers.get('retry-after'), body, session: r.headers.get('mcp-session-id') };
}

/** DELETE of a session, as a client ending it does. */
async function deleteSession(url: string, session: string, token?: string): Promise<number> {
  const r = await fetch(url, {
    method: 'DELETE',
    headers: { 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18', ...(token ? { authorization: `Bearer ${token}` } : {}) },
  });
  await r.arrayBuffer();
  return r.status;
}

describe('per-principal session cap', () => {
  const tokens = { [TOKEN_ADMIN]: { persona: 'admin' }, [TOKEN_READER]: { persona: 'reader' } };
  const local = (url: string) => url.replace('0.0.0.0', '127.0.0.1');

  it('a token at its cap gets 429 naming the cap and how to free a slot; another token still opens sessions; a DELETE lets the first open again', async () => {
    const { server } = await serve({ host: '0.0.0.0', tokens, maxSessionsPerPrincipal: 2 });
    const url = local(server.url);
    // Two real SDK sessions of admin: each keeps its notification stream open, so neither is idle.
    const a1 = await httpClient(url, TOKEN_ADMIN);
    await httpClient(url, TOKEN_ADMIN);

    const refused = await initRaw(url, TOKEN_ADMIN);
    expect(refused.status).toBe(429);
    expect(refused.session).toBeNull();
    expect(refused.body).toMatchObject({ jsonrpc: '2.0', id: 1, error: { code: -32000 } });
    const message = (refused.body as { error: { message: string } }).error.message;
    expect(message).toContain('too many sessions for the token of persona "admin": 2 open, the cap is 2 per principal');
    expect(message).toContain('maxSessionsPerPrincipal, forge serve --max-sessions-per-principal');
    expect(message).toContain('DELETE /mcp and its mcp-session-id header');
    expect(message).toContain('closed after 30 min idle (sessionIdleMs)');
    expect(message).toContain('all of them have a request or stream open');
    expect(message).not.toContain(TOKEN_ADMIN);
    expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    // The official client sees the same refusal, with the message.
    await expect(httpClient(url, TOKEN_ADMIN)).rejects.toMatchObject({
      code: 429,
      message: expect.stringContaining('the cap is 2 per principal'),
    });

    // The other token is not starved: it opens its own sessions, up to its own cap.
    const b1 = await httpClient(url, TOKEN_READER);
    expect((await b1.client.listTools()).tools).toHaveLength(5);
    expect((await initRaw(url, TOKEN_READER)).status).toBe(200);
    expect((await initRaw(url, TOKEN_READER)).status).toBe(429);
    expect(server.sessions()).toHaveLength(4);

    // admin ends one of its sessions (DELETE): it may open one again, and only one.
    await a1.transport.terminateSession();
    expect(server.sessions()).toHaveLength(3);
    const again = await httpClient(url, TOKEN_ADMIN);
    expect((await again.client.listTools()).tools).toHaveLength(5);
    expect((await initRaw(url, TOKEN_ADMIN)).status).toBe(429);
  });

  it('by default each token gets an even share of maxSessions, so one token filling its share never leaves another a 503', async () => {
    const { server } = await serve({ host: '0.0.0.0', tokens, maxSessions: 6 });
    const url = local(server.url);
    for (let i = 0; i < 3; i++) expect((await initRaw(url, TOKEN_ADMIN)).status).toBe(200);
    const over = await initRaw(url, TOKEN_ADMIN);
    expect(over.status).toBe(429);
    expect(JSON.stringify(over.body)).toContain('the cap is 3 per principal');
    for (let i = 0; i < 3; i++) expect((await initRaw(url, TOKEN_READER)).status).toBe(200);
    expect(server.sessions()).toHaveLength(6);
  });

  it('an idle session expiring frees its slot; Retry-After says when', async () => {
    const { server } = await serve({ host: '0.0.0.0', tokens, maxSessionsPerPrincipal: 1, sessionIdleMs: 400 });
    const url = local(server.url);
    const first = await initRaw(url, TOKEN_ADMIN);
    expect(first.status).toBe(200);
    const refused = await initRaw(url, TOKEN_ADMIN);
    expect(refused.status).toBe(429);
    expect(refused.retryAfter).toBe('1');
    expect(JSON.stringify(refused.body)).toMatch(/closed after 400 ms idle \(sessionIdleMs\); the next one expires in about 1 s/);
    await waitFor('the idle session to expire', () => !server.sessions().includes(first.session as string), {
      timeoutMs: 5000,
      intervalMs: 50,
    });
    expect(server.sessions()).toEqual([]);
    const after = await initRaw(url, TOKEN_ADMIN);
    expect(after.status).toBe(200);
    // And a raw DELETE frees a slot too, at once.
    expect(await deleteSession(url, after.session as string, TOKEN_ADMIN)).toBe(200);
    expect((await initRaw(url, TOKEN_ADMIN)).status).toBe(200);
  });

  it('loopback without tokens: one principal, which may use all of maxSessions by default or be capped explicitly', async () => {
    const all = await serve({ maxSessions: 3 });
    for (let i = 0; i < 3; i++) expect((await initRaw(all.server.url)).status).toBe(200);
    const full = await initRaw(all.server.url);
    expect(full.status).toBe(429);
    expect(JSON.stringify(full.body)).toContain('the loopback caller');

    const capped = await serve({ maxSessionsPerPrincipal: 2 });
    const opened = [await initRaw(capped.server.url), await initRaw(capped.server.url)];
    expect(opened.map((o) => o.status)).toEqual([200, 200]);
    const refused = await initRaw(capped.server.url);
    expect(refused.status).toBe(429);
    expect((refused.body as { error: { message: string } }).error.message).toContain(
      'too many sessions for the loopback caller (without tokens every local client is this one principal; give each client its own token to cap them apart): 2 open, the cap is 2',
    );
    expect(await deleteSession(capped.server.url, opened[0]?.session as string)).toBe(200);
    expect((await initRaw(capped.server.url)).status).toBe(200);
  });

  it('the server-wide cap still holds when the per-principal caps add up to more: 503 naming maxSessions', async () => {
    const { server } = await serve({ host: '0.0.0.0', tokens, maxSessions: 4, maxSessionsPerPrincipal: 3 });
    const url = local(server.url);
    for (let i = 0; i < 3; i++) expect((await initRaw(url, TOKEN_ADMIN)).status).toBe(200);
    expect((await initRaw(url, TOKEN_READER)).status).toBe(200);
    const full = await initRaw(url, TOKEN_READER);
    expect(full.status).toBe(503);
    expect(Number(full.retryAfter)).toBeGreaterThan(0);
    expect((full.body as { error: { message: string } }).error.message).toContain(
      'too many sessions on this server: 4 open, the cap is 4 (maxSessions, forge serve --max-sessions)',
    );
  });

  it('with the defaults (256 sessions, two tokens) one token opening sessions in a loop gets 128 and the other still gets its 128', async () => {
    const { server } = await serve({ host: '0.0.0.0', tokens });
    const url = local(server.url);
    const statuses = async (token: string) => {
      const out: number[] = [];
      for (let i = 0; i < 129; i++) out.push((await initRaw(url, token)).status);
      return out;
    };
    expect(await statuses(TOKEN_ADMIN)).toEqual([...Array(128).fill(200), 429]);
    expect(await statuses(TOKEN_READER)).toEqual([...Array(128).fill(200), 429]);
    expect(server.sessions()).toHaveLength(256);
  });

  it('a cap that is not a positive integer, or above maxSessions, is refused at start', async () => {
    const forge = await newForge();
    for (const bad of [0, -1, 1.5, Number.NaN])
      await expect(serveHttp(forge, { maxSessionsPerPrincipal: bad })).rejects.toMatchObject({
        code: 'invalid_options',
        message: expect.stringContaining('maxSessionsPerPrincipal must be a positive integer'),
      });
    await expect(serveHttp(forge, { maxSessions: 0 })).rejects.toMatchObject({ code: 'invalid_options' });
    await expect(serveHttp(forge, { sessionIdleMs: 0 })).rejects.toMatchObject({ code: 'invalid_options' });
    await expect(serveHttp(forge, { maxSessions: 4, maxSessionsPerPrincipal: 5 })).rejects.toMatchObject({
      code: 'invalid_options',
      message: 'maxSessionsPerPrincipal (5) is above maxSessions (4): lower it, or raise maxSessions',
    });
  });
});
