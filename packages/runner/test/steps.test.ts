import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { openCall } from '../src/call/call.js';
import { passGates } from '../src/call/gates.js';
import { recordRun } from '../src/call/record.js';
import { resolveTarget, type Target } from '../src/call/resolve.js';
import { validateInput } from '../src/call/validate.js';
import { createEngine, type Engine } from '../src/engine.js';
import { makeForgeTool } from '../src/forgeTool.js';
import type { SourcedTool, ToolSource } from '../src/index.js';
import { py, writeAtomic } from './helpers.js';

/**
 * The call pipeline's steps one by one (call/*.ts), over a real engine: each step's contract,
 * which the whole-pipeline tests only see through their sum.
 */

const upstream: SourcedTool = {
  name: 'srv.echo',
  description: 'echo',
  input_schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] },
  digest: `sha256:${'c'.repeat(64)}`,
  origin: { kind: 'gateway', server: 'srv', tool: 'echo', sandboxed: true, transport: 'stdio' },
};

const source: ToolSource = {
  kind: 'gateway',
  attach() {},
  list: async () => [upstream, { ...upstream, name: 'srv.shadowed' }],
  resolve: async (name) => [upstream, { ...upstream, name: 'srv.shadowed' }].find((t) => t.name === name),
  execute: async () => ({ ok: true, data: {} }),
  onChange: () => () => {},
  close: async () => {},
};

/**
 * Resolves after the engine has forgotten this turn's look at the policy: it keeps one per
 * event-loop turn and drops it in a setImmediate (engine.ts, policyNow), and immediates run in
 * the order they were queued, so one queued now runs after it.
 */
const nextTurn = (): Promise<void> => new Promise((r) => setImmediate(r));

async function engine(policy?: unknown): Promise<{ e: Engine; home: string; project: string }> {
  const root = await mkdtemp(join(tmpdir(), 'forge-steps-test-'));
  const home = join(root, 'home');
  const project = join(root, 'project');
  if (policy !== undefined) writeAtomic(join(home, 'policy.json'), JSON.stringify(policy));
  writeAtomic(join(project, '.forge', 'keep'), '');
  const e = await createEngine({ env: {}, home, project, sources: [source], prebuild: false });
  e.opened(); // as createForge does once its sources are attached: entries are written from now on
  onTestFinished(async () => {
    await e.base.close();
    await e.audit.close();
    await rm(root, { recursive: true, force: true });
  });
  return { e, home, project };
}

