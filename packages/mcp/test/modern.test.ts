// The 2026-07-28 era with the SDK v2 client, over stdio (a real child process) and Streamable HTTP.
import { spawn } from 'node:child_process';
import { scaled } from '@forge/test-utils';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { describe, expect, it, onTestFinished } from 'vitest';
import { serveHttp } from '../src/index.js';
import { envelopeOf, newForge, PACKAGE_DIR, py, requireSandbox, tempDirs } from './helpers.js';

const SERVER = `${PACKAGE_DIR}/test/fixtures/stdio-server.mjs`;

async function modernStdio(dirs = tempDirs()): Promise<Client> {
  requireSandbox();
  const client = new Client({ name: 'modern-test', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [SERVER],
    env: { ...process.env, FORGE_HOME: dirs.home, FORGE_PROJECT: dirs.project } as Record<string, string>,
    stderr: 'pipe',
  });
  await client.connect(transport);
  onTestFinished(() => client.close());
  return client;
}

describe('2026-07-28 era', () => {
  it('over stdio: discover, list, forge, call by wire name', async () => {
    const client = await modernStdio();
    expect(client.getProtocolEra()).toBe('modern');
    const tools = (await client.listTools()).tools;
    expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['forge_tool', 'forge_call', 'forge_list']));
    const spec = py('code.echo', 'print(json.dumps({"ok": True, "data": {"got": args}}))');
    const forged = envelopeOf(await client.callTool({ name: 'forge_tool', arguments: spec }));
    expect(forged.ok).toBe(true);
    const listed = (await client.listTools()).tools.map((t) => t.name);
    expect(listed).toContain('code__echo');
    for (const n of listed) expect(n).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
    const r = envelopeOf(await client.callTool({ name: 'code__echo', arguments: { a: 1 } }));
    expect(r).toMatchObject({ ok: true, data: { got: { a: 1 } } });
  });

  it('over HTTP: stateless requests, the tool list of the credential', async () => {
    const forge = await newForge();
    const server = await serveHttp(forge, {
      tokens: { 'alice-token-0123456789': { persona: 'alice' }, 'bob-token-0123456789ab': { persona: 'bob' } },
    });
    onTestFinished(() => server.close());
    const connect = async (token: string) => {
      const client = new Client({ name: 'modern-http', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(server.url), { requestInit: { headers: { authorization: `Bearer ${token}` } } }),
      );
      onTestFinished(() => client.close());
      return client;
    };
    const alice = await connect('alice-token-0123456789');
    expect(alice.getProtocolEra()).toBe('modern');
    const spec = py('alice.echo', 'print(json.dumps({"ok": True, "data": args}))');
    expect(envelopeOf(await alice.callTool({ name: 'forge_tool', arguments: { ...spec, scope: 'session' } })).ok).toBe(true);
    expect((await alice.listTools()).tools.map((t) => t.name)).toContain('alice__echo');
    // No session was opened: nothing to hold.
    expect(server.sessions()).toEqual([]);
    const r = envelopeOf(await alice.callTool({ name: 'alice__echo', arguments: { x: 2 } }));
    expect(r).toMatchObject({ ok: true, data: { x: 2 } });
    void spawn;
  });
});

describe('2026-07-28 era: list changes on subscriptions/listen', () => {
  for (const wire of ['stdio', 'http'] as const) {
    it(`over ${wire}: a tool forged by another caller reaches the client's listen stream, and its new list has it`, async () => {
      const dirs = tempDirs();
      const forge = await newForge(dirs);
      const seen: string[][] = [];
      let heard: () => void = () => {};
      const changed = new Promise<void>((r) => {
        heard = r;
      });
      const client = new Client(
        { name: 'listen', version: '1.0.0' },
        {
          versionNegotiation: { mode: { pin: '2026-07-28' } },
          listChanged: {
            tools: {
              debounceMs: 0,
              onChanged: (_err, tools) => {
                seen.push((tools ?? []).map((t) => t.name));
                if (tools?.some((t) => t.name === 'late__tool')) heard();
              },
            },
          },
        },
      );
      if (wire === 'stdio') {
        await client.connect(
          new StdioClientTransport({
            command: process.execPath,
            args: [SERVER],
            env: { ...process.env, FORGE_HOME: dirs.home, FORGE_PROJECT: dirs.project, FORGE_WATCH: '1' } as Record<string, string>,
            stderr: 'pipe',
          }),
        );
      } else {
        const server = await serveHttp(forge);
        onTestFinished(() => server.close());
        await client.connect(new StreamableHTTPClientTransport(new URL(server.url)));
      }
      onTestFinished(() => client.close());
      await client.listTools();
      // Forged through the engine, not this client: only the listen stream can tell it.
      const made = await forge.forgeTool(py('late.tool', 'print(json.dumps({"ok": True, "data": 1}))'));
      expect(made.ok).toBe(true);
      await Promise.race([
        changed,
        new Promise((_, reject) => setTimeout(() => reject(new Error(`no list change: ${JSON.stringify(seen)}`)), scaled(10_000))),
      ]);
    });
  }
});
