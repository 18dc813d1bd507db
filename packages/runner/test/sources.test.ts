import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { waitFor } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import type { SourceContext, SourcedTool, SourceHost, SourceJob, SourceResult, ToolSource } from '../src/index.js';
import { py, setup } from './helpers.js';

/**
 * The runner's side of the tool-source seam (sources.ts): a source's tools go through the same
 * gates, validation, breakers, secrets, redaction, manifest and audit entry as forged tools.
 * The source here is the test's own, in process, so each assertion is about what the runner did
 * with it; the gateway's tests drive real upstream MCP servers through the same seam.
 */

interface Seen {
  jobs: SourceJob[];
  host?: SourceHost;
  closed: boolean;
}

/** A source serving `tools`; `answer` decides each call's result. */
function testSource(tools: SourcedTool[], answer: (job: SourceJob) => Promise<SourceResult> | SourceResult, onlyFor?: string) {
  const seen: Seen = { jobs: [], closed: false };
  const listeners = new Set<(names: string[]) => void>();
  const visible = (ctx: SourceContext) => (onlyFor === undefined || ctx.persona === onlyFor ? tools : []);
  const source: ToolSource = {
    kind: 'gateway',
    attach(host) {
      seen.host = host;
    },
    async list(ctx) {
      return visible(ctx);
    },
    async resolve(name, ctx) {
      return visible(ctx).find((t) => t.name === name);
    },
    async execute(job) {
      seen.jobs.push(job);
      return answer(job);
    },
    onChange(l) {
      listeners.add(l);
      return () => listeners.delete(l);
    },
    async close() {
      seen.closed = true;
    },
  };
  return {
    source,
    seen,
    changed: (names: string[]) => {
      for (const l of listeners) l(names);
    },
  };
}

const echo: SourcedTool = {
  name: 'upstream.echo',
  description: 'echoes its message',
  input_schema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'], additionalProperties: false },
  output_schema: { type: 'object', properties: { echoed: { type: 'string' } }, required: ['echoed'] },
  digest: `sha256:${'a'.repeat(64)}`,
  origin: { kind: 'gateway', server: 'upstream', tool: 'echo', sandboxed: true, transport: 'stdio' },
  meta: { secrets: ['api_token'] },
};
const plain: SourcedTool = {
  name: 'upstream.plain',
  description: 'no secrets',
  input_schema: { type: 'object' },
  digest: `sha256:${'b'.repeat(64)}`,
  origin: { kind: 'gateway', server: 'upstream', tool: 'plain', sandboxed: true, transport: 'stdio' },
};

const TOKEN = 'tok-3f9a1c77e2b04d5e';
const POLICY = { persona_secret_allow: { default: ['api_token'] } };

