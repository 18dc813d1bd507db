// Pins each behaviour of the MCP SDK that src/sdkInternals.ts relies on, directly against the
// installed SDK (no forge, no sandbox): after an SDK upgrade, a failure here names what changed.
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { toNodeHandler } from '@modelcontextprotocol/node';
import {
  type AuthInfo,
  createMcpHandler,
  type JSONRPCMessage,
  Server,
  type ServerCapabilities,
  type Transport,
} from '@modelcontextprotocol/server';
import { describe, expect, it, onTestFinished } from 'vitest';
import { hookTransports, passAuthInfo, TaskAnsweringServer } from '../src/sdkInternals.js';

const versionOf = (pkg: string): string =>
  (JSON.parse(readFileSync(new URL(`../node_modules/${pkg}/package.json`, import.meta.url), 'utf8')) as { version: string }).version;
const SDK = `@modelcontextprotocol/server ${versionOf('@modelcontextprotocol/server')}, @modelcontextprotocol/node ${versionOf('@modelcontextprotocol/node')}`;

const INFO = { name: 'pin', version: '1.0.0' };
const CAPABILITIES: ServerCapabilities = { tools: {} };
const TASK = { resultType: 'task', task: { taskId: 't-1', status: 'working', createdAt: '2026-01-01T00:00:00Z', ttl: 1000 } };

/** A transport that records what the server sends; `deliver` hands it a message as from a client. */
function fakeTransport(): Transport & {
  sent: JSONRPCMessage[];
  deliver(message: JSONRPCMessage): void;
  answered(id: number): Promise<JSONRPCMessage>;
} {
  const sent: JSONRPCMessage[] = [];
  const waiting = new Map<number, (m: JSONRPCMessage) => void>();
  const t = {
    sent,
    async start() {},
    async close() {},
    async send(message: JSONRPCMessage) {
      sent.push(message);
      const id = (message as { id?: number }).id;
      if (id !== undefined) waiting.get(id)?.(message);
    },
    deliver(message: JSONRPCMessage) {
      t.onmessage?.(message, undefined);
    },
    answered(id: number): Promise<JSONRPCMessage> {
      const done = sent.find((m) => (m as { id?: number }).id === id);
      return done ? Promise.resolve(done) : new Promise((resolve) => waiting.set(id, resolve));
    },
    onmessage: undefined as Transport['onmessage'],
  };
  return t as never;
}

/** Connects `server` to a fake transport and completes a 2025-era initialize. */
async function initialized(server: Server) {
  const transport = fakeTransport();
  await server.connect(transport);
  transport.deliver({
    jsonrpc: '2.0',
    id: 0,
    method: 'initialize',
    params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'pin', version: '1' } },
  });
  await transport.answered(0);
  transport.deliver({ jsonrpc: '2.0', method: 'notifications/initialized' });
  return transport;
}

const callTool = (id: number, params: unknown): JSONRPCMessage => ({ jsonrpc: '2.0', id, method: 'tools/call', params }) as JSONRPCMessage;

