import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { describe, expect, it, onTestFinished } from 'vitest';
import { CAPABILITIES, call, example, forgeOk, listChanges, PACKAGE_DIR, py, requireSandbox, tempDirs } from './helpers.js';

const FIXTURE = join(PACKAGE_DIR, 'test/fixtures/stdio-server.mjs');

function requireBuild(): void {
  requireSandbox();
  if (!existsSync(join(PACKAGE_DIR, 'dist/index.js')))
    throw new Error('the stdio tests run the built package in a child process: run `pnpm build` in packages/mcp first');
}

/** A forge stdio server in a child process, connected with the SDK's StdioClientTransport. */
async function spawnServer(dirs: { home: string; project: string }, env: Record<string, string> = {}) {
  requireBuild();
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [FIXTURE],
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', FORGE_HOME: dirs.home, FORGE_PROJECT: dirs.project, ...env },
    stderr: 'pipe',
  });
  const client = new Client({ name: 'forge-mcp-stdio-test', version: '1.0.0' });
  const changes = listChanges(client);
  await client.connect(transport);
  onTestFinished(() => client.close());
  return { client, changes, transport };
}

describe('stdio transport (a real child process)', () => {
  it('handshake, forge → list_changed → list → call, forge_call', async () => {
    const { client, changes } = await spawnServer(tempDirs());
    expect(client.getServerCapabilities()).toEqual(CAPABILITIES);
    expect((await client.listTools()).tools).toHaveLength(5);
    const changed = changes.next();
    await forgeOk(client, await example('fib'));
    await changed;
    expect((await client.listTools()).tools.map((t) => t.name)).toContain('fib');
    const { result } = await call(client, 'fib', { n: 12 });
    expect(result).toMatchObject({ isError: false, structuredContent: { n: 12, fib: '144' } });
    expect((await call(client, 'forge_call', { name: 'fib', input: { n: 13 } })).envelope).toMatchObject({
      ok: true,
      data: { fib: '233' },
    });
  });

  it('list_changed when another server process watching the same project forges', async () => {
    const dirs = tempDirs();
    const a = await spawnServer(dirs, { FORGE_WATCH: '1', FORGE_SESSION_ID: 'a' });
    const b = await spawnServer(dirs, { FORGE_WATCH: '1', FORGE_SESSION_ID: 'b' });
    await a.client.listTools();
    const changed = a.changes.next();
    await forgeOk(b.client, await example('fib'));
    await changed;
    expect((await a.client.listTools()).tools.map((t) => t.name)).toContain('fib');
    expect((await call(a.client, 'fib', { n: 20 })).envelope).toMatchObject({ ok: true, data: { fib: '6765' } });
  });

  it('EOF: a call in flight still answers, only protocol reaches stdout, exit 0', async () => {
    requireBuild();
    const dirs = tempDirs();
    const child = spawn(process.execPath, [FIXTURE], {
      env: { PATH: process.env.PATH, FORGE_HOME: dirs.home, FORGE_PROJECT: dirs.project },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    onTestFinished(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    let stdout = '';
    const waiters: { id: number; resolve: () => void }[] = [];
    child.stdout.on('data', (d) => {
      stdout += d;
      for (const w of [...waiters]) if (stdout.includes(`"id":${w.id},`) || stdout.includes(`"id":${w.id}}`)) w.resolve();
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const send = (m: unknown) => child.stdin.write(`${JSON.stringify(m)}\n`);
    const answer = (id: number) => new Promise<void>((resolve) => waiters.push({ id, resolve }));
    send({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
    });
    await answer(1);
    send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    const slow = py('slow', 'import time\ntime.sleep(0.5)\nprint(json.dumps({"ok": True, "data": "done"}))');
    send({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'forge_tool', arguments: slow } });
    await answer(2);
    send({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'slow', arguments: {} } });
    child.stdin.end();
    expect(await exited).toBe(0);
    const lines = stdout.trim().split('\n');
    const messages = lines.map(
      (l) =>
        JSON.parse(l) as { jsonrpc: string; id?: number; method?: string; result?: { isError?: boolean; structuredContent?: unknown } },
    );
    for (const m of messages) expect(m.jsonrpc).toBe('2.0');
    expect(messages.map((m) => m.id ?? m.method)).toEqual([
      1,
      'notifications/tools/list_changed',
      'notifications/resources/list_changed',
      2,
      3,
    ]);
    expect(messages[4]?.result).toMatchObject({ isError: false, structuredContent: { ok: true, data: 'done' } });
  });
});
