import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { INIT, type RawServer, rawServer, requireCliAndSandbox, type Scratch, scratch, serveHttp } from './helpers.js';

beforeAll(requireCliAndSandbox);

const MiB = 1024 * 1024;
const DEFAULT_LIMIT = 16 * MiB;

/**
 * Writes `text` to the server's stdin in 1 MiB pieces, waiting for each to drain (as a client piping
 * a big message does); stops if the server exits (the test then fails on its answers or exit code).
 */
async function write(srv: RawServer, ...texts: string[]): Promise<void> {
  let exited = false;
  void srv.exit.then(() => (exited = true));
  for (const text of texts)
    for (let i = 0; i < text.length && !exited; i += MiB) {
      if (!srv.child.stdin.write(text.slice(i, i + MiB)))
        await Promise.race([new Promise((r) => srv.child.stdin.once('drain', r)), srv.exit]);
    }
}

/** A tools/call line of forge_list carrying `padBytes` of padding, its members in the order given (`id` first, or last as the MCP SDK writes it). */
function bigCall(id: number | string, padBytes: number, idFirst: boolean): string {
  const params = `{"name":"forge_list","arguments":{"pad":"${'a'.repeat(padBytes)}"}}`;
  return idFirst
    ? `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"method":"tools/call","params":${params}}\n`
    : `{"method":"tools/call","params":${params},"jsonrpc":"2.0","id":${JSON.stringify(id)}}\n`;
}

/** The server's resident and peak resident memory in MiB (VmRSS, VmHWM of /proc/<pid>/status). */
function memory(pid: number | undefined): { rssMiB: number; peakMiB: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? Number.NaN);
  return { rssMiB: Math.round(kb('VmRSS') / 1024), peakMiB: Math.round(kb('VmHWM') / 1024) };
}