describe('tool sources through the call pipeline', () => {
  it('lists and calls a source tool by forge and wire name: one gateway.called entry and a manifest each, the secret handed over and redacted from the answer and events', async () => {
    const events: unknown[] = [];
    const t = testSource([echo, plain], (job) => {
      job.onEvent?.({ type: 'log', level: 'info', message: `using ${job.secrets.get('api_token')}` });
      const m = (job.input as { message: string }).message;
      return { ok: true, data: { echoed: `${m} ${job.secrets.get('api_token')}` }, facts: { protocol_version: '2025-11-25' } };
    });
    const fx = await setup({ userPolicy: POLICY, vault: { api_token: TOKEN }, forge: { sources: [t.source] } });
    expect(t.seen.host?.home).toBe(fx.home);
    expect((await fx.forge.listSourced()).map((s) => s.name)).toEqual(['upstream.echo', 'upstream.plain']);

    const r = await fx.forge.callTool('upstream.echo', { message: 'hi' }, { onEvent: (e) => events.push(e) });
    expect(r.ok, JSON.stringify(r)).toBe(true);
    if (!r.ok) return;
    expect(r.data).toEqual({ echoed: 'hi <redacted:api_token>' });
    expect(r.meta.sandbox).toBe('gateway+bwrap');
    expect(t.seen.jobs[0]?.secrets.get('api_token')).toBe(TOKEN);
    expect(JSON.stringify(events)).not.toContain(TOKEN);
    expect(JSON.stringify(events)).toContain('<redacted:api_token>');

    const byWire = await fx.forge.callTool('upstream__echo', { message: 'again' });
    expect(byWire.ok).toBe(true);

    const called = fx.entries('gateway.called');
    expect(called).toHaveLength(2);
    expect(called[0]?.data).toMatchObject({
      ok: true,
      name: 'upstream.echo',
      server: 'upstream',
      upstream_tool: 'echo',
      secrets: ['api_token'],
    });
    expect(fx.entries('forge.called')).toHaveLength(0);
    expect(fx.entries('tool.secrets_injected')).toHaveLength(2);
    const manifest = fx.manifest(r.meta.run_id as string);
    expect(manifest).toMatchObject({
      tool: { name: 'upstream.echo', server: 'upstream' },
      ok: true,
      upstream: { protocol_version: '2025-11-25' },
    });
    expect(existsSync(join(fx.runDir(r.meta.run_id as string), 'artifacts'))).toBe(true);
    for (const f of [fx.forge.paths.auditLog, join(fx.runDir(r.meta.run_id as string), 'run_manifest.json')]) {
      expect(readFileSync(f, 'utf8')).not.toContain(TOKEN);
    }
  });

  it('refuses before the source runs: invalid input (with the path), the ACL, a forbidden name, a missing allow-rule, a secret the persona may not have', async () => {
    const t = testSource([echo, plain], () => ({ ok: true, data: { echoed: 'x' } }));
    const fx = await setup({
      userPolicy: { forbidden_tool_names: ['upstream.plain'] },
      vault: { api_token: TOKEN },
      forge: { sources: [t.source] },
    });
    const invalid = await fx.forge.callTool('upstream.echo', { message: 7 });
    expect(invalid.ok || invalid.error).toMatchObject({ kind: 'validation_failed' });
    expect(invalid.ok || invalid.error.message).toContain('/message');
    const acl = await fx.forge.callTool('upstream.echo', { message: 'x' }, { allowedTools: 'other.tool' });
    expect(acl.ok || acl.error.kind).toBe('acl.persona_denied');
    const forbidden = await fx.forge.callTool('upstream.plain', {});
    expect(forbidden.ok || forbidden.error.kind).toBe('name_forbidden');
    // No persona_secret_allow entry: no secrets, fail closed.
    const secret = await fx.forge.callTool('upstream.echo', { message: 'x' });
    expect(secret.ok || secret.error.kind).toBe('secret_denied');
    expect(t.seen.jobs).toHaveLength(0);
    expect(fx.entries('gateway.called').map((e) => e.data.kind)).toEqual(['validation_failed', 'name_forbidden']);
    expect(fx.entries('acl.persona_denied')).toHaveLength(1);
    expect(fx.entries('acl.persona_secret_denied')).toHaveLength(1);

    const rules = await setup({ rules: 'allow default_t tool:upstream.other execute\n', forge: { sources: [t.source] } });
    const denied = await rules.forge.callTool('upstream.plain', {});
    expect(denied.ok || denied.error.kind).toBe('policy_denied');
    expect(t.seen.jobs).toHaveLength(0);
  });

  it('an answer that breaks the output schema is output_schema_failed; repeated upstream failures open the breaker', async () => {
    let mode: 'bad' | 'crash' = 'bad';
    const t = testSource([echo, plain], () =>
      mode === 'bad'
        ? { ok: true, data: { nope: 1 } }
        : { ok: false, kind: 'upstream_unavailable', message: 'server upstream exited (code 1)', outcome: 'failure' },
    );
    const fx = await setup({
      userPolicy: { ...POLICY, breakers: { failure_threshold: 2, cooldown_s: 60 } },
      vault: { api_token: TOKEN },
      forge: { sources: [t.source] },
    });
    const bad = await fx.forge.callTool('upstream.echo', { message: 'x' });
    expect(bad.ok || bad.error.kind).toBe('output_schema_failed');
    mode = 'crash';
    const crash = await fx.forge.callTool('upstream.plain', {});
    expect(crash.ok || crash.error).toMatchObject({ kind: 'upstream_unavailable', message: 'server upstream exited (code 1)' });
    await fx.forge.callTool('upstream.plain', {});
    const open = await fx.forge.callTool('upstream.plain', {});
    expect(open.ok || open.error.kind).toBe('breaker_open');
    expect(t.seen.jobs).toHaveLength(3);
  });

  it('the budget ends a call that does not answer (timeout), and the caller cancels one (cancelled); both reach the source as its signal', async () => {
    const t = testSource(
      [{ ...plain, meta: { timeout_ms: 300 } }],
      (job) =>
        new Promise((resolve) => {
          job.signal.addEventListener('abort', () => resolve({ ok: false, kind: 'cancelled', message: 'aborted', outcome: 'none' }));
        }),
    );
    const fx = await setup({ forge: { sources: [t.source] } });
    const timeout = await fx.forge.callTool('upstream.plain', {});
    expect(timeout.ok || timeout.error.kind).toBe('timeout');
    const ac = new AbortController();
    const pending = fx.forge.callTool('upstream.plain', {}, { signal: ac.signal });
    // Cancelled while the source holds the call.
    await waitFor('the second call to reach the source', () => t.seen.jobs.length === 2);
    ac.abort(new Error('the client cancelled'));
    const cancelled = await pending;
    expect(cancelled.ok || cancelled.error).toMatchObject({ kind: 'cancelled', message: expect.stringContaining('the client cancelled') });
    expect(t.seen.jobs.every((j) => j.signal.aborted)).toBe(true);
    expect(t.seen.jobs[0]?.timeoutMs).toBe(300);
  });

  it('a forged tool keeps its name: a source tool with the same forge or wire name is neither listed nor called; a persona sees only its source tools; close() closes the source', async () => {
    const t = testSource(
      [plain, { ...plain, name: 'mine.tool', origin: { ...plain.origin, server: 'mine' } }],
      () => ({ ok: true, data: { from: 'source' } }),
      'default',
    );
    const fx = await setup({ forge: { sources: [t.source] } });
    const forged = await fx.forge.forgeTool(py('mine.tool', 'print(json.dumps({"ok": True, "data": {"from": "forged"}}))'));
    expect(forged.ok, JSON.stringify(forged)).toBe(true);
    expect((await fx.forge.listSourced()).map((s) => s.name)).toEqual(['upstream.plain']);
    const r = await fx.forge.callTool('mine.tool', {});
    expect(r.ok && r.data).toEqual({ from: 'forged' });
    expect(await fx.forge.listSourced({ persona: 'other' })).toEqual([]);
    const other = await fx.forge.callTool('upstream.plain', {}, { persona: 'other' });
    expect(other.ok || other.error.kind).toBe('unknown_tool');
    const changes: string[][] = [];
    fx.forge.on('toolsChanged', (c) => changes.push(c.names));
    t.changed(['upstream.plain']);
    expect(changes).toEqual([['upstream.plain']]);
    await fx.forge.close();
    expect(t.seen.closed).toBe(true);
  });

  it("forging into a source's namespace is name_taken, naming why; other names forge as before", async () => {
    const t = testSource([plain], () => ({ ok: true, data: {} }));
    t.source.owns = (name) =>
      name.toLowerCase().startsWith('upstream.') ? `"${name}" is in the namespace of the gateway server "upstream"` : undefined;
    const fx = await setup({ forge: { sources: [t.source] } });
    const taken = await fx.forge.forgeTool(py('Upstream.plain', 'print("{}")'));
    expect(taken).toMatchObject({
      ok: false,
      kind: 'name_taken',
      message: expect.stringContaining('namespace of the gateway server "upstream"'),
    });
    expect(fx.entries('forge.created').at(-1)?.data).toMatchObject({ ok: false, kind: 'name_taken' });
    expect((await fx.forge.forgeTool(py('mine.other', 'print("{}")'))).ok).toBe(true);
  });

  it('lastAudited reads the newest entry of a type from the log', async () => {
    const t = testSource([], () => ({ ok: true, data: {} }));
    await setup({ forge: { sources: [t.source] } });
    const host = t.seen.host as SourceHost;
    expect(await host.lastAudited('gateway.pins')).toBeUndefined();
    await host.record('gateway.pins', { pins_digest: 'sha256:1' });
    await host.record('gateway.pins', { pins_digest: 'sha256:2' });
    expect(await host.lastAudited('gateway.pins')).toEqual({ pins_digest: 'sha256:2' });
  });
});

describe("a source's entries and close()", () => {
  it('an entry a source records as forge closes, while what the engine held is still being written, is in the log; close() waits for it', async () => {
    const t = testSource([echo], () => ({ ok: true, data: {} }));
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on('warning', onWarning);
    try {
      // A source that says something when it stops (the gateway: its upstream exited), not awaited:
      // the engine's held policy announcement goes first, read against the log as it is written.
      const source: ToolSource = {
        ...t.source,
        async close() {
          void t.seen.host?.record('gateway.stopping', { why: 'closing' });
        },
      };
      const fx = await setup({ forge: { sources: [source] } });
      await fx.forge.close();
      expect(fx.entries('gateway.stopping')).toHaveLength(1);
      expect(fx.entries('policy.reloaded')).toHaveLength(1);
      expect(warnings.filter((m) => m.includes('audit log'))).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });
});
