import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { ANNOUNCED_WINDOW } from '../src/announced.js';
import { createForge, type ForgeEvent } from '../src/index.js';
import { example, failed, okData, py, runStarted, setup } from './helpers.js';

const sleeper = (seconds: number, timeoutMs = 30_000) =>
  py('sleeper', `import time\ntime.sleep(${seconds})\nprint(json.dumps({"ok": True, "data": "woke"}))`, {
    meta: { timeout_ms: timeoutMs },
  });

describe('close()', () => {
  it('waits for a call already running in the sandbox, then resolves; the call is audited', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(sleeper(0.5))).ok).toBe(true);
    let settled = false;
    const call = fx.forge.callTool('sleeper', {}).finally(() => {
      settled = true;
    });
    await runStarted(fx.forge.paths.runsDir);
    await fx.forge.close();
    expect(settled).toBe(true);
    const env = await call;
    expect(okData(env)).toBe('woke');
    expect(fx.entries('forge.called').map((e) => [e.data.run_id, e.data.ok])).toEqual([[env.meta.run_id, true]]);
  });

  it('a call started just before close() finishes (or is refused) before close resolves, and is audited', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    let settled = false;
    const call = fx.forge.callTool('fib', { n: 12 }).finally(() => {
      settled = true;
    });
    await fx.forge.close();
    expect.soft(settled, 'close() resolved while a call was still in flight').toBe(true);
    const env = await call;
    const called = fx.entries('forge.called');
    expect(called).toHaveLength(1);
    expect(called[0]?.data).toMatchObject({ ok: env.ok });
  });

  it('kills calls still running after graceMs, then resolves; the killed call ends as a failure and is audited', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(sleeper(20))).ok).toBe(true);
    const call = fx.forge.callTool('sleeper', {});
    await runStarted(fx.forge.paths.runsDir);
    await fx.forge.close({ graceMs: 300 });
    // Killed, not waited out (the manifest's SIGKILL says so; the tool sleeps 20 s).
    const env = await call;
    expect(env.ok).toBe(false);
    expect(fx.manifest(env.meta.run_id as string)).toMatchObject({ ok: false, exit: { reason: 'signal', signal: 'SIGKILL' } });
    expect(fx.entries('forge.called').map((e) => [e.data.run_id, e.data.ok])).toEqual([[env.meta.run_id, false]]);
  });

  it('after close, forges and calls are refused, and close is idempotent', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    await fx.forge.close();
    await fx.forge.close();
    expect(failed(await fx.forge.callTool('fib', { n: 1 }), 'internal').message).toContain('shutting down');
    expect(await fx.forge.forgeTool({ ...(await example('fib')), name: 'fib2' })).toMatchObject({ ok: false, kind: 'internal' });
    expect(fx.sandboxRuns('fib')).toEqual([]);
  });

  it('an abort signal kills the call’s sandbox', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(sleeper(20))).ok).toBe(true);
    const ac = new AbortController();
    const call = fx.forge.callTool('sleeper', {}, { signal: ac.signal });
    await runStarted(fx.forge.paths.runsDir);
    ac.abort();
    const env = await call;
    expect(env.ok).toBe(false);
    expect(fx.manifest(env.meta.run_id as string)).toMatchObject({ exit: { reason: 'signal', signal: 'SIGKILL' } });
  });
});