async function started(s: Scratch, args: string[] = []): Promise<RawServer> {
  const srv = rawServer(s, args);
  // A server that exits mid-write fails the test through its answers and exit code, not an EPIPE.
  srv.child.stdin.on('error', () => {});
  srv.send(INIT);
  expect((await srv.next(0)).result).toBeDefined();
  srv.send(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
  return srv;
}

async function listsMetaTools(srv: RawServer, id: number): Promise<void> {
  srv.send(JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/list' }));
  expect(((await srv.next(id)).result as { tools: unknown[] }).tools).toHaveLength(5);
}

describe('forge serve (stdio): oversized messages', () => {
  it('default limit 16 MiB: a 10 MiB line is served; a 64 MiB line gets -32600 naming the limit, with its id; the session goes on', async () => {
    const s = scratch();
    const srv = await started(s);
    const before = memory(srv.child.pid);

    // The id last, as the MCP SDK writes requests: read from the line's end.
    const line = bigCall('big-64', 64 * MiB, false);
    const t = performance.now();
    await write(srv, line);
    const refused = await srv.next('big-64', 60_000);
    const ms = Math.round(performance.now() - t);
    const after = memory(srv.child.pid);
    // Printed, not asserted: a second such line shows whether memory grows with what was discarded.
    const again = bigCall('big-64b', 64 * MiB, false);
    await write(srv, again);
    expect((await srv.next('big-64b', 60_000)).error).toMatchObject({ code: -32600 });
    const twice = memory(srv.child.pid);
    console.log(
      `64 MiB line refused in ${ms} ms; server RSS ${before.rssMiB} MiB before, ${after.rssMiB} MiB after (peak ${after.peakMiB} MiB), ${twice.rssMiB} MiB after a second one (peak ${twice.peakMiB} MiB)`,
    );
    expect(refused.error).toEqual({
      code: -32600,
      message: `Request too large: a message of ${line.length - 1} bytes is over the limit of ${DEFAULT_LIMIT} bytes (maxMessageBytes; forge serve --max-message-bytes); it was discarded unread, the session goes on`,
      data: { maxMessageBytes: DEFAULT_LIMIT, messageBytes: line.length - 1 },
    });

    await write(srv, bigCall(10, 10 * MiB, true));
    expect((await srv.next(10, 60_000)).result).toMatchObject({ isError: false, structuredContent: { ok: true } });
    await listsMetaTools(srv, 11);
    srv.child.stdin.end();
    expect(await srv.exit).toEqual({ code: 0, signal: null });
  });

  it('--max-message-bytes 8 MiB: 10 MiB and 64 MiB lines are refused naming it (id from the start, else null), then requests still answer', async () => {
    const s = scratch();
    const srv = await started(s, ['--max-message-bytes', String(8 * MiB)]);
    const line = bigCall(21, 10 * MiB, true);
    await write(srv, line);
    expect((await srv.next(21, 60_000)).error).toMatchObject({
      code: -32600,
      message: expect.stringContaining(`over the limit of ${8 * MiB} bytes (maxMessageBytes; forge serve --max-message-bytes)`),
      data: { maxMessageBytes: 8 * MiB, messageBytes: line.length - 1 },
    });
    await listsMetaTools(srv, 22);
    // The id neither in the first nor the last 4 KiB: it cannot be read, so null.
    await write(srv, `${bigCall(23, 64 * MiB, false).slice(0, -2)},"trailer":"${'b'.repeat(8192)}"}\n`);
    expect((await srv.next(null, 60_000)).error).toMatchObject({ code: -32600, data: { maxMessageBytes: 8 * MiB } });
    await listsMetaTools(srv, 24);
    srv.child.stdin.end();
    expect(await srv.exit).toEqual({ code: 0, signal: null });
  });

  it('input that ends inside a line past the limit: exit 1, the reason on stderr', async () => {
    const s = scratch();
    const srv = await started(s);
    const partial = `{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"forge_list","arguments":{"pad":"${'c'.repeat(20 * MiB)}`;
    await write(srv, partial);
    srv.child.stdin.end();
    expect(await srv.exit).toEqual({ code: 1, signal: null });
    expect(srv.stderr()).toContain(
      `forge: Request too large: the input ended inside a message of ${partial.length} bytes or more, over the limit of ${DEFAULT_LIMIT} bytes (maxMessageBytes; forge serve --max-message-bytes), with no newline to resume at; the session ends`,
    );
  });

  it('params given as a string or a number get -32602 with the request id', async () => {
    const s = scratch();
    const srv = await started(s);
    srv.send(JSON.stringify({ jsonrpc: '2.0', id: 41, method: 'tools/call', params: 'forge_list' }));
    expect(await srv.next(41)).toEqual({
      jsonrpc: '2.0',
      id: 41,
      error: { code: -32602, message: 'Invalid params: tools/call takes params as an object (by name), or none (got "forge_list")' },
    });
    srv.send(JSON.stringify({ jsonrpc: '2.0', id: 'n', method: 'tools/list', params: 7 }));
    expect((await srv.next('n')).error).toEqual({
      code: -32602,
      message: 'Invalid params: tools/list takes params as an object (by name), or none (got 7)',
    });
    // A request that is not JSON-RPC but has an id is answered with that id.
    srv.send(JSON.stringify({ jsonrpc: '1.0', id: 42, method: 'tools/list' }));
    expect((await srv.next(42)).error).toMatchObject({ code: -32600 });
    await listsMetaTools(srv, 43);
    srv.child.stdin.end();
    expect(await srv.exit).toEqual({ code: 0, signal: null });
  });

  it('--max-message-bytes refuses a value that is not a whole number of bytes in range (exit 2 naming it)', async () => {
    const s = scratch();
    for (const bad of ['0', '16MiB', '268435457']) {
      const srv = rawServer(s, ['--max-message-bytes', bad]);
      srv.child.stdin.end();
      expect((await srv.exit).code, bad).toBe(2);
      expect(srv.stderr(), bad).toContain(`--max-message-bytes expects a whole number of bytes from 1 to 268435456 (got "${bad}")`);
    }
  });
});

describe('forge serve --http: oversized bodies', () => {
  const initialize = (padBytes: number) =>
    JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' }, pad: 'p'.repeat(padBytes) },
    });
  const post = async (url: URL, body: string) => {
    const r = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body,
    });
    return { status: r.status, text: await r.text() };
  };

  it('a body over the limit gets 413 naming it: 16 MiB by default, --max-message-bytes sets it', async () => {
    const s = scratch();
    const { url: byDefault } = await serveHttp(s);
    const big = await post(byDefault, initialize(17 * MiB));
    expect(big.status).toBe(413);
    expect(JSON.parse(big.text)).toMatchObject({
      error: { code: -32600, message: expect.stringContaining(`over the limit of ${DEFAULT_LIMIT} bytes`) },
    });
    expect((await post(byDefault, initialize(2 * MiB))).status).toBe(200);

    const { url: small } = await serveHttp(s, ['--max-message-bytes', String(MiB)]);
    const refused = await post(small, initialize(2 * MiB));
    expect(refused.status).toBe(413);
    expect(JSON.parse(refused.text)).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: {
        code: -32600,
        message: `request body too large: over the limit of ${MiB} bytes (maxBodyBytes; forge serve --max-message-bytes); send smaller messages or raise the limit`,
      },
    });
    expect((await post(small, initialize(1000))).status).toBe(200);
  });
});
