// The tasks extension (io.modelcontextprotocol/tasks) on the 2026-07-28 era, with the SDK v2
// client over Streamable HTTP against real sandboxed tools.
import { waitFor } from '@forge/test-utils';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { describe, expect, it, onTestFinished } from 'vitest';
import { serveHttp } from '../src/index.js';
import { envelopeOf, newForge, py } from './helpers.js';

const TASKS = 'io.modelcontextprotocol/tasks';

/**
 * One 2026-07-28 request as a client sends it on the wire (the SDK's client has no tasks runtime
 * and drops the params of tasks/* requests): the `_meta` envelope, the standard headers.
 */
async function rpc(url: string, token: string, method: string, params: Record<string, unknown>, tasks = true) {
  const body = {
    jsonrpc: '2.0',
    id: 1,
    method,
    params: {
      ...params,
      _meta: {
        'io.modelcontextprotocol/protocolVersion': '2026-07-28',
        'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' },
        'io.modelcontextprotocol/clientCapabilities': tasks ? { extensions: { [TASKS]: {} } } : {},
      },
    },
  };
  const name = typeof params.taskId === 'string' ? params.taskId : typeof params.name === 'string' ? params.name : undefined;
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      authorization: `Bearer ${token}`,
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': method,
      ...(name !== undefined ? { 'mcp-name': name } : {}),
    },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  const json = text.startsWith('{')
    ? text
    : (
        text
          .split('\n')
          .filter((l) => l.startsWith('data: '))
          .pop() ?? ''
      ).slice(6);
  return JSON.parse(json) as { result?: Record<string, unknown>; error?: { code: number; message: string } };
}

async function setup() {
  const forge = await newForge();
  const server = await serveHttp(forge, {
    tokens: { 'alice-token-0123456789': { persona: 'alice' }, 'bob-token-0123456789ab': { persona: 'bob' } },
  });
  onTestFinished(() => server.close());
  const connect = async (token: string, tasks: boolean) => {
    const client = new Client(
      { name: 'tasks-test', version: '1.0.0' },
      { versionNegotiation: { mode: { pin: '2026-07-28' } }, capabilities: tasks ? { extensions: { [TASKS]: {} } } : {} },
    );
    await client.connect(
      new StreamableHTTPClientTransport(new URL(server.url), {
        requestInit: { headers: { authorization: `Bearer ${token}` } },
      }),
    );
    onTestFinished(() => client.close());
    return client;
  };
  const alice = await connect('alice-token-0123456789', true);
  const slow = (name: string, seconds: number, support: string) =>
    py(name, `import time\ntime.sleep(${seconds})\nprint(json.dumps({"ok": True, "data": {"slept": ${seconds}}}))`, {
      meta: { task_support: support },
    });
  for (const spec of [
    slow('slow.compute', 0.5, 'optional'),
    slow('slow.forever', 30, 'optional'),
    slow('slow.required', 0.1, 'required'),
  ]) {
    const r = await alice.callTool({ name: 'forge_tool', arguments: spec });
    expect(envelopeOf(r).ok, JSON.stringify(r)).toBe(true);
  }
  const as =
    (token: string) =>
    (method: string, params: Record<string, unknown>, tasks = true) =>
      rpc(server.url, token, method, params, tasks);
  return { alice, connect, asAlice: as('alice-token-0123456789'), asBob: as('bob-token-0123456789ab') };
}

type Rpc = (method: string, params: Record<string, unknown>, tasks?: boolean) => ReturnType<typeof rpc>;

/** The task once it is no longer working (tasks/get, polled). */
function until(call: Rpc, taskId: string) {
  return waitFor(
    `task ${taskId} to end`,
    async () => {
      const t = (await call('tasks/get', { taskId })).result;
      return t && t.status !== 'working' ? t : undefined;
    },
    { intervalMs: 100 },
  );
}

describe('tasks extension (2026-07-28)', () => {
  it('advertises the extension; a task-supporting tool answers CreateTaskResult, tasks/get inlines the result', async () => {
    const { alice, asAlice } = await setup();
    expect(alice.getServerCapabilities()?.extensions).toMatchObject({ [TASKS]: {} });
    const listed = ((await asAlice('tools/list', {})).result?.tools ?? []) as { name: string; _meta?: { forge?: unknown } }[];
    expect(listed.find((t) => t.name === 'slow__compute')?._meta?.forge).toMatchObject({ task_support: 'optional' });
    expect(listed.find((t) => t.name === 'slow__required')?._meta?.forge).toMatchObject({ task_support: 'required' });
    const created = (await asAlice('tools/call', { name: 'slow__compute', arguments: {} })).result ?? {};
    expect(created).toMatchObject({ resultType: 'task', status: 'working', ttlMs: expect.any(Number), pollIntervalMs: expect.any(Number) });
    expect(created).not.toHaveProperty('content');
    expect(created).not.toHaveProperty('ttl');
    const taskId = created.taskId as string;
    expect(taskId).toMatch(/^task-[0-9a-f]{32}$/);
    // Readable at once.
    expect((await asAlice('tasks/get', { taskId })).result).toMatchObject({ taskId, resultType: 'complete' });
    const done = await until(asAlice, taskId);
    expect(done.status).toBe('completed');
    expect(envelopeOf(done.result)).toMatchObject({ ok: true, data: { slept: 0.5 } });
    // A sync tool stays sync.
    const sync = (await asAlice('tools/call', { name: 'forge_list', arguments: {} })).result ?? {};
    expect(sync).toMatchObject({ resultType: 'complete' });
    expect(sync).not.toHaveProperty('taskId');
    // Removed methods of the 2025 task surface.
    expect((await asAlice('tasks/result', { taskId })).error?.code).toBe(-32601);
    expect((await asAlice('tasks/list', {})).error?.code).toBe(-32601);
  });

  it('tasks/cancel kills the sandbox and the task ends cancelled; another caller cannot see or cancel it', async () => {
    const { asAlice, asBob } = await setup();
    const created = (await asAlice('tools/call', { name: 'slow__forever', arguments: {} })).result ?? {};
    const taskId = created.taskId as string;
    expect((await asBob('tasks/get', { taskId })).error).toMatchObject({ code: -32602, message: expect.stringMatching(/unknown task/) });
    expect((await asBob('tasks/cancel', { taskId })).error?.code).toBe(-32602);
    const ack = (await asAlice('tasks/cancel', { taskId })).result ?? {};
    // An empty ack: no task envelope.
    expect(Object.keys(ack).sort()).toEqual(['_meta', 'resultType']);
    const ended = await until(asAlice, taskId);
    expect(ended.status).toBe('cancelled');
    // Idempotent on an ended task; an id never issued is -32602.
    expect((await asAlice('tasks/cancel', { taskId })).result).toMatchObject({ resultType: 'complete' });
    expect((await asAlice('tasks/get', { taskId: 'task-nope' })).error?.code).toBe(-32602);
  });

  it('without the extension: optional runs in the call, required is refused with -32021, tasks/* are refused', async () => {
    const { asAlice } = await setup();
    const r = (await asAlice('tools/call', { name: 'slow__compute', arguments: {} }, false)).result;
    expect(r).toMatchObject({ resultType: 'complete' });
    expect(envelopeOf(r)).toMatchObject({ ok: true, data: { slept: 0.5 } });
    const refused = await asAlice('tools/call', { name: 'slow__required', arguments: {} }, false);
    expect(refused.error?.code).toBe(-32021);
    expect((await asAlice('tasks/get', { taskId: 'task-x' }, false)).error?.code).toBe(-32021);
  });
});
