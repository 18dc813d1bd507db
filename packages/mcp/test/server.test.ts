import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Forge } from '@forge/runner';
import { waitFor } from '@forge/test-utils';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createForgeMcpServer, META_TOOL_DEFINITIONS } from '../src/index.js';
import { CAPABILITIES, call, connect, envelopeOf, example, forgeOk, listChanges, newForge, py, tempDirs } from './helpers.js';

const META = ['forge_tool', 'forge_call', 'forge_list', 'forge_promote', 'forge_remove'];

describe('handshake and tools/list', () => {
  it('declares tools.listChanged and lists the five meta-tools with schemas and annotations', async () => {
    const forge = await newForge();
    const { client } = await connect(forge);
    expect(client.getServerCapabilities()).toEqual(CAPABILITIES);
    expect(client.getServerVersion()).toMatchObject({ name: 'forge', version: expect.any(String) });
    expect(client.getInstructions()).toContain('forge_tool');
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(META);
    expect(META_TOOL_DEFINITIONS.map((t) => t.name)).toEqual(META);
    for (const t of tools) {
      expect(t.inputSchema.type).toBe('object');
      expect(t.annotations?.openWorldHint).toBe(false);
      expect(t.description?.length).toBeGreaterThan(80);
    }
    const forgeTool = tools.find((t) => t.name === 'forge_tool');
    expect(forgeTool?.inputSchema.required).toEqual(['name', 'description', 'runtime', 'input_schema', 'impl']);
    expect(JSON.stringify(forgeTool?.inputSchema)).toContain('x-bind');
    expect(forgeTool?.description).toMatch(/forge_list first/);
    expect(tools.find((t) => t.name === 'forge_list')?.annotations?.readOnlyHint).toBe(true);
  });
});

