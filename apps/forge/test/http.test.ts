import { request } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { py, requireCliAndSandbox, runCli, scratch, serveHttp } from './helpers.js';

beforeAll(requireCliAndSandbox);

/** A raw POST of an initialize request with the given headers; resolves to the status code. */
function post(url: URL, headers: Record<string, string>): Promise<number> {
  const body = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
  });
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers } },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('forge serve --http', () => {
  it('serves a session: forge, list, call; SIGTERM exits 0', async () => {
    const s = scratch();
    const { url, child } = await serveHttp(s);
    const client = new Client({ name: 'forge-http-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(url));
    onTestFinished(() => client.close().catch(() => {}));
    const made = await client.callTool({
      name: 'forge_tool',
      arguments: py('twice', 'print(json.dumps({"ok": True, "data": args["x"] * 2}))'),
    });
    expect(made.isError).toBe(false);
    expect((await client.listTools()).tools.map((t) => t.name)).toContain('twice');
    const r = await client.callTool({ name: 'twice', arguments: { x: 21 } });
    expect(JSON.parse((r.content as { text: string }[])[0]?.text ?? '{}')).toMatchObject({ ok: true, data: 42 });
    await client.close();
    const exited = new Promise<number | null>((res) => child.on('exit', (code) => res(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });

  it('refuses a foreign Origin and a foreign Host (DNS rebinding)', async () => {
    const s = scratch();
    const { url } = await serveHttp(s);
    expect(await post(url, {})).toBe(200);
    expect(await post(url, { origin: 'https://evil.example' })).toBe(403);
    expect(await post(url, { host: `evil.example:${url.port}` })).toBe(403);
  });

  it('requires a bearer token when given tokens', async () => {
    const s = scratch();
    const token = 'a-long-enough-test-token-0123456789';
    const { url } = await serveHttp(s, ['--token', `${token}=ann`]);
    expect(await post(url, {})).toBe(401);
    expect(await post(url, { authorization: 'Bearer wrong-token-wrong-token' })).toBe(401);
    expect(await post(url, { authorization: `Bearer ${token}` })).toBe(200);
  });

  it('refuses to start on a non-loopback address without tokens (exit 2)', async () => {
    const s = scratch();
    const r = await runCli(['serve', '--http', '0.0.0.0:0'], { cwd: s.project, env: s.env });
    expect(r.code, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(/token/i);
  });
});

describe('forge serve --http session caps', () => {
  /** A raw initialize by fetch: the status and the JSON-RPC error message, if any. */
  async function init(url: URL, token: string): Promise<{ status: number; message?: string }> {
    const r = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${token}` },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
      }),
    });
    const text = await r.text();
    return {
      status: r.status,
      ...(r.status === 200 ? {} : { message: (JSON.parse(text) as { error: { message: string } }).error.message }),
    };
  }

  it('--max-sessions-per-principal caps one token with 429 while another token still opens sessions', async () => {
    const s = scratch();
    const ann = 'ann-token-0123456789abcdef';
    const bob = 'bob-token-0123456789abcdef';
    const { url } = await serveHttp(s, ['--token', `${ann}=ann`, '--token', `${bob}=bob`, '--max-sessions-per-principal', '2']);
    expect((await init(url, ann)).status).toBe(200);
    expect((await init(url, ann)).status).toBe(200);
    const refused = await init(url, ann);
    expect(refused.status).toBe(429);
    expect(refused.message).toContain('too many sessions for the token of persona "ann": 2 open, the cap is 2 per principal');
    expect(refused.message).toContain('--max-sessions-per-principal');
    expect((await init(url, bob)).status).toBe(200);
  });

  it('--max-sessions and --max-sessions-per-principal: the default share, and bad values exit 2 naming the flag', async () => {
    const s = scratch();
    const ann = 'ann-token-0123456789abcdef';
    const bob = 'bob-token-0123456789abcdef';
    // Two tokens share --max-sessions 4 evenly by default: 2 each.
    const { url } = await serveHttp(s, ['--token', `${ann}=ann`, '--token', `${bob}=bob`, '--max-sessions', '4']);
    expect([await init(url, ann), await init(url, ann), await init(url, ann)].map((r) => r.status)).toEqual([200, 200, 429]);
    expect([await init(url, bob), await init(url, bob)].map((r) => r.status)).toEqual([200, 200]);

    const bad = await runCli(['serve', '--http', '127.0.0.1:0', '--max-sessions-per-principal', '0'], { cwd: s.project, env: s.env });
    expect(bad.code, bad.stdout + bad.stderr).toBe(2);
    expect(bad.stderr).toContain('--max-sessions-per-principal expects a positive integer (got "0")');
    const above = await runCli(['serve', '--http', '127.0.0.1:0', '--max-sessions', '2', '--max-sessions-per-principal', '3'], {
      cwd: s.project,
      env: s.env,
    });
    expect(above.code, above.stdout + above.stderr).toBe(2);
    expect(above.stderr).toContain('--max-sessions-per-principal 3 is above --max-sessions 2');
    const stdio = await runCli(['serve', '--max-sessions', '3'], { cwd: s.project, env: s.env });
    expect(stdio.code, stdio.stdout + stdio.stderr).toBe(2);
    expect(stdio.stderr).toContain('--max-sessions applies to --http only');
  });
});