describe('events and the audit trail', () => {
  it('the audit listener sees every entry as it is recorded, and unsubscribes', async () => {
    const fx = await setup();
    const seen: ForgeEvent[] = [];
    const off = fx.forge.on('audit', (e) => seen.push(e));
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    await fx.forge.callTool('fib', { n: 2 });
    await fx.forge.callTool('nope', {});
    off();
    await fx.forge.callTool('fib', { n: 3 });
    expect(seen.map((e) => [e.type, e.data.ok, e.data.name])).toEqual([
      ['forge.created', true, 'fib'],
      ['forge.called', true, 'fib'],
      ['forge.called', false, 'nope'],
    ]);
    expect(fx.forge.callCount('fib')).toBe(2);
    expect(fx.forge.callCount('nope')).toBe(0);
  });

  it('a refusal and a run of the same input record the same input_digest', async () => {
    const fx = await setup({ workspacePolicy: { breakers: { per_tool_rpm: 1 } } });
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    okData(await fx.forge.callTool('fib', { n: 5 }));
    failed(await fx.forge.callTool('fib', { n: 5 }), 'breaker_open');
    const [run, refusal] = fx.entries('forge.called').map((e) => e.data.input_digest);
    expect(run).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(refusal).toBe(run);
  });

  it('a refusal is audited even when the requested name is not well-formed text', async () => {
    const fx = await setup();
    const name = 'bad\ud800name';
    failed(await fx.forge.callTool(name, {}), 'unknown_tool');
    expect(fx.entries('forge.called').map((e) => [e.data.ok, e.data.kind])).toEqual([[false, 'unknown_tool']]);
  });

  it('a refusal with very many problems is still audited: the entry stays bounded', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('json_to_csv'))).ok).toBe(true);
    // 25 000 rows that are not objects: one problem each, from about 50 KB of input.
    const env = await fx.forge.callTool('json_to_csv', { rows: Array(25_000).fill(1), out: `${fx.project}/x.csv` });
    failed(env, 'validation_failed');
    const entry = fx.entries('forge.called').at(-1);
    expect(entry?.data).toMatchObject({ ok: false, kind: 'validation_failed', name: 'json_to_csv' });
    expect(JSON.stringify(entry).length).toBeLessThan(64 << 10);
  });

  it('every entry carries facts, never the input itself (a digest of it)', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('word_count'))).ok).toBe(true);
    const text = 'a distinctive sentence that must not reach the audit log';
    okData(await fx.forge.callTool('word_count', { text }));
    failed(await fx.forge.callTool('word_count', { text, top: 'x' }), 'validation_failed');
    const log = JSON.stringify(fx.audit());
    expect(log).not.toContain('distinctive sentence');
  });
});

/** An empty project and home of this test's own (removed when it ends). */
function bareDirs(): { project: string; home: string } {
  const project = mkdtempSync(join(tmpdir(), 'forge-bare-project-'));
  const home = mkdtempSync(join(tmpdir(), 'forge-bare-home-'));
  onTestFinished(() => {
    rmSync(project, { recursive: true, force: true });
    rmSync(home, { recursive: true, force: true });
  });
  return { project, home };
}

describe('what a process that only looks leaves behind', () => {
  it('listing from a directory creates nothing there (no .forge/, no runs/)', async () => {
    const { project, home } = bareDirs();
    const forge = await createForge({ home, project, env: {} });
    expect(await forge.listTools()).toEqual([]);
    await forge.close();
    expect(readdirSync(project)).toEqual([]);
  });

  it('an engine that only looks appends nothing; what it learned opening is written just before its first entry', async () => {
    const { project, home } = bareDirs();
    const types = (file: string) =>
      existsSync(file)
        ? readFileSync(file, 'utf8')
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l).type)
        : [];
    const looker = await createForge({ home, project, env: {} });
    expect(await looker.listTools()).toEqual([]);
    await looker.close();
    expect(types(looker.paths.auditLog)).toEqual([]);

    const caller = await createForge({ home, project, env: {} });
    expect((await caller.forgeTool(await example('fib'))).ok).toBe(true);
    await caller.close();
    // The policy this engine loaded, then its forge: one entry each, in that order.
    expect(types(caller.paths.auditLog)).toEqual(['policy.reloaded', 'forge.created']);
  });

  it('an engine whose policy the log announced last does not announce it again; another policy, or one announced too far back, it does', async () => {
    const { project, home } = bareDirs();
    const types = (file: string) =>
      readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l).type as string);
    const act = async (n: number) => {
      const f = await createForge({ home, project, env: {} });
      expect((await f.forgeTool({ ...(await example('fib')), name: `fib${n}` })).ok).toBe(true);
      await f.close();
      return f.paths.auditLog;
    };
    const log = await act(1);
    await act(2);
    expect(types(log)).toEqual(['policy.reloaded', 'forge.created', 'forge.created']);
    writeFileSync(join(home, 'policy.json'), JSON.stringify({ breakers: { per_session_forge_count: 500 } }));
    await act(3);
    expect(types(log).slice(3)).toEqual(['policy.reloaded', 'forge.created']);
    // More entries since than the window searched: announced again.
    const f = await createForge({ home, project, env: {} });
    for (let i = 0; i < ANNOUNCED_WINDOW; i++) failed(await f.callTool('nope', {}), 'unknown_tool');
    await f.close();
    const before = types(log).length;
    await act(4);
    expect(types(log).slice(before)).toEqual(['policy.reloaded', 'forge.created']);
  });
});
