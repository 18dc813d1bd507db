// 2025-era HTTP streams are resumable (Last-Event-ID), and 2026-era requests carry caching hints
// and are held to their standard headers — raw HTTP, as a client sends it.
import { scaled, waitFor } from '@forge/test-utils';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { SessionEventStore } from '../src/eventStore.js';
import { serveHttp } from '../src/index.js';
import { newForge, py } from './helpers.js';

const JSON_SSE = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

/** Reads SSE events from a response until `want` of them arrived (or the timeout), then cancels it. */
async function events(res: Response, want: number, ms = scaled(5000)): Promise<{ id?: string; data?: string; retry?: string }[]> {
  const out: { id?: string; data?: string; retry?: string }[] = [];
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  let buf = '';
  const timer = setTimeout(() => void reader.cancel(), ms);
  try {
    while (out.length < want) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let end = buf.indexOf('\n\n');
      while (end >= 0) {
        const ev: Record<string, string> = {};
        for (const line of buf.slice(0, end).split('\n')) {
          const c = line.indexOf(':');
          if (c > 0) ev[line.slice(0, c)] = line.slice(c + 1).trim();
        }
        out.push(ev);
        buf = buf.slice(end + 2);
        end = buf.indexOf('\n\n');
      }
    }
  } finally {
    clearTimeout(timer);
    await reader.cancel().catch(() => {});
  }
  return out;
}

describe('2025 era: resumable streams', () => {
  it('a POST stream primes with an id and retry; a GET stream client that reconnects with Last-Event-ID gets what it missed', async () => {
    // What the sessions' event stores keep for replay: the test waits on it, not on a clock.
    const storing = vi.spyOn(SessionEventStore.prototype, 'storeEvent');
    onTestFinished(() => storing.mockRestore());
    const stored = () =>
      storing.mock.calls.map(([, message]) => (message as { method?: string }).method).filter((m) => m?.endsWith('/list_changed'));
    const forge = await newForge();
    const server = await serveHttp(forge);
    onTestFinished(() => server.close());
    const init = await fetch(server.url, {
      method: 'POST',
      headers: JSON_SSE,
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 0,
        method: 'initialize',
        params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
      }),
    });
    const sid = init.headers.get('mcp-session-id') as string;
    await init.text();
    const h = { ...JSON_SSE, 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' };
    await (
      await fetch(server.url, { method: 'POST', headers: h, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) })
    ).text();

    // A POST answered on an SSE stream opens with the priming event: an id and the retry interval.
    const listing = await fetch(server.url, {
      method: 'POST',
      headers: h,
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    const primed = await events(listing, 2);
    expect(primed[0]).toMatchObject({ id: expect.any(String), retry: '1000' });
    expect(JSON.parse(primed[1]?.data ?? '{}').result.tools.length).toBe(5);

    // The GET stream: one change heard, then the stream is lost and another change happens.
    const get = await fetch(server.url, { method: 'GET', headers: { ...h, accept: 'text/event-stream' } });
    const heard = events(get, 1);
    await forge.forgeTool(py('first', 'print(json.dumps({"ok": True, "data": 1}))'));
    const [seen] = await heard;
    expect(JSON.parse(seen?.data ?? '{}').method).toBe('notifications/tools/list_changed');
    expect(seen?.id).toBeTruthy();
    await forge.forgeTool(py('missed', 'print(json.dumps({"ok": True, "data": 1}))'));
    // Both changes' notifications (tools, then resources, each) kept for replay while no stream is open.
    await waitFor(
      () => `the missed change to be kept for replay (kept: ${JSON.stringify(stored())})`,
      () => stored().length >= 4,
    );
    const again = await fetch(server.url, {
      method: 'GET',
      headers: { ...h, accept: 'text/event-stream', 'last-event-id': seen?.id as string },
    });
    const replayed = await events(again, 3);
    // What followed the last event seen: the rest of the first change, and all of the missed one.
    expect(replayed.map((e) => JSON.parse(e.data ?? '{}').method)).toEqual([
      'notifications/resources/list_changed',
      'notifications/tools/list_changed',
      'notifications/resources/list_changed',
    ]);
    expect(replayed[0]?.id).not.toBe(seen?.id);
  });
});

