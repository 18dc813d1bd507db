import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ToolEvent } from '@forge/runner';
import { describe, expect, onTestFinished, test } from 'vitest';
import { ACCEPTED_PROTOCOL_VERSIONS, createGateway } from '../src/index.js';
import {
  BAD_VERSION_SERVER,
  EVERYTHING,
  fixtureEntry,
  gatewayWith,
  job,
  listWaitMs,
  MODERN_SERVER,
  PACKAGE_DIR,
  PNPM_STORE,
  requireBwrap,
  tempDir,
  textOf,
  tool,
} from './fixtures/harness.js';

requireBwrap();

describe('calls through the gateway', () => {
  test('a crash mid-call fails the call at once naming the server, exit and stderr; the next call restarts it', async () => {
    const h = await gatewayWith({ fx: fixtureEntry() });
    expect(await h.gateway.approve('fx', ['crash', 'hello'], 'operator')).toMatchObject({ ok: true });
    const crashed = await h.gateway.execute(job(await tool(h.gateway, 'fx.crash'), {}));
    expect(crashed).toMatchObject({ ok: false, kind: 'upstream_unavailable', outcome: 'failure' });
    expect(!crashed.ok && crashed.message).toMatch(
      /^gateway server "fx" exit \(exit code 3\); its stderr ends: fixture: crashing on purpose while "crash" was running; the next call restarts it$/,
    );
    const again = await h.gateway.execute(job(await tool(h.gateway, 'fx.hello'), { name: 'back' }));
    expect(again.ok && textOf(again.content)).toBe('hello back');
    expect(again.facts?.restarts).toBe(1);
    const types = h.host.entries.map((e) => e.type).filter((t) => t.startsWith('gateway.upstream'));
    expect(types).toEqual(['gateway.upstream_started', 'gateway.upstream_exited', 'gateway.upstream_started']);
    expect(h.host.entries.find((e) => e.type === 'gateway.upstream_exited')?.data).toMatchObject({
      server: 'fx',
      phase: 'running',
      inflight: 1,
    });
  });

  test('an upstream answering a protocol version forge does not speak is refused, naming it and the accepted ones', async () => {
    const h = await gatewayWith({ bad: fixtureEntry({}, { args: [BAD_VERSION_SERVER] }) });
    const r = await h.gateway.tools('bad');
    expect(r).toMatchObject({ ok: false, kind: 'protocol_unsupported' });
    expect(!Array.isArray(r) && r.message).toBe(
      `gateway server "bad" answered with protocol version 2099-01-01, which forge does not speak; accepted: ${ACCEPTED_PROTOCOL_VERSIONS.join(', ')} (upgrade or pin the server to a stable version)`,
    );
  });

  test('a server of both eras (SDK v2) is spoken to in 2026-07-28', async () => {
    const h = await gatewayWith({ modern: fixtureEntry({}, { args: [MODERN_SERVER] }) });
    expect(await h.gateway.approve('modern', ['ping'], 'operator')).toMatchObject({ ok: true });
    const r = await h.gateway.execute(job(await tool(h.gateway, 'modern.ping'), {}));
    expect(r.ok && textOf(r.content)).toBe('pong');
    expect(r.facts?.protocol_version).toBe('2026-07-28');
    const [report] = await h.gateway.servers();
    expect(report).toMatchObject({ name: 'modern', state: 'running', protocolVersion: '2026-07-28' });
  });

  test('a draft-era answer (2024-10-07, which the SDK alone would accept) is refused too', async () => {
    const h = await gatewayWith({ bad: fixtureEntry({ FIXTURE_VERSION: '2024-10-07' }, { args: [BAD_VERSION_SERVER] }) });
    expect(await h.gateway.tools('bad')).toMatchObject({ ok: false, kind: 'protocol_unsupported' });
  });

  test('cancel: the upstream is sent notifications/cancelled and the call ends as cancelled; progress is forwarded', async () => {
    const h = await gatewayWith({ fx: fixtureEntry() });
    expect(await h.gateway.approve('fx', ['wait', 'cancelled_count'], 'operator')).toMatchObject({ ok: true });
    const abort = new AbortController();
    const events: ToolEvent[] = [];
    const r = await h.gateway.execute(
      job(
        await tool(h.gateway, 'fx.wait'),
        {},
        {
          signal: abort.signal,
          onEvent: (e) => {
            events.push(e);
            if (events.length === 3) abort.abort();
          },
        },
      ),
    );
    expect(r).toMatchObject({ ok: false, kind: 'cancelled', outcome: 'none' });
    expect(events.slice(0, 3)).toEqual([
      { type: 'progress', progress: 1, total: 1000 },
      { type: 'progress', progress: 2, total: 1000 },
      { type: 'progress', progress: 3, total: 1000 },
    ]);
    // The same upstream process saw the cancellation (it counts them).
    let seen = '0';
    for (let i = 0; i < 50 && seen === '0'; i++) {
      const c = await h.gateway.execute(job(await tool(h.gateway, 'fx.cancelled_count'), {}));
      seen = c.ok ? textOf(c.content) : 'error';
    }
    expect(seen).toBe('1');
  });

  test('progress written right before the answer (one chunk) is still delivered, in order', async () => {
    const h = await gatewayWith({ fx: fixtureEntry() });
    expect(await h.gateway.approve('fx', ['burst'], 'operator')).toMatchObject({ ok: true });
    const burst = await tool(h.gateway, 'fx.burst');
    for (let i = 0; i < 20; i++) {
      const events: ToolEvent[] = [];
      const r = await h.gateway.execute(job(burst, {}, { onEvent: (e) => events.push(e) }));
      expect(r.ok && textOf(r.content)).toBe('burst');
      expect(events.map((e) => e.type === 'progress' && e.progress)).toEqual([1, 2, 3]);
    }
  });

  test('a call over its time fails as timeout, and the upstream was told to cancel', async () => {
    const h = await gatewayWith({ fx: fixtureEntry() });
    expect(await h.gateway.approve('fx', ['wait'], 'operator')).toMatchObject({ ok: true });
    const r = await h.gateway.execute(job(await tool(h.gateway, 'fx.wait'), {}, { timeoutMs: 300 }));
    expect(r).toMatchObject({ ok: false, kind: 'timeout', outcome: 'failure' });
  });

  test('upstream log messages reach the calling job as log events; an error result is upstream_error', async () => {
    const h = await gatewayWith({ fx: fixtureEntry() });
    expect(await h.gateway.approve('fx', ['log', 'fail'], 'operator')).toMatchObject({ ok: true });
    const events: ToolEvent[] = [];
    const r = await h.gateway.execute(job(await tool(h.gateway, 'fx.log'), {}, { onEvent: (e) => events.push(e) }));
    expect(r.ok && textOf(r.content)).toBe('logged');
    expect(events).toEqual([{ type: 'log', level: 'warning', message: 'fixture log line' }]);
    const f = await h.gateway.execute(job(await tool(h.gateway, 'fx.fail'), {}));
    expect(f).toMatchObject({ ok: false, kind: 'upstream_error', outcome: 'success', message: 'it failed' });
  });

  test('structured content becomes data; output_schema is the upstream outputSchema', async () => {
    const h = await gatewayWith({ fx: fixtureEntry() });
    expect(await h.gateway.approve('fx', ['add'], 'operator')).toMatchObject({ ok: true });
    const add = await tool(h.gateway, 'fx.add');
    expect(add.output_schema).toEqual({ type: 'object', properties: { sum: { type: 'number' } }, required: ['sum'] });
    const r = await h.gateway.execute(job(add, { a: 1, b: 2 }));
    expect(r).toMatchObject({ ok: true, data: { sum: 3 } });
  });

  test("secrets reach the upstream's environment by the configured variable; personas with other values get another process", async () => {
    const h = await gatewayWith({ fx: fixtureEntry({}, { secrets: { FX_TOKEN: 'fx_token' } }) });
    expect(await h.gateway.approve('fx', ['env_has'], 'operator')).toMatchObject({ ok: true });
    const envHas = await tool(h.gateway, 'fx.env_has');
    expect(envHas.meta).toEqual({ secrets: ['fx_token'] });
    const a = await h.gateway.execute(job(envHas, { name: 'FX_TOKEN' }, { secrets: new Map([['fx_token', 'value-of-a']]) }));
    expect(a.ok && textOf(a.content)).toBe('present');
    const b = await h.gateway.execute(
      job(envHas, { name: 'FX_TOKEN' }, { persona: 'other', secrets: new Map([['fx_token', 'value-of-b']]) }),
    );
    expect(b.ok && textOf(b.content)).toBe('present');
    // One process to list (no secrets), one per set of secret values.
    expect(h.host.entries.filter((e) => e.type === 'gateway.upstream_started')).toHaveLength(3);
    const none = await h.gateway.execute(job(envHas, { name: 'HOME_SECRET_NOT_SET' }, { secrets: new Map([['fx_token', 'value-of-a']]) }));
    expect(none.ok && textOf(none.content)).toBe('absent');
    // Nothing recorded holds a value.
    expect(JSON.stringify(h.host.entries)).not.toMatch(/value-of-/);
  });

  test("a bind of forge's own state is refused before anything starts", async () => {
    const h = await gatewayWith({});
    h.writeConfig({ fx: fixtureEntry({}, {}, [{ path: h.dir, mode: 'ro' }]) });
    const r = await h.gateway.tools('fx');
    expect(r).toMatchObject({ ok: false, kind: 'bind_denied' });
    expect(h.host.entries.some((e) => e.type === 'gateway.upstream_started')).toBe(false);
  });

  test("a project-level server's binds must lie under the bind roots", async () => {
    const h = await gatewayWith({});
    const workspaceFile = join(h.dir, 'project-gateway.json');
    const outsideRoots = tempDir('forge-gw-bind-');
    chmodSync(outsideRoots, 0o755);
    writeFileSync(workspaceFile, JSON.stringify({ servers: { proj: fixtureEntry({}, {}, [{ path: outsideRoots, mode: 'ro' }]) } }));
    const confined = createGateway({
      userFile: h.userFile,
      workspaceFile,
      gatewayDir: join(h.dir, 'gateway'),
      bindRoots: [PACKAGE_DIR, PNPM_STORE],
      listWaitMs: listWaitMs(),
    });
    await confined.attach(h.host);
    onTestFinished(() => confined.close());
    const r = await confined.tools('proj');
    expect(r).toMatchObject({ ok: false, kind: 'bind_denied' });
    expect(!Array.isArray(r) && r.message).toContain(`cannot bind "${outsideRoots}": it is outside the allowed roots`);
  });

  test("without bindRoots of its own, a project-level server's binds follow the attached engine's policy bind_roots, read at each start", async () => {
    const h = await gatewayWith({});
    const workspaceFile = join(h.dir, 'project-gateway.json');
    const data = tempDir('forge-gw-bind-');
    chmodSync(data, 0o755);
    writeFileSync(workspaceFile, JSON.stringify({ servers: { proj: fixtureEntry({}, {}, [{ path: data, mode: 'ro' }]) } }));
    let roots: string[] = [PACKAGE_DIR, PNPM_STORE];
    const followed = createGateway({ userFile: h.userFile, workspaceFile, gatewayDir: join(h.dir, 'gateway'), listWaitMs: listWaitMs() });
    await followed.attach({ ...h.host, bindRoots: () => roots });
    onTestFinished(() => followed.close());
    expect(await followed.tools('proj')).toMatchObject({ ok: false, kind: 'bind_denied' });
    // The policy now names the data directory too: the next start may bind it.
    roots = [PACKAGE_DIR, PNPM_STORE, data];
    const listed = await followed.tools('proj');
    expect(Array.isArray(listed) && listed.some((t) => t.tool === 'hello')).toBe(true);
  });

  test('progress of server-everything trigger-long-running-operation is forwarded', async () => {
    const h = await gatewayWith({
      everything: { command: 'node', args: [EVERYTHING, 'stdio'], binds: [{ path: PNPM_STORE, mode: 'ro' }] },
    });
    expect(await h.gateway.approve('everything', ['trigger-long-running-operation'], 'operator')).toMatchObject({ ok: true });
    const events: ToolEvent[] = [];
    const r = await h.gateway.execute(
      job(
        await tool(h.gateway, 'everything.trigger-long-running-operation'),
        { duration: 0.3, steps: 3 },
        { onEvent: (e) => events.push(e) },
      ),
    );
    expect(r.ok).toBe(true);
    expect(events.filter((e) => e.type === 'progress').map((e) => e.type === 'progress' && e.progress)).toEqual([1, 2, 3]);
  });

  test("an upstream tool that may only be called as a task (server-everything's simulate-research-query) is not offered, and the skip says why", async () => {
    const h = await gatewayWith({
      everything: { command: 'node', args: [EVERYTHING, 'stdio'], binds: [{ path: PNPM_STORE, mode: 'ro' }] },
    });
    const listed = await h.gateway.tools('everything');
    if (!Array.isArray(listed)) throw new Error(listed.message);
    const names = listed.map((t) => t.tool);
    expect(names).toContain('trigger-long-running-operation');
    expect(names).not.toContain('simulate-research-query');
    expect(h.host.entries.find((e) => e.type === 'gateway.tool_skipped' && e.data.tool === 'simulate-research-query')?.data).toMatchObject({
      server: 'everything',
      why: expect.stringContaining('execution.taskSupport "required"'),
    });
  });

  test('after 5 failed starts in a row the breaker refuses, naming when to retry', async () => {
    const h = await gatewayWith({ dead: fixtureEntry({}, { args: ['-e', 'process.exit(7)'] }) });
    const messages: string[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await h.gateway.tools('dead');
      messages.push(!Array.isArray(r) ? r.kind : 'listed');
    }
    expect(messages).toEqual(Array(6).fill('upstream_unavailable'));
    const last = await h.gateway.tools('dead');
    expect(!Array.isArray(last) && last.message).toMatch(
      /^gateway server "dead": breaker open after 5 failed starts in a row, retry after \d{4}-\d\d-\d\dT/,
    );
    const report = await h.gateway.servers();
    expect(report[0]).toMatchObject({ name: 'dead', state: 'breaker_open', sandboxed: true });
    expect(h.host.entries.filter((e) => e.type === 'gateway.upstream_exited')).toHaveLength(5);
  });
});
