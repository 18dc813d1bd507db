import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { connect, EXAMPLES, INIT, py, rawServer, requireCliAndSandbox, scratch } from './helpers.js';

const example = (name: string): Record<string, unknown> => {
  const spec = JSON.parse(readFileSync(join(EXAMPLES, name, 'tool.json'), 'utf8')) as Record<string, unknown>;
  const ext = { python3: 'py', node: 'js', bash: 'sh' }[spec.runtime as string];
  return { ...spec, impl: readFileSync(join(EXAMPLES, name, `main.${ext}`), 'utf8') };
};
const META = ['forge_call', 'forge_list', 'forge_promote', 'forge_remove', 'forge_tool'];

beforeAll(requireCliAndSandbox);

describe('forge serve (stdio)', () => {
  it('answers the handshake and lists the meta-tools', async () => {
    const s = scratch();
    const c = await connect(s);
    expect(c.client.getServerVersion()?.name).toBe('forge');
    expect(c.client.getServerCapabilities()?.tools?.listChanged).toBe(true);
    const { tools } = await c.client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(META);
    for (const t of tools) expect(t.inputSchema.type).toBe('object');
  });

  it('answers garbage and unknown methods with JSON-RPC errors and keeps serving', async () => {
    const s = scratch();
    const srv = rawServer(s);
    srv.send(INIT);
    expect((await srv.next(0)).result).toBeDefined();
    srv.send(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
    // A line that is not JSON: -32700 (id null, since none could be read); JSON that is not a
    // JSON-RPC message: -32600. The session goes on.
    srv.send('this is not json {');
    expect((await srv.next(null)).error).toMatchObject({ code: -32700 });
    srv.send(JSON.stringify({ hello: 'world' }));
    expect((await srv.next(null)).error).toMatchObject({ code: -32600 });
    srv.send(JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'no/such/method' }));
    expect((await srv.next(5)).error).toMatchObject({ code: -32601 });
    // Malformed params: -32602 naming the field.
    srv.send(JSON.stringify({ jsonrpc: '2.0', id: 6, method: 'tools/call', params: { arguments: {} } }));
    expect((await srv.next(6)).error).toEqual({
      code: -32602,
      message: 'Invalid params: tools/call needs params.name, a tool name string (got nothing)',
    });
    srv.send(JSON.stringify({ jsonrpc: '2.0', id: 61, method: 'tools/call', params: { name: 'forge_list', arguments: 'x' } }));
    expect((await srv.next(61)).error).toMatchObject({
      code: -32602,
      message: expect.stringContaining('params.arguments must be an object'),
    });
    srv.send(JSON.stringify({ jsonrpc: '2.0', id: 62, method: 'tools/list', params: { cursor: 7 } }));
    expect((await srv.next(62)).error).toMatchObject({ code: -32602, message: expect.stringContaining('params.cursor must be a string') });
    srv.send(JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/list' }));
    const list = (await srv.next(7)).result as { tools: { name: string }[] };
    expect(list.tools.map((t) => t.name).sort()).toEqual(META);
    srv.child.stdin.end();
    expect(await srv.exit).toEqual({ code: 0, signal: null });
  });

  it('forge → list_changed → tools/list → call; forge_call works in the same turn', async () => {
    const s = scratch();
    const c = await connect(s);
    const changed = c.nextListChanged();
    const made = await c.call('forge_tool', example('fib'));
    expect(made.env).toMatchObject({ ok: true, data: { name: 'fib', version: 1, scope: 'project' } });
    await changed;
    // Same turn, before any refresh of the list: forge_call reaches the new tool.
    const early = await c.call('forge_call', { name: 'fib', input: { n: 10 } });
    expect(early.env).toMatchObject({ ok: true, data: { n: 10, fib: '55' } });
    const { tools } = await c.client.listTools();
    const fib = tools.find((t) => t.name === 'fib');
    expect(fib?.inputSchema).toMatchObject({ type: 'object', required: ['n'] });
    const direct = await c.call('fib', { n: 20 });
    expect(direct.result.isError).toBe(false);
    expect(direct.result.structuredContent).toEqual({ n: 20, fib: '6765' });
  });

  it('refuses invalid names, missing fields and reserved names; overwrite bumps the version', async () => {
    const s = scratch();
    const c = await connect(s);
    for (const name of ['1fib', 'a..b', 'has space', 'x'.repeat(65)]) {
      const r = await c.call('forge_tool', py(name, 'print("{}")'));
      expect(r.result.isError, name).toBe(true);
      expect(r.env.error?.kind, name).toBe('validation_failed');
    }
    const { impl: _impl, ...noImpl } = py('no_impl', '');
    expect((await c.call('forge_tool', noImpl)).env.error?.kind).toBe('validation_failed');
    const { input_schema: _s, ...noSchema } = py('no_schema', '');
    expect((await c.call('forge_tool', noSchema)).env.error?.kind).toBe('validation_failed');
    expect((await c.call('forge_tool', py('forge_evil', 'print("{}")'))).env.error?.kind).toBe('name_forbidden');

    const v1 = py('echo', 'print(json.dumps({"ok": True, "data": 1}))');
    expect((await c.call('forge_tool', v1)).env.ok).toBe(true);
    expect((await c.call('forge_tool', v1)).env.error?.kind).toBe('name_taken');
    const v2 = await c.call('forge_tool', { ...py('echo', 'print(json.dumps({"ok": True, "data": 2}))'), overwrite: true });
    expect(v2.env).toMatchObject({ ok: true, data: { version: 2 } });
    expect((await c.call('echo')).env.data).toBe(2);
  });

  it('schema violations, unknown tools, crashing tools and invalid envelopes are isError results', async () => {
    const s = scratch();
    const c = await connect(s);
    await c.call('forge_tool', example('fib'));
    await c.call('forge_tool', py('crash', 'raise RuntimeError("boom")'));
    await c.call('forge_tool', py('chatty', 'print("hello, not json")'));

    const bad = await c.call('fib', { n: 'ten' });
    expect(bad.result.isError).toBe(true);
    expect(bad.env.error).toMatchObject({ kind: 'validation_failed' });
    expect(bad.env.error?.message).toContain('n');

    const unknown = await c.call('no_such_tool', {});
    expect(unknown.result.isError).toBe(true);
    expect(unknown.env.error?.kind).toBe('unknown_tool');
    expect(unknown.env.error?.message).toMatch(/forge_list|forge_tool/);

    const crash = await c.call('crash');
    expect(crash.result.isError).toBe(true);
    expect(crash.env.error?.kind).toBe('output_invalid');
    expect(crash.env.error?.message).toContain('boom');

    const chatty = await c.call('chatty');
    expect(chatty.result.isError).toBe(true);
    expect(chatty.env.error?.kind).toBe('output_invalid');
  });

  it('runs bash and node tools', async () => {
    const s = scratch();
    s.file('src/a.txt', 'one\ntwo\n');
    s.file('src/b.txt', 'three\n');
    const c = await connect(s);
    await c.call('forge_tool', example('line_count'));
    await c.call('forge_tool', example('word_count'));
    const lines = await c.call('line_count', { dir: join(s.project, 'src'), ext: 'txt' });
    expect(lines.env).toMatchObject({ ok: true, data: { files: 2, lines: 3 } });
    const words = await c.call('word_count', { text: 'the cat and the hat', top: 1 });
    expect(words.env.ok, JSON.stringify(words.env)).toBe(true);
    expect(JSON.stringify(words.env.data)).toContain('the');
  });

  it('serves concurrent forges and calls with interleaved ids', async () => {
    const s = scratch();
    const srv = rawServer(s);
    srv.send(INIT);
    await srv.next(0);
    srv.send(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
    const forge = (id: number | string, name: string) =>
      srv.send(
        JSON.stringify({
          jsonrpc: '2.0',
          id,
          method: 'tools/call',
          params: {
            name: 'forge_tool',
            arguments: py(name, `print(json.dumps({"ok": True, "data": {"tool": "${name}", "i": args["i"]}}))`),
          },
        }),
      );
    const call = (id: number, name: string, i: number) =>
      srv.send(
        JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'forge_call', arguments: { name, input: { i } } } }),
      );
    forge(100, 'alpha');
    forge(101, 'beta');
    for (const id of [100, 101]) expect((await srv.next(id)).result).toMatchObject({ isError: false });
    // Calls and a third forge in flight together; ids out of order.
    const ids = [207, 203, 211, 202, 209, 205, 201, 210, 204, 208, 206];
    for (const [k, id] of ids.entries()) call(id, k % 2 ? 'alpha' : 'beta', id);
    forge('gamma', 'gamma');
    for (const [k, id] of ids.entries()) {
      const m = await srv.next(id, 20_000);
      const env = JSON.parse((m.result as { content: { text: string }[] }).content[0]?.text ?? '{}');
      expect(env, `id ${id}`).toMatchObject({ ok: true, data: { tool: k % 2 ? 'alpha' : 'beta', i: id } });
    }
    expect((await srv.next('gamma')).result).toMatchObject({ isError: false });
    srv.child.stdin.end();
    expect((await srv.exit).code).toBe(0);
  });

  it('round-trips a 256 KiB input', async () => {
    const s = scratch();
    const c = await connect(s);
    await c.call('forge_tool', py('echo_big', 'print(json.dumps({"ok": True, "data": {"len": len(args["s"]), "s": args["s"]}}))'));
    const big = Array.from({ length: 256 * 1024 }, (_, i) => String.fromCharCode(97 + (i % 26))).join('');
    const r = await c.call('echo_big', { s: big });
    expect(r.env.ok).toBe(true);
    const d = r.env.data as { len: number; s: string };
    expect(d.len).toBe(256 * 1024);
    expect(d.s === big).toBe(true);
  });

  it('refuses a name forbidden by a policy edit made while it serves', async () => {
    const s = scratch();
    const c = await connect(s);
    await c.call('forge_tool', example('fib'));
    expect((await c.call('fib', { n: 5 })).env.ok).toBe(true);
    writeFileSync(join(s.project, '.forge', 'policy.json'), JSON.stringify({ forbidden_tool_names: ['fib', 'deploy_*'] }));
    const blocked = await c.call('fib', { n: 6 });
    expect(blocked.env.error?.kind).toBe('name_forbidden');
    expect((await c.call('forge_tool', py('deploy_prod', 'print("{}")'))).env.error?.kind).toBe('name_forbidden');
  });

  it('kills a hanging tool at its timeout', async () => {
    const s = scratch();
    const c = await connect(s);
    await c.call('forge_tool', py('hang', 'import time\ntime.sleep(120)', { meta: { timeout_ms: 1000 } }));
    const r = await c.call('hang');
    expect(r.env.error?.kind).toBe('timeout');
  });

  it('exits 0 on EOF and on SIGTERM', async () => {
    const s = scratch();
    const a = rawServer(s);
    a.send(INIT);
    await a.next(0);
    a.child.stdin.end();
    expect(await a.exit).toEqual({ code: 0, signal: null });
    const b = rawServer(s);
    b.send(INIT);
    await b.next(0);
    b.child.kill('SIGTERM');
    expect(await b.exit).toEqual({ code: 0, signal: null });
    expect(b.stdout().trim().split('\n')).toHaveLength(1); // nothing but the protocol on stdout
  });

  it('answers initialize while the engine opens; an engine that cannot open ends the session with exit 2 and why', async () => {
    const s = scratch();
    // FORGE_HOME is a file: the audit log cannot be opened.
    const home = join(s.root, 'not-a-dir');
    writeFileSync(home, 'x');
    s.env.FORGE_HOME = home;
    const a = rawServer(s);
    a.send(INIT);
    a.send('{"jsonrpc":"2.0","id":1,"method":"tools/list"}');
    expect(await a.exit).toEqual({ code: 2, signal: null });
    expect(a.stderr()).toMatch(/cannot open forge \(home .*not-a-dir/);
    // Whatever was answered before the session ended is protocol; a tools/list answer is an error.
    for (const line of a.stdout().trim().split('\n').filter(Boolean)) {
      const m = JSON.parse(line) as { id?: number; result?: unknown; error?: { message: string } };
      if (m.id === 1) expect(m.error?.message).toMatch(/this server has no forge engine/);
    }
  });
});