describe('2026 era: caching hints and standard headers', () => {
  const envelope = {
    'io.modelcontextprotocol/protocolVersion': '2026-07-28',
    'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' },
    'io.modelcontextprotocol/clientCapabilities': {},
  };
  it('tools/list carries ttlMs and cacheScope; a mismatched Mcp-Method is -32020', async () => {
    const forge = await newForge();
    const server = await serveHttp(forge);
    onTestFinished(() => server.close());
    const post = (method: string, headers: Record<string, string>) =>
      fetch(server.url, {
        method: 'POST',
        headers: { ...JSON_SSE, 'mcp-protocol-version': '2026-07-28', ...headers },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: { _meta: envelope } }),
      });
    const listed = (await (await post('tools/list', { 'mcp-method': 'tools/list' })).json()) as { result: Record<string, unknown> };
    expect(listed.result).toMatchObject({ resultType: 'complete', ttlMs: 0, cacheScope: 'private' });
    const bad = await post('tools/list', { 'mcp-method': 'prompts/list' });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: number } }).error.code).toBe(-32020);
    const discover = (await (await post('server/discover', { 'mcp-method': 'server/discover' })).json()) as {
      result: { capabilities: Record<string, unknown> };
    };
    expect(discover.result.capabilities).toMatchObject({
      tools: { listChanged: true },
      logging: {},
      extensions: { 'io.modelcontextprotocol/tasks': {} },
    });
  });

  it('Mcp-Param-* headers of x-mcp-header inputs are checked against the body (-32020); the keyword stays in tools/list', async () => {
    const forge = await newForge();
    const made = await forge.forgeTool(
      py('geo.lookup', 'print(json.dumps({"ok": True, "data": args}))', {
        input_schema: {
          type: 'object',
          properties: { region: { type: 'string', 'x-mcp-header': 'Region' }, n: { type: 'integer', 'x-mcp-header': 'N' } },
        },
      }),
    );
    expect(made.ok, JSON.stringify(made)).toBe(true);
    const server = await serveHttp(forge);
    onTestFinished(() => server.close());
    const call = (args: Record<string, unknown>, headers: Record<string, string>) =>
      fetch(server.url, {
        method: 'POST',
        headers: { ...JSON_SSE, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'geo__lookup', ...headers },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 7,
          method: 'tools/call',
          params: { name: 'geo__lookup', arguments: args, _meta: envelope },
        }),
      });
    const listed = (await (
      await fetch(server.url, {
        method: 'POST',
        headers: { ...JSON_SSE, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/list' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: envelope } }),
      })
    ).json()) as { result: { tools: { name: string; inputSchema: { properties?: Record<string, Record<string, unknown>> } }[] } };
    const tool = listed.result.tools.find((t) => t.name === 'geo__lookup');
    expect(tool?.inputSchema.properties?.region).toEqual({ type: 'string', 'x-mcp-header': 'Region' });

    const good = await call({ region: 'eu-west', n: 3 }, { 'mcp-param-region': 'eu-west', 'mcp-param-n': '3' });
    expect(good.status).toBe(200);
    const b64 = await call({ region: 'süd' }, { 'mcp-param-region': `=?base64?${Buffer.from('süd').toString('base64')}?=` });
    expect(b64.status).toBe(200);
    await b64.text();
    for (const [args, headers] of [
      [{ region: 'eu-west' }, { 'mcp-param-region': 'us-east' }],
      [{ region: 'eu-west' }, {}],
      [{ n: 3 }, { 'mcp-param-n': '4' }],
      [{ region: 'x' }, { 'mcp-param-region': '=?base64?not base64?=' }],
    ] as const) {
      const r = await call(args, headers);
      expect(r.status, JSON.stringify([args, headers])).toBe(400);
      expect(((await r.json()) as { error: { code: number; message: string } }).error).toMatchObject({
        code: -32020,
        message: expect.stringMatching(/Mcp-Param-/),
      });
    }
    // A value the body does not carry needs no header.
    expect((await call({}, {})).status).toBe(200);

    // A tool of the caller's own session scope (the 2026 session is the credential's) is checked too.
    const forged = await fetch(server.url, {
      method: 'POST',
      headers: { ...JSON_SSE, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'forge_tool' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 8,
        method: 'tools/call',
        params: {
          name: 'forge_tool',
          arguments: {
            ...py('mine', 'print(json.dumps({"ok": True, "data": args}))', {
              input_schema: { type: 'object', properties: { zone: { type: 'string', 'x-mcp-header': 'Zone' } } },
            }),
            scope: 'session',
          },
          _meta: envelope,
        },
      }),
    });
    expect(forged.status).toBe(200);
    expect(await forged.text()).toContain('\\"ok\\":true');
    const wrong = await fetch(server.url, {
      method: 'POST',
      headers: { ...JSON_SSE, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'mine', 'mcp-param-zone': 'b' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 9,
        method: 'tools/call',
        params: { name: 'mine', arguments: { zone: 'a' }, _meta: envelope },
      }),
    });
    expect(wrong.status).toBe(400);
  });
});