describe('forging and calling', () => {
  it('forge → list_changed → the tool in tools/list → call it; structuredContent is data under its outputSchema', async () => {
    const forge = await newForge();
    const { client, changes } = await connect(forge);
    await client.listTools();
    const changed = changes.next();
    const made = await forgeOk(client, await example('fib'));
    expect(made).toMatchObject({
      ok: true,
      data: { name: 'fib', version: 1, scope: 'project', digest: expect.stringMatching(/^sha256:/) },
    });
    await changed;
    const { tools } = await client.listTools();
    const fib = tools.find((t) => t.name === 'fib');
    expect(fib).toMatchObject({
      name: 'fib',
      inputSchema: { type: 'object', properties: { n: { type: 'integer', minimum: 0 } }, required: ['n'] },
      outputSchema: { type: 'object', required: ['n', 'fib'] },
      annotations: { readOnlyHint: true, idempotentHint: true, destructiveHint: false, openWorldHint: false },
      _meta: { forge: { scope: 'project', version: 1, runtime: 'python3' } },
    });
    const first = await call(client, 'fib', { n: 90 });
    expect(first.result.isError).toBe(false);
    expect(first.result.structuredContent).toEqual({ n: 90, fib: '2880067194370816120' });
    expect(first.envelope).toMatchObject({
      ok: true,
      data: { n: 90, fib: '2880067194370816120' },
      meta: { cache: 'miss', sandbox: 'bwrap' },
    });
    const second = await call(client, 'fib', { n: 90 });
    expect(second.envelope.meta.cache).toBe('hit');
    // Each answer's receipt: its own audit entry and leaf hash, in _meta as in the envelope.
    for (const c of [first, second]) {
      expect(c.result._meta).toEqual({ forge: { audit: c.envelope.meta.audit } });
      expect(c.envelope.meta.audit).toMatchObject({ seq: expect.any(Number), leaf_hash: expect.stringMatching(/^[0-9a-f]{64}$/) });
    }
    const seqOf = (c: typeof first) => (c.envelope.meta.audit as { seq: number }).seq;
    expect(seqOf(second)).toBeGreaterThan(seqOf(first));
  });

  it('forge_call calls a tool in the same turn it was forged; structuredContent is the envelope', async () => {
    const forge = await newForge();
    const { client } = await connect(forge);
    await forgeOk(client, await example('fib'));
    const { result, envelope } = await call(client, 'forge_call', { name: 'fib', input: { n: 10 } });
    expect(result.isError).toBe(false);
    expect(envelope).toMatchObject({ ok: true, data: { n: 10, fib: '55' } });
    expect(result.structuredContent).toEqual(envelope);
  });

  it('forge_list shows forged tools only, with scope, version, description and call count', async () => {
    const forge = await newForge();
    const { client } = await connect(forge);
    await forgeOk(client, await example('fib'));
    await forgeOk(client, py('echo', 'print(json.dumps({"ok": True, "data": args}))'), { scope: 'session' });
    await call(client, 'fib', { n: 3 });
    const { envelope } = await call(client, 'forge_list');
    expect(envelope).toEqual({
      ok: true,
      data: {
        tools: [
          { name: 'echo', scope: 'session', version: 1, description: 'test tool echo', runtime: 'python3', deterministic: false, calls: 0 },
          {
            name: 'fib',
            scope: 'project',
            version: 1,
            description: expect.stringContaining('Fibonacci'),
            runtime: 'python3',
            deterministic: true,
            calls: 1,
          },
        ],
      },
      meta: {},
    });
    const project = await call(client, 'forge_list', { scope: 'project' });
    expect((project.envelope as { data: { tools: { name: string }[] } }).data.tools.map((t) => t.name)).toEqual(['fib']);
    const bad = await call(client, 'forge_list', { scope: 'galaxy' });
    expect(bad.result.isError).toBe(true);
    expect(bad.envelope).toMatchObject({ ok: false, error: { kind: 'validation_failed', message: expect.stringContaining('scope') } });
  });

  it('invalid names and missing fields are isError results with the runner message', async () => {
    const forge = await newForge();
    const { client } = await connect(forge);
    const fib = await example('fib');
    const badName = await call(client, 'forge_tool', { ...fib, name: '1fib' });
    expect(badName.result.isError).toBe(true);
    expect(badName.envelope).toMatchObject({ ok: false, error: { kind: 'validation_failed', message: expect.stringMatching(/name/) } });
    const { impl: _impl, ...noImpl } = fib;
    const missing = await call(client, 'forge_tool', noImpl);
    expect(missing.result.isError).toBe(true);
    expect(missing.envelope).toMatchObject({ ok: false, error: { kind: 'validation_failed', message: expect.stringMatching(/impl/) } });
    const meta = await call(client, 'forge_tool', { ...fib, name: 'forge_call' });
    expect(meta.result.isError).toBe(true);
    expect(meta.envelope.ok).toBe(false);
    const noName = await call(client, 'forge_call', { input: {} });
    expect(noName.envelope).toMatchObject({ ok: false, error: { kind: 'validation_failed', message: expect.stringMatching(/^name:/) } });
  });

  it('overwrite: a second forge is name_taken; with overwrite the version goes up', async () => {
    const forge = await newForge();
    const { client, changes } = await connect(forge);
    const fib = await example('fib');
    await forgeOk(client, fib);
    const again = await call(client, 'forge_tool', fib);
    expect(again.result.isError).toBe(true);
    expect(again.envelope).toMatchObject({ ok: false, error: { kind: 'name_taken' } });
    const changed = changes.next();
    const v2 = await forgeOk(client, { ...fib, description: 'fib, second edition' }, { overwrite: true });
    expect(v2).toMatchObject({ ok: true, data: { version: 2, replaced: { version: 1 } } });
    await changed;
    const { tools } = await client.listTools();
    expect(tools.find((t) => t.name === 'fib')?.description).toContain('fib, second edition');
  });

  it('a schema violation is validation_failed, isError, and no structuredContent under an outputSchema', async () => {
    const forge = await newForge();
    const { client } = await connect(forge);
    await forgeOk(client, await example('fib'));
    await client.listTools();
    const { result, envelope } = await call(client, 'fib', { n: -1 });
    expect(result.isError).toBe(true);
    expect(result.structuredContent).toBeUndefined();
    expect(envelope).toMatchObject({ ok: false, error: { kind: 'validation_failed', message: expect.stringContaining('/n') } });
  });

  it('an unknown tool is an isError result pointing at forge_list and forge_tool, reported to onUnknownTool', async () => {
    const unknown: string[] = [];
    const forge = await newForge(tempDirs(), {
      onUnknownTool: (name) => {
        unknown.push(name);
        return undefined;
      },
    });
    const { client } = await connect(forge);
    const { result, envelope } = await call(client, 'does_not_exist', { x: 1 });
    expect(result.isError).toBe(true);
    expect(envelope).toMatchObject({
      ok: false,
      error: { kind: 'unknown_tool', message: expect.stringMatching(/forge_list.*forge_tool/) },
    });
    expect(unknown).toEqual(['does_not_exist']);
  });

  it('a crashing tool is output_invalid, isError, with its stderr', async () => {
    const forge = await newForge();
    const { client } = await connect(forge);
    await forgeOk(client, py('crash', 'raise RuntimeError("boom")'));
    const { result, envelope } = await call(client, 'crash');
    expect(result.isError).toBe(true);
    expect(envelope).toMatchObject({ ok: false, error: { kind: 'output_invalid', message: expect.stringContaining('boom') } });
    const own = await forgeOk(
      client,
      py('says_no', 'print(json.dumps({"ok": False, "error": {"kind": "not_found", "message": "nothing"}}))'),
    );
    expect(own.ok).toBe(true);
    const no = await call(client, 'says_no');
    expect(no.result.isError).toBe(true);
    expect(no.envelope).toMatchObject({ ok: false, error: { kind: 'not_found', message: 'nothing' } });
  });

  it('bash and node tools; x-bind is stripped from inputSchema and named in the description', async () => {
    const dirs = tempDirs();
    const forge = await newForge(dirs);
    const { client } = await connect(forge);
    await forgeOk(client, await example('word_count'));
    await forgeOk(client, await example('line_count'));
    const wc = await call(client, 'word_count', { text: 'a b a c', top: 1 });
    expect(wc.result.isError, JSON.stringify(wc.envelope)).toBe(false);
    expect(wc.envelope).toMatchObject({ ok: true, data: expect.objectContaining({ words: 4 }) });
    const src = join(dirs.project, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'a.txt'), 'one\ntwo\nthree\n');
    const lc = await call(client, 'line_count', { dir: src, ext: 'txt' });
    expect(lc.result.isError, JSON.stringify(lc.envelope)).toBe(false);
    expect(JSON.stringify(lc.envelope)).toContain('3');
    const { tools } = await client.listTools();
    const listed = tools.find((t) => t.name === 'line_count');
    expect(JSON.stringify(listed?.inputSchema)).not.toContain('x-bind');
    expect(listed?.inputSchema).toEqual({
      type: 'object',
      properties: { dir: { type: 'string' }, ext: { type: 'string', pattern: '^[A-Za-z0-9]{1,10}$' } },
      required: ['dir', 'ext'],
    });
    expect(listed?.description).toContain('Host paths: dir (read-only)');
    // Read-only binds, no network: the sandbox lets it change nothing on the host.
    expect(listed?.annotations).toMatchObject({ readOnlyHint: true, destructiveHint: false, openWorldHint: false });
  });

  it('x-* keywords go, property names that start with x- stay; rw binds make a tool destructive', async () => {
    const forge = await newForge();
    const { client } = await connect(forge);
    await forgeOk(
      client,
      py('writer', 'print(json.dumps({"ok": True, "data": None}))', {
        input_schema: {
          type: 'object',
          properties: {
            out: { type: 'string', 'x-bind': 'rw' },
            'x-note': { type: 'string', 'x-redact': true },
            files: { type: 'array', items: { type: 'string', 'x-bind': 'ro' } },
          },
        },
        meta: { deterministic: true },
      }),
    );
    const { tools } = await client.listTools();
    const w = tools.find((t) => t.name === 'writer');
    expect(w?.inputSchema).toEqual({
      type: 'object',
      properties: { out: { type: 'string' }, 'x-note': { type: 'string' }, files: { type: 'array', items: { type: 'string' } } },
    });
    expect(w?.description).toContain('Host paths: out (read-write), files[] (read-only)');
    // Deterministic: the same input writes the same; a repeat changes nothing more.
    expect(w?.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true, idempotentHint: true });
  });

  it('an output schema that is not an object schema is not published; structuredContent is the envelope', async () => {
    const forge = await newForge();
    const { client } = await connect(forge);
    await forgeOk(client, py('seven', 'print(json.dumps({"ok": True, "data": 7}))', { output_schema: { type: 'integer' } }));
    const { tools } = await client.listTools();
    expect(tools.find((t) => t.name === 'seven')?.outputSchema).toBeUndefined();
    const { result, envelope } = await call(client, 'seven');
    expect(result.structuredContent).toEqual(envelope);
    expect(envelope).toMatchObject({ ok: true, data: 7 });
  });

  it('concurrent forges and calls with interleaved ids all answer correctly', async () => {
    const forge = await newForge();
    const { client } = await connect(forge);
    await forgeOk(client, py('double', 'print(json.dumps({"ok": True, "data": {"x": args["x"] * 2}}))'));
    const work: Promise<unknown>[] = [];
    for (let i = 0; i < 6; i++) work.push(forgeOk(client, py(`t${i}`, `print(json.dumps({"ok": True, "data": ${i}}))`)));
    for (let i = 0; i < 16; i++)
      work.push(
        call(client, 'double', { x: i }).then(({ envelope }) => {
          expect(envelope).toMatchObject({ ok: true, data: { x: i * 2 } });
        }),
      );
    await Promise.all(work);
    const results = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => call(client, 'forge_call', { name: `t${i}` })));
    expect(results.map((r) => (r.envelope as { data: unknown }).data)).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it('a 256 KiB input makes the round trip intact', async () => {
    const forge = await newForge();
    const { client } = await connect(forge);
    await forgeOk(
      client,
      py('echo_text', 'print(json.dumps({"ok": True, "data": {"len": len(args["text"]), "text": args["text"]}}))', {
        meta: { output_cap: 4 * 1024 * 1024 },
      }),
    );
    const text = 'abcdefghijklmnop'.repeat(16 * 1024); // 256 KiB
    const { result, envelope } = await call(client, 'echo_text', { text });
    expect(result.isError, JSON.stringify(envelope).slice(0, 500)).toBe(false);
    expect(envelope).toMatchObject({ ok: true, data: { len: 256 * 1024 } });
    expect((envelope as { data: { text: string } }).data.text === text).toBe(true);
  });

  it('promote and remove send list_changed; a session-scoped tool is visible to its own session only', async () => {
    const dirs = tempDirs();
    const forge = await newForge(dirs);
    const a = await connect(forge, { session: 'sess-a' });
    const b = await connect(forge, { session: 'sess-b' });
    await a.client.listTools();
    await b.client.listTools();
    let changed = a.changes.next();
    await forgeOk(a.client, py('mine', 'print(json.dumps({"ok": True, "data": 1}))'), { scope: 'session' });
    await changed;
    expect((await a.client.listTools()).tools.map((t) => t.name)).toContain('mine');
    expect((await b.client.listTools()).tools.map((t) => t.name)).not.toContain('mine');
    expect((await call(b.client, 'mine')).envelope).toMatchObject({ ok: false, error: { kind: 'unknown_tool' } });
    expect(b.changes.count()).toBe(0);

    await forgeOk(a.client, await example('fib'));
    changed = a.changes.next();
    const promoted = await call(a.client, 'forge_promote', { name: 'fib' });
    expect(promoted.envelope).toMatchObject({ ok: true, data: { name: 'fib', scope: 'user' } });
    await changed;
    changed = a.changes.next();
    const removed = await call(a.client, 'forge_remove', { name: 'fib', scope: 'project' });
    expect(removed.envelope).toMatchObject({ ok: true, data: { name: 'fib', scope: 'project', removed: true } });
    await changed;
    const after = (await a.client.listTools()).tools.find((t) => t.name === 'fib');
    expect(after?._meta).toMatchObject({ forge: { scope: 'user' } });
    const gone = await call(a.client, 'forge_remove', { name: 'nothing_here' });
    expect(gone.envelope).toMatchObject({ ok: false, error: { kind: 'unknown_tool' } });
  });

  it('list_changed when another Forge instance over the same dirs forges (watch: true)', async () => {
    const dirs = tempDirs();
    const watching = await newForge(dirs, { watch: true });
    const other = await newForge(dirs);
    const { client, changes } = await connect(watching);
    await client.listTools();
    const changed = changes.next();
    const made = await other.forgeTool(await example('fib'));
    expect(made.ok).toBe(true);
    await changed;
    expect((await client.listTools()).tools.map((t) => t.name)).toContain('fib');
    const { envelope } = await call(client, 'fib', { n: 7 });
    expect(envelope).toMatchObject({ ok: true, data: { fib: '13' } });
  });

  it('a persona ACL (allowedTools) applies to dynamic tools and forge_call; meta-tools stay callable', async () => {
    const forge = await newForge();
    const admin = await connect(forge, { persona: 'admin' });
    await forgeOk(admin.client, await example('fib'));
    await forgeOk(admin.client, py('secret_op', 'print(json.dumps({"ok": True, "data": 1}))'));
    const limited = await connect(forge, { persona: 'reader', allowedTools: 'fib' });
    expect((await call(limited.client, 'fib', { n: 5 })).envelope).toMatchObject({ ok: true });
    for (const r of [await call(limited.client, 'secret_op'), await call(limited.client, 'forge_call', { name: 'secret_op' })]) {
      expect(r.result.isError).toBe(true);
      expect(r.envelope).toMatchObject({ ok: false, error: { kind: 'acl.persona_denied', message: expect.stringContaining('reader') } });
    }
    expect(envelopeOf(await limited.client.callTool({ name: 'forge_list', arguments: {} })).ok).toBe(true);
  });
});

