import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { request } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { CLI, py, requireCliAndSandbox, runCli, type Scratch, scratch } from './helpers.js';

beforeAll(requireCliAndSandbox);

/** `forge serve --http 127.0.0.1:0 --json …` until it prints its URL. */
async function serveHttp(s: Scratch, extra: string[] = []): Promise<{ url: URL; child: ChildProcessWithoutNullStreams }> {
  const child = spawn(process.execPath, [CLI, 'serve', '--http', '127.0.0.1:0', '--json', ...extra], { cwd: s.project, env: s.env });
  onTestFinished(async () => {
    if (child.exitCode !== null) return;
    const exited = new Promise((r) => child.on('exit', r));
    child.kill('SIGTERM');
    await exited;
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      const line = out.split('\n')[0];
      if (out.includes('\n') && line) resolve((JSON.parse(line) as { url: string }).url);
    });
    child.on('exit', (code) => reject(new Error(`forge serve --http exited ${code}: ${err}`)));
  });
  return { url: new URL(url), child };
}

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
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/token/i);
  });
});