describe('the call pipeline, step by step', () => {
  it('resolve: a forged tool before a source tool of the same name; wire names for both; otherwise the unknown_tool message', async () => {
    const { e } = await engine();
    const forged = await makeForgeTool(e)(py('srv.shadowed', 'print("{}")'));
    expect(forged.ok, JSON.stringify(forged)).toBe(true);
    const ctx = e.context({});
    const a = await resolveTarget(e, ctx, 'srv.shadowed');
    expect(a.ok && a.target.kind).toBe('forged');
    const b = await resolveTarget(e, ctx, 'srv__echo');
    expect(b.ok && b.target.kind === 'sourced' && b.target.tool.name).toBe('srv.echo');
    const c = await resolveTarget(e, ctx, 'srv.nothing');
    expect(c.ok || c.message).toContain('no forged tool is named "srv.nothing"');
  });

  it('gates: the ACL first, then forbidden names (a malformed edit keeps the last good policy), then the breaker', async () => {
    const { e, home } = await engine({ forbidden_tool_names: ['srv.*'] });
    const target: Target = { kind: 'sourced', tool: upstream, source };
    const call = (allowedTools?: string) => {
      const c = openCall(e, 'srv.echo', { n: 1 }, allowedTools === undefined ? {} : { allowedTools });
      c.name = 'srv.echo';
      return c;
    };
    expect(passGates(e, call(), target)).toMatchObject({ ok: false, kind: 'name_forbidden' });
    writeFileSync(join(home, 'policy.json'), '{ "forbidden_tool_names": [');
    await nextTurn(); // the next event-loop turn looks at the policy again
    expect(passGates(e, call('other'), target)).toMatchObject({ ok: false, kind: 'acl.persona_denied', eventType: 'acl.persona_denied' });
    // A malformed edit keeps the last good policy: still forbidden.
    expect(passGates(e, call(), target)).toMatchObject({ ok: false, kind: 'name_forbidden' });
    writeAtomic(join(home, 'policy.json'), JSON.stringify({ breakers: { per_tool_rpm: 1 } }));
    await nextTurn();
    const first = passGates(e, call(), target);
    expect(first.ok).toBe(true);
    if (first.ok) first.breakers.recordOutcome('srv.echo', 'success', first.settings, first.trial);
    expect(passGates(e, call(), target)).toMatchObject({ ok: false, kind: 'breaker_open', extra: { retry_after_ms: expect.any(Number) } });
  });

  it('validate: a forged tool edited on disk is tool_tampered before its schema is compiled; bad input names its path', async () => {
    const { e, project } = await engine();
    const forged = await makeForgeTool(e)(
      py('t.one', 'print("{}")', { input_schema: { type: 'object', properties: { n: { type: 'integer' } } } }),
    );
    expect(forged.ok).toBe(true);
    const sourced: Target = { kind: 'sourced', tool: upstream, source };
    const bad = openCall(e, 'srv.echo', { n: 'x' }, {});
    expect(validateInput(e, bad, sourced)).toMatchObject({ ok: false, kind: 'validation_failed', message: expect.stringContaining('/n') });
    expect(validateInput(e, openCall(e, 'srv.echo', { n: 2 }, {}), sourced)).toEqual({ ok: true });
    const dir = join(project, '.forge', 'tools');
    const file = join(dir, readdirSync(dir).find((f) => f.startsWith('t.one')) as string);
    const spec = JSON.parse(readFileSync(file, 'utf8'));
    spec.impl = 'print("tampered")';
    writeAtomic(file, JSON.stringify(spec));
    await e.base.load();
    const hit = await resolveTarget(e, e.context({}), 't.one');
    expect(hit.ok).toBe(true);
    if (!hit.ok) return;
    expect(validateInput(e, openCall(e, 't.one', {}, {}), hit.target)).toMatchObject({ ok: false, kind: 'tool_tampered' });
  });

  it('record: a run that ran gets its manifest and one entry naming it; one that never ran, an entry with run_id null and no manifest', async () => {
    const { e } = await engine();
    const target: Target = { kind: 'sourced', tool: upstream, source };
    const pol = e.policyNow();
    if (!pol.ok) throw new Error(pol.message);
    const job = (runId: string) => {
      const call = openCall(e, 'srv.echo', { n: 1 }, {});
      call.name = 'srv.echo';
      call.eventType = 'gateway.called';
      return {
        call,
        target,
        snap: pol.snap,
        plan: { secretNames: [], redactedInput: { n: 1 }, budget: {}, tool: { name: 'srv.echo' } },
        budget: pol.snap.policy.budgets.defaults,
        clamped: [],
        secrets: [],
        secretValues: new Map(),
        runId,
        runDir: join(e.paths.runsDir, `x_${runId}`),
        startedAt: e.now(),
      };
    };
    const ran = job('r1');
    writeAtomic(join(ran.runDir, 'artifacts', '.keep'), '');
    const a = await recordRun(e, ran, {
      envelope: { ok: true, data: 1, meta: { run_id: 'r1', cache: 'off' } },
      outcome: 'success',
      ran: true,
      manifest: { upstream: { server: 'srv' } },
      audit: { server: 'srv' },
    });
    expect(a.envelope.ok).toBe(true);
    const manifest = JSON.parse(readFileSync(join(ran.runDir, 'run_manifest.json'), 'utf8'));
    expect(manifest).toMatchObject({ run_id: 'r1', tool: { name: 'srv.echo' }, ok: true, upstream: { server: 'srv' } });
    const never = job('r2');
    await recordRun(e, never, {
      envelope: { ok: false, error: { kind: 'upstream_unavailable', message: 'no' }, meta: {} },
      outcome: 'failure',
      ran: false,
      manifest: {},
      audit: {},
    });
    await e.audit.flush();
    const entries = readFileSync(e.paths.auditLog, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((x) => x.type === 'gateway.called');
    expect(entries.map((x) => [x.data.run_id, x.data.ok, x.data.server])).toEqual([
      ['r1', true, 'srv'],
      [null, false, 'srv'],
    ]);
    expect(e.calls.get('srv.echo')).toBe(2);
  });
});