describe('malformed params', () => {
  it('tools/call and tools/list with bad params get -32602 naming the field, over any transport', async () => {
    const forge = await newForge();
    const server = createForgeMcpServer(forge);
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    onTestFinished(() => server.close());
    const answers = new Map<unknown, unknown>();
    clientSide.onmessage = (m) => {
      if ('id' in m) answers.set(m.id, m);
    };
    await clientSide.start();
    const ask = async (id: number, method: string, params: unknown) => {
      await clientSide.send({ jsonrpc: '2.0', id, method, params } as never);
      return waitFor(`the answer to request ${id} (${method})`, () => answers.get(id));
    };
    await ask(0, 'initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } });
    expect(await ask(1, 'tools/call', { name: 7 })).toMatchObject({
      error: { code: -32602, message: 'Invalid params: tools/call needs params.name, a tool name string (got 7)' },
    });
    expect(await ask(2, 'tools/list', { cursor: {} })).toMatchObject({ error: { code: -32602 } });
    expect(await ask(3, 'tools/list', {})).toMatchObject({ result: { tools: expect.any(Array) } });
  });
});

describe('an engine still opening', () => {
  /** A server given a promise of its engine, with a client connected in-process: the handshake needs no engine. */
  async function connectOpening() {
    let open!: (f: Forge) => void;
    let fail!: (e: Error) => void;
    const opening = new Promise<Forge>((resolve, reject) => {
      open = resolve;
      fail = reject;
    });
    const server = createForgeMcpServer(opening);
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    const client = new Client({ name: 'forge-mcp-test', version: '1.0.0' });
    const changes = listChanges(client);
    await server.connect(serverSide);
    onTestFinished(async () => {
      await client.close();
      await server.close();
    });
    await client.connect(clientSide);
    return { client, changes, open, fail };
  }

  it('answers initialize at once; tools/list and calls wait for the engine, then work as usual', async () => {
    const { client, changes, open } = await connectOpening();
    expect(client.getServerCapabilities()).toEqual(CAPABILITIES);
    let listed = false;
    const listing = client.listTools().then((r) => {
      listed = true;
      return r;
    });
    const calling = call(client, 'fib', { n: 10 });
    // Lets time pass: the listing must stay unanswered while the engine is still opening; that it
    // is not answered is the absence of an event, so there is nothing to wait for.
    await new Promise((r) => setTimeout(r, 50));
    expect(listed).toBe(false);

    const dirs = tempDirs();
    const forge = await newForge(dirs);
    const made = await forge.forgeTool(await example('fib'));
    expect(made.ok).toBe(true);
    open(forge);
    expect((await listing).tools.map((t) => t.name)).toEqual([...META, 'fib']);
    const { envelope } = await calling;
    expect(envelope).toMatchObject({ ok: true, data: { n: 10, fib: '55' } });
    // Subscribed once open: a change now reaches the client.
    const changed = changes.next();
    await forgeOk(client, py('later', 'print(json.dumps({"ok": True, "data": 1}))'));
    await changed;
  });

  it('an engine that fails to open: each request is answered with why, never hangs', async () => {
    const { client, fail } = await connectOpening();
    const listing = client.listTools();
    const calling = call(client, 'fib', { n: 3 });
    fail(new Error('cannot read /nowhere/audit: EACCES'));
    await expect(listing).rejects.toThrow(
      /this server has no forge engine \(it failed to open, so the session cannot go on\): cannot read \/nowhere\/audit: EACCES/,
    );
    const { result, envelope } = await calling;
    expect(result.isError).toBe(true);
    expect(envelope).toMatchObject({
      ok: false,
      error: {
        kind: 'internal',
        message: expect.stringMatching(/failed to open, so the session cannot go on\): cannot read \/nowhere\/audit/),
      },
    });
    await expect(client.listTools()).rejects.toThrow(/this server has no forge engine/);
  });
});
