import { join } from 'node:path';
import { describe, expect, onTestFinished, test } from 'vitest';
import { createGateway } from '../src/index.js';
import { EVERYTHING, fixtureEntry, gatewayWith, job, PNPM_STORE, requireBwrap, textOf, tool } from './fixtures/harness.js';

requireBwrap();

describe('gateway over stdio', () => {
  test('server-everything: approved tools are listed and called end to end, in the sandbox', async () => {
    const { gateway, host } = await gatewayWith({
      everything: { command: 'node', args: [EVERYTHING, 'stdio'], binds: [{ path: PNPM_STORE, mode: 'ro' }] },
    });
    expect(await gateway.list({ persona: 'tester', session: 's1' })).toEqual([]);
    const approved = await gateway.approve('everything', ['echo', 'get-sum'], 'operator');
    expect(approved.ok).toBe(true);
    const echo = await tool(gateway, 'everything.echo');
    expect(echo.origin).toEqual({ kind: 'gateway', server: 'everything', tool: 'echo', sandboxed: true, transport: 'stdio' });
    expect(echo.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    const names = (await gateway.list({ persona: 'tester', session: 's1' })).map((t) => t.name).sort();
    expect(names).toEqual(['everything.echo', 'everything.get-sum']);

    const r = await gateway.execute(job(echo, { message: 'hi there' }));
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(textOf(r.content)).toBe('Echo: hi there');
    expect(r.facts).toMatchObject({ server: 'everything', tool: 'echo', transport: 'stdio', sandboxed: true, restarts: 0 });
    // The host pid of the upstream's sandbox (its launcher), for the manifest.
    expect(r.facts?.upstream_pid).toEqual(expect.any(Number));
    expect(['2025-11-25', '2025-06-18']).toContain(r.facts?.protocol_version);

    const sum = await gateway.execute(job(await tool(gateway, 'everything.get-sum'), { a: 2, b: 40 }));
    expect(sum.ok && textOf(sum.content)).toContain('42');
    const started = host.entries.filter((e) => e.type === 'gateway.upstream_started');
    expect(started).toHaveLength(1);
    expect(started[0]?.data).toMatchObject({ server: 'everything', sandboxed: true, transport: 'stdio' });
  });

  test('an unapproved tool is not listed, and a tool outside the allow-list cannot be approved', async () => {
    const { gateway } = await gatewayWith({ fx: fixtureEntry({}, { tools: ['hello'] }) });
    const states = await gateway.tools('fx');
    expect(Array.isArray(states) && states.find((s) => s.tool === 'hello')?.status).toBe('new');
    expect(Array.isArray(states) && states.find((s) => s.tool === 'add')?.status).toBe('not_allowed');
    const refused = await gateway.approve('fx', ['add'], 'operator');
    expect(refused).toMatchObject({ ok: false, kind: 'not_allowed' });
    expect(await gateway.list({ persona: 'tester', session: 's1' })).toEqual([]);
    expect((await gateway.approve('fx', [], 'operator')).ok).toBe(true);
    expect((await gateway.list({ persona: 'tester', session: 's1' })).map((t) => t.name)).toEqual(['fx.hello']);
  });
  test("a configured server's namespace is the gateway's, in either form and any case: forging into it would shadow the upstream", async () => {
    const h = await gatewayWith({ fx: fixtureEntry() });
    expect(h.gateway.owns('fx.anything')).toMatch(/namespace of the gateway server "fx"/);
    expect(h.gateway.owns('FX__anything')).toMatch(/namespace of the gateway server "fx"/);
    expect(h.gateway.owns('fxother.tool')).toBeUndefined();
    expect(h.gateway.owns('code.fx')).toBeUndefined();
  });
  test('a server slow to start does not hold up the list: its approved tools are offered as pinned, and the listeners hear once it has listed', async () => {
    // A server slow to start, approved as it is (the definition an approval covers includes its environment).
    const h = await gatewayWith({ fx: fixtureEntry({ FIXTURE_START_DELAY_MS: '4000' }) }, { listWaitMs: 200 });
    expect(await h.gateway.approve('fx', ['hello'], 'operator')).toMatchObject({ ok: true });
    // Another gateway over the same files (a restarted forge): its upstream starts from nothing.
    const gateway = createGateway({ userFile: h.userFile, gatewayDir: join(h.dir, 'gateway'), listWaitMs: 200 });
    await gateway.attach(h.host);
    onTestFinished(() => gateway.close());
    const heard = new Promise<string[]>((resolve) => {
      gateway.onChange((names) => {
        if (names.includes('fx.hello')) resolve(names);
      });
    });
    const listed = await gateway.list({ persona: 'tester', session: 's1' });
    expect(listed.map((t) => t.name)).toEqual(['fx.hello']);
    // Answered while the server was still starting.
    expect((await gateway.servers()).find((r) => r.name === 'fx')?.state).not.toBe('running');
    await heard;
    expect((await gateway.servers()).find((r) => r.name === 'fx')?.state).toBe('running');
    const r = await gateway.execute(job(await tool(gateway, 'fx.hello'), { name: 'late' }));
    expect(r.ok && textOf(r.content)).toBe('hello late');
  });
});
