import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { scaled } from '@forge/test-utils';
import { beforeAll, describe, expect, it } from 'vitest';
import { CLI, connect, EXAMPLES, py, requireCliAndSandbox, runCli, scratch, serveHttp } from './helpers.js';

const run = promisify(execFile);
const INSPECTOR = resolve(__dirname, '../node_modules/.bin/mcp-inspector');

beforeAll(requireCliAndSandbox);

describe('forge serve across processes', () => {
  it('a promoted tool is visible to a server started in another project (same FORGE_HOME)', async () => {
    const s = scratch();
    const a = await connect(s);
    await a.call('forge_tool', py('shared', 'print(json.dumps({"ok": True, "data": "from the user scope"}))'));
    expect((await a.call('forge_promote', { name: 'shared' })).env).toMatchObject({ ok: true, data: { scope: 'user' } });
    const other = s.otherProject('elsewhere');
    const b = await connect(s, { cwd: other });
    expect((await b.client.listTools()).tools.map((t) => t.name)).toContain('shared');
    expect((await b.call('shared')).env).toMatchObject({ ok: true, data: 'from the user scope' });
    const listed = await b.call('forge_list');
    expect(listed.env.data).toMatchObject({ tools: [{ name: 'shared', scope: 'user' }] });
  });

  it('a tool forged by one server appears (list_changed) in another watching the same project', async () => {
    const s = scratch();
    const [a, b] = await Promise.all([connect(s), connect(s)]);
    await b.client.listTools(); // b has seen the list: a change is news
    const changed = b.nextListChanged(10_000);
    await a.call('forge_tool', py('from_a', 'print(json.dumps({"ok": True, "data": "a made me"}))'));
    await changed;
    expect((await b.client.listTools()).tools.map((t) => t.name)).toContain('from_a');
    expect((await b.call('from_a')).env).toMatchObject({ ok: true, data: 'a made me' });
  });

  // The current MCP Inspector (v2, CLI mode): its own client, over both transports and, on stdio,
  // both protocol eras (legacy = initialize and a session, modern = 2026-07-28 stateless requests).
  it.each([
    ['stdio', 'legacy'],
    ['stdio', 'modern'],
    ['http', 'legacy'],
    ['http', 'modern'],
  ] as const)('the MCP Inspector CLI (over %s, %s era) lists and calls a forged tool', async (transport, era) => {
    const s = scratch();
    const forged = await runCli(['tools', 'forge', join(EXAMPLES, 'fib')], { cwd: s.project, env: s.env });
    expect(forged.code, forged.stderr).toBe(0);
    // The Inspector keeps a catalog and secrets under ~/.mcp-inspector: a home of its own. It starts
    // a stdio server with a minimal environment of its own, so forge's home goes in with -e.
    const inspectorHome = join(s.root, 'inspector-home');
    mkdirSync(inspectorHome);
    const target =
      transport === 'stdio'
        ? ['--cwd', s.project, '-e', `FORGE_HOME=${s.home}`, process.execPath, CLI, 'serve']
        : ['--server-url', new URL('/mcp', (await serveHttp(s)).url).href];
    const inspect = async (...args: string[]) => {
      const { stdout } = await run(INSPECTOR, ['--cli', '--format', 'json', '--quiet', '--protocol-era', era, ...target, ...args], {
        cwd: s.root,
        env: { ...s.env, HOME: inspectorHome },
        timeout: scaled(60_000),
      });
      return JSON.parse(stdout).result;
    };
    const list = await inspect('--method', 'tools/list');
    expect(list.tools.map((t: { name: string }) => t.name)).toEqual(expect.arrayContaining(['forge_tool', 'forge_call', 'fib']));
    const call = await inspect('--method', 'tools/call', '--tool-name', 'fib', '--tool-arg', 'n=10');
    expect(call.isError).toBe(false);
    expect(call.structuredContent).toEqual({ n: 10, fib: '55' });
  });
});