describe(`SDK behaviour forge relies on (${SDK})`, () => {
  it('Server#_wrapHandler is the hook setRequestHandler calls, with the method name', () => {
    const wrapped: string[] = [];
    class Recording extends Server {
      protected override _wrapHandler(method: string, handler: Parameters<Server['_wrapHandler']>[1]): ReturnType<Server['_wrapHandler']> {
        wrapped.push(method);
        return super._wrapHandler(method, handler);
      }
    }
    const server = new Recording(INFO, { capabilities: CAPABILITIES });
    server.setRequestHandler('tools/call', async () => ({ content: [] }));
    expect(wrapped).toContain('tools/call');
  });

  it("the SDK's tools/call check strips a task result; TaskAnsweringServer lets it through whole", async () => {
    const answer = async (server: Server) => {
      server.setRequestHandler('tools/call', async () => TASK as never);
      const transport = await initialized(server);
      transport.deliver(callTool(1, { name: 'slow', arguments: {} }));
      return (await transport.answered(1)) as { result?: Record<string, unknown> };
    };
    const plain = await answer(new Server(INFO, { capabilities: CAPABILITIES }));
    expect(plain.result?.task).toBeUndefined();
    const forge = await answer(new TaskAnsweringServer(INFO, { capabilities: CAPABILITIES }));
    expect(forge.result).toMatchObject(TASK);
  });

  it('an error a tools/call handler throws leaves the wrapper unchanged (an error answer, not a result)', async () => {
    const server = new Server(INFO, { capabilities: CAPABILITIES });
    server.setRequestHandler('tools/call', async () => {
      throw new Error('thrown by the handler');
    });
    const transport = await initialized(server);
    transport.deliver(callTool(1, { name: 'x', arguments: {} }));
    expect(await transport.answered(1)).toMatchObject({ error: { message: expect.stringContaining('thrown by the handler') } });
  });

  it('connect sets its own transport.onmessage, which calls one set before it first', async () => {
    const server = new Server(INFO, { capabilities: CAPABILITIES });
    const transport = fakeTransport();
    const before: JSONRPCMessage[] = [];
    const mine = (m: JSONRPCMessage) => void before.push(m);
    transport.onmessage = mine;
    await server.connect(transport);
    expect(transport.onmessage).not.toBe(mine);
    transport.deliver({ jsonrpc: '2.0', id: 5, method: 'ping' });
    expect(before).toEqual([{ jsonrpc: '2.0', id: 5, method: 'ping' }]);
    expect(await transport.answered(5)).toMatchObject({ id: 5, result: {} });
  });

  it('answers go out through transport.send, looked up on the transport when sending', async () => {
    const server = new Server(INFO, { capabilities: CAPABILITIES });
    const transport = fakeTransport();
    await server.connect(transport);
    const replaced: JSONRPCMessage[] = [];
    transport.send = async (message) => void replaced.push(message);
    transport.deliver({ jsonrpc: '2.0', id: 6, method: 'ping' });
    await expect.poll(() => replaced).toEqual([{ jsonrpc: '2.0', id: 6, result: {} }]);
  });

  it('hookTransports: an intercepted message never reaches the SDK; answering runs once the send settled', async () => {
    const server = new Server(INFO, { capabilities: CAPABILITIES });
    const settled: unknown[] = [];
    hookTransports(server, {
      intercept: (m) => (m as { method?: string }).method === 'ping' && (m as { id?: number }).id === 1,
      answering: (m) => ((m as { id?: number }).id === 2 ? () => settled.push((m as { id: number }).id) : undefined),
    });
    const transport = fakeTransport();
    await server.connect(transport);
    transport.deliver({ jsonrpc: '2.0', id: 1, method: 'ping' });
    transport.deliver({ jsonrpc: '2.0', id: 2, method: 'ping' });
    await transport.answered(2);
    await expect.poll(() => settled).toEqual([2]);
    expect(transport.sent.map((m) => (m as { id?: number }).id)).toEqual([2]);
  });

  it("malformed tools/call and tools/list params get the SDK's raw validation dump (why forge answers them itself)", async () => {
    const server = new Server(INFO, { capabilities: CAPABILITIES });
    server.setRequestHandler('tools/call', async () => ({ content: [] }));
    server.setRequestHandler('tools/list', async () => ({ tools: [] }));
    const transport = await initialized(server);
    transport.deliver(callTool(1, { name: 7 }));
    transport.deliver({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: { cursor: 7 } });
    const error = async (id: number) => ((await transport.answered(id)) as { error: { code: number; message: string } }).error;
    const call = await error(1);
    expect(call.code).toBe(-32602);
    expect(call.message).toMatch(/^Invalid tools\/call request: \[\n.*"code": "invalid_type"/s);
    const list = await error(2);
    expect(list.code).toBe(-32603);
    expect(list.message).toMatch(/^\[\n.*"path": \[\n\s*"params",\n\s*"cursor"/s);
  });

  it("toNodeHandler hands a Node request's `auth` to the createMcpHandler factory as authInfo", async () => {
    let seen: AuthInfo | undefined;
    const handler = createMcpHandler(
      ({ authInfo }) => {
        seen = authInfo;
        return new Server(INFO, { capabilities: CAPABILITIES });
      },
      { legacy: 'reject' },
    );
    onTestFinished(() => handler.close());
    const node = toNodeHandler(handler);
    const auth: AuthInfo = { token: '', clientId: 'pinned', scopes: [], extra: { forge: 'caller' } };
    const http = createServer((req: IncomingMessage, res) => {
      passAuthInfo(req, auth);
      void node(req, res);
    });
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    onTestFinished(() => new Promise<void>((resolve) => http.close(() => resolve())));
    const { port } = http.address() as AddressInfo;
    const res = await fetch(`http://127.0.0.1:${port}/mcp`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2026-07-28',
        'mcp-method': 'server/discover',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'server/discover',
        params: {
          _meta: {
            'io.modelcontextprotocol/protocolVersion': '2026-07-28',
            'io.modelcontextprotocol/clientInfo': { name: 'pin', version: '1' },
            'io.modelcontextprotocol/clientCapabilities': {},
          },
        },
      }),
    });
    expect(res.status).toBe(200);
    await res.text();
    expect(seen).toEqual(auth);
  });
});
