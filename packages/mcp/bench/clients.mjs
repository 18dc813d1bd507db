// The clients of the benchmark, all with one face: `list()` sends tools/list, `call(name, args)`
// tools/call. The 2025 era through the SDK v1 client (initialize, a session), the 2026-07-28 era
// through the SDK v2 client pinned to it (stateless), over stdio (a real child server) and
// Streamable HTTP (serveHttp on loopback), the in-memory transport as a reference; and the same
// requests as raw JSON-RPC with no client library, to tell the client's time from the server's.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as v2 from '@modelcontextprotocol/client';
import * as v2stdio from '@modelcontextprotocol/client/stdio';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { CallToolResultSchema, ListToolsResultSchema } from '@modelcontextprotocol/sdk/types.js';

/** A stdio server process as `forge serve` runs it (imports this package's dist/). */
export const FIXTURE = join(dirname(fileURLToPath(import.meta.url)), '../test/fixtures/stdio-server.mjs');
export const MODERN = '2026-07-28';

// Each has the same face: list() sends tools/list (the answer parsed against the MCP schema, no
// client-side tool cache or validator compilation), call(name, args) sends tools/call.

export const childEnv = (d) => ({ PATH: process.env.PATH, FORGE_HOME: d.home, FORGE_PROJECT: d.project });

export function face(scope, label, client, extra = {}) {
  const closed = { done: false };
  const c = {
    label,
    client,
    list: () => client.request({ method: 'tools/list', params: {} }, ListToolsResultSchema),
    call: (name, args) => client.callTool({ name, arguments: args }, CallToolResultSchema),
    close: async () => {
      if (closed.done) return;
      closed.done = true;
      await client.close();
    },
    ...extra,
  };
  scope.defer(c.close);
  return c;
}

function modernFace(scope, label, client, extra = {}) {
  return face(scope, label, client, {
    list: () => client.request({ method: 'tools/list', params: {} }),
    call: (name, args) => client.callTool({ name, arguments: args }),
    ...extra,
  });
}

async function inMemory(scope, mcp, forge) {
  const server = mcp.createForgeMcpServer(forge);
  const [c, s] = InMemoryTransport.createLinkedPair();
  const client = new Client({ name: 'bench', version: '1' });
  await server.connect(s);
  await client.connect(c);
  scope.defer(() => server.close());
  return face(scope, 'in-memory 2025', client);
}

async function legacyStdio(scope, d) {
  const transport = new StdioClientTransport({ command: process.execPath, args: [FIXTURE], env: childEnv(d), stderr: 'pipe' });
  const client = new Client({ name: 'bench', version: '1' });
  await client.connect(transport);
  return face(scope, '2025 stdio', client, { pid: transport.pid });
}

