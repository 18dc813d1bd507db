import { PassThrough } from 'node:stream';
import { describe, expect, it, onTestFinished } from 'vitest';
import { serveHttp, serveStdio } from '../src/index.js';
import { peekId } from '../src/jsonrpc.js';
import { newForge } from './helpers.js';

/** serveStdio over a pair of in-process streams, with the lines it answers. */
async function stdio(maxMessageBytes: number) {
  const stdin = new PassThrough();
  const stdout = new PassThrough();
  const forge = await newForge();
  const server = await serveStdio(forge, { stdin, stdout, maxMessageBytes });
  onTestFinished(() => server.close());
  let buf = '';
  const answers: Record<string, unknown>[] = [];
  let wake = () => {};
  stdout.on('data', (d: Buffer) => {
    buf += d.toString();
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      answers.push(JSON.parse(buf.slice(0, i)) as Record<string, unknown>);
      buf = buf.slice(i + 1);
    }
    wake();
  });
  const next = async (): Promise<Record<string, unknown>> => {
    while (answers.length === 0) await new Promise<void>((r) => (wake = r));
    return answers.shift() as Record<string, unknown>;
  };
  return { stdin, server, next };
}

describe('stdio message limit (serveStdio over streams)', () => {
  it('a line over maxMessageBytes, arriving in pieces, is answered naming the limit; the next line is served', async () => {
    const { stdin, next } = await stdio(1024);
    const start = '{"method":"tools/call","params":{"name":"forge_list","arguments":{"pad":"';
    const end = '"}},"jsonrpc":"2.0","id":"late-id"}';
    stdin.write(start);
    for (let i = 0; i < 10; i++) stdin.write('x'.repeat(1000));
    stdin.write(`${end}\n{"jsonrpc":"2.0","id":2,"method":"ping"}\n`);
    const refused = await next();
    expect(refused).toMatchObject({
      id: 'late-id',
      error: { code: -32600, data: { maxMessageBytes: 1024, messageBytes: start.length + 10_000 + end.length } },
    });
    expect((refused.error as { message: string }).message).toContain(
      'over the limit of 1024 bytes (maxMessageBytes; forge serve --max-message-bytes)',
    );
    expect(await next()).toEqual({ jsonrpc: '2.0', id: 2, result: {} });
  });

  it('a line of exactly maxMessageBytes is served', async () => {
    const { stdin, next } = await stdio(64);
    const line = '{"jsonrpc":"2.0","id":3,"method":"ping"}';
    const padded = `${line.slice(0, -1)}${' '.repeat(64 - line.length)}}`;
    expect(padded).toHaveLength(64);
    stdin.write(`${padded}\n`);
    expect(await next()).toEqual({ jsonrpc: '2.0', id: 3, result: {} });
  });

  it('input that ends inside an oversized line: failure message_too_large, the session closes', async () => {
    const { stdin, server, next } = await stdio(1024);
    const partial = `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"pad":"${'y'.repeat(4000)}`;
    stdin.end(partial);
    await server.closed;
    expect(server.failure).toMatchObject({ code: 'message_too_large' });
    expect(server.failure?.message).toContain(
      `the input ended inside a message of ${partial.length} bytes or more, over the limit of 1024 bytes`,
    );
    expect(await next()).toMatchObject({ id: 9, error: { code: -32600 } });
  });

  it('maxMessageBytes that is not a whole number of bytes from 1 to 256 MiB: invalid_options', async () => {
    const forge = await newForge();
    for (const bad of [0, 1.5, 256 * 1024 * 1024 + 1])
      await expect(serveStdio(forge, { stdin: new PassThrough(), stdout: new PassThrough(), maxMessageBytes: bad })).rejects.toMatchObject({
        code: 'invalid_options',
      });
  });
});

describe('peekId: the id of a message whose middle was discarded', () => {
  it.each([
    ['{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"a":"xx', '', 7],
    ['  { "id" : "abc", "method"', '', 'abc'],
    ['{"params":{"id":1,"x":"', '', null],
    ['{"method":"m","params":{"s":"a\\"id\\":5', '', null],
    ['{"method":"m","params":{"pad":"', 'xx"}},"jsonrpc":"2.0","id":42}', 42],
    ['{"method":"m","params":{"pad":"', 'xx"},"id":"q\\"r"}\n', 'q"r'],
    ['{"method":"m","params":{"pad":"', 'xx","id":5}}', null],
    ['{"method":"m","params":{"pad":"', 'xx\\",\\"id\\":5"}', null],
    ['{"method":"m","params":{"pad":"', 'xx"},"id":null}', null],
    ['[1,2', '', null],
  ])('head %j, tail %j → %j', (head, tail, id) => {
    expect(peekId(head, tail)).toEqual(id);
  });
});

describe('http body limit', () => {
  it('a body over maxBodyBytes gets 413 naming the limit; one within it is served', async () => {
    const forge = await newForge();
    const http = await serveHttp(forge, { maxBodyBytes: 2048 });
    onTestFinished(() => http.close());
    const post = (pad: number) =>
      fetch(http.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'initialize',
          params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' }, pad: 'p'.repeat(pad) },
        }),
      });
    const big = await post(1024 * 1024);
    expect(big.status).toBe(413);
    expect(await big.json()).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: {
        code: -32600,
        message:
          'request body too large: over the limit of 2048 bytes (maxBodyBytes; forge serve --max-message-bytes); send smaller messages or raise the limit',
      },
    });
    expect((await post(100)).status).toBe(200);
  });

  it('params given as a string or a number: 400 with -32602 and the request id', async () => {
    const forge = await newForge();
    const http = await serveHttp(forge, {});
    onTestFinished(() => http.close());
    const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
    const init = await fetch(http.url, {
      method: 'POST',
      headers,
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
      }),
    });
    await init.text();
    const session = { ...headers, 'mcp-session-id': init.headers.get('mcp-session-id') ?? '', 'mcp-protocol-version': '2025-06-18' };
    for (const [id, params] of [
      [5, 'x'],
      ['six', 6],
    ] as const) {
      const r = await fetch(http.url, {
        method: 'POST',
        headers: session,
        body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/list', params }),
      });
      expect(r.status).toBe(400);
      expect(await r.json()).toEqual({
        jsonrpc: '2.0',
        id,
        error: {
          code: -32602,
          message: `Invalid params: tools/list takes params as an object (by name), or none (got ${JSON.stringify(params)})`,
        },
      });
    }
  });
});