async function legacyHttp(scope, url) {
  const client = new Client({ name: 'bench', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return face(scope, '2025 HTTP', client);
}

const modernClient = () => new v2.Client({ name: 'bench', version: '1' }, { versionNegotiation: { mode: { pin: MODERN } } });

async function modernStdio(scope, d) {
  const transport = new v2stdio.StdioClientTransport({ command: process.execPath, args: [FIXTURE], env: childEnv(d), stderr: 'pipe' });
  const client = modernClient();
  await client.connect(transport);
  if (client.getProtocolEra() !== 'modern') throw new Error('2026 stdio: the client did not negotiate the 2026-07-28 era');
  return modernFace(scope, '2026 stdio', client, { pid: transport.pid });
}

async function modernHttp(scope, url) {
  const client = modernClient();
  await client.connect(new v2.StreamableHTTPClientTransport(new URL(url)));
  if (client.getProtocolEra() !== 'modern') throw new Error('2026 HTTP: the client did not negotiate the 2026-07-28 era');
  return modernFace(scope, '2026 HTTP', client);
}

// The same requests without an SDK client (JSON-RPC written by hand), to tell the client's time
// from the server's: a 2025 session (initialize, then its session id on every request) and
// stateless 2026-07-28 requests (protocol version and client info in each request's _meta).
const LEGACY_VERSION = '2025-11-25';
const META = {
  'io.modelcontextprotocol/protocolVersion': MODERN,
  'io.modelcontextprotocol/clientInfo': { name: 'bench', version: '1' },
  'io.modelcontextprotocol/clientCapabilities': {},
};
const INITIALIZE = { protocolVersion: LEGACY_VERSION, capabilities: {}, clientInfo: { name: 'bench', version: '1' } };
const failed = (label, text) => {
  throw new Error(`${label}: ${text.slice(0, 300)}`);
};

async function wireHttp(scope, url) {
  let id = 0;
  const post = async (label, body, headers) => {
    const r = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
      body: JSON.stringify(body),
    });
    const text = await r.text();
    if (r.status >= 300 || (body.id !== undefined && (!text.includes('"result"') || text.includes('"isError":true'))))
      failed(`${label} ${body.method}`, `HTTP ${r.status} ${text}`);
    return r;
  };
  const init = await post('raw 2025 HTTP', { jsonrpc: '2.0', id: id++, method: 'initialize', params: INITIALIZE }, {});
  const session = { 'mcp-session-id': init.headers.get('mcp-session-id'), 'mcp-protocol-version': LEGACY_VERSION };
  await post('raw 2025 HTTP', { jsonrpc: '2.0', method: 'notifications/initialized' }, session);
  scope.defer(() => fetch(url, { method: 'DELETE', headers: session }).then((r) => r.body?.cancel()));
  return {
    legacy: (method, params) => post('raw 2025 HTTP', { jsonrpc: '2.0', id: id++, method, params }, session),
    modern: (method, params) =>
      post(
        'raw 2026 HTTP',
        { jsonrpc: '2.0', id: id++, method, params: { ...params, _meta: META } },
        { 'mcp-protocol-version': MODERN, 'mcp-method': method, ...(params.name ? { 'mcp-name': params.name } : {}) },
      ),
  };
}

async function wireStdio(scope, d, era) {
  const label = `raw ${era === 'modern' ? 2026 : 2025} stdio`;
  const child = spawn(process.execPath, [FIXTURE], { env: childEnv(d), stdio: ['pipe', 'pipe', 'ignore'] });
  const exited = once(child, 'exit');
  scope.defer(async () => {
    child.stdin.end();
    await exited;
  });
  const waiting = new Map();
  let buf = '';
  let id = 0;
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (chunk) => {
    buf += chunk;
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      const m = JSON.parse(line);
      const w = waiting.get(m.id);
      if (!w) continue;
      waiting.delete(m.id);
      if (m.error || m.result?.isError) w.reject(new Error(`${label}: ${line.slice(0, 300)}`));
      else w.resolve(m.result);
    }
  });
  const send = (m) => child.stdin.write(`${JSON.stringify(m)}\n`);
  const request = (method, params) =>
    new Promise((resolve, reject) => {
      const i = id++;
      waiting.set(i, { resolve, reject });
      send({ jsonrpc: '2.0', id: i, method, params });
    });
  if (era === 'legacy') {
    await request('initialize', INITIALIZE);
    send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    return { request };
  }
  return { request: (method, params) => request(method, { ...params, _meta: META }) };
}

async function http(scope, mcp, forge) {
  const server = await mcp.serveHttp(forge, { graceMs: 1000 });
  scope.defer(() => server.close());
  return server;
}

/** All four era × transport clients (and the in-memory reference) of one Forge over `d`, and the raw ones. */
export async function clients(scope, mcp, forge, d, { withRaw = false } = {}) {
  const server = await http(scope, mcp, forge);
  const sdk = [
    await inMemory(scope, mcp, forge),
    await legacyStdio(scope, d),
    await legacyHttp(scope, server.url),
    await modernStdio(scope, d),
    await modernHttp(scope, server.url),
  ];
  if (!withRaw) return { sdk, raw: [] };
  const h = await wireHttp(scope, server.url);
  const ls = await wireStdio(scope, d, 'legacy');
  const ms = await wireStdio(scope, d, 'modern');
  const raw = [
    { label: 'raw 2025 stdio', request: ls.request },
    { label: 'raw 2025 HTTP', request: h.legacy },
    { label: 'raw 2026 stdio', request: ms.request },
    { label: 'raw 2026 HTTP', request: h.modern },
  ];
  return { sdk, raw };
}
