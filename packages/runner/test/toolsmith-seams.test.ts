/**
 * What the runner gives the toolsmith: governed mode (forge_tool refused, an activation let
 * through), trial runs of specs that are not stored, tool states, and its own audit entries.
 */
import { describe, expect, it } from 'vitest';
import { failed, okData, py, setup } from './helpers.js';

const DOUBLE = py('text.double', 'print(json.dumps({"ok": True, "data": {"y": args["x"] * 2}}))', {
  input_schema: { type: 'object', properties: { x: { type: 'integer', minimum: 0 } }, required: ['x'], additionalProperties: false },
  output_schema: { type: 'object', properties: { y: { type: 'integer' } }, required: ['y'] },
  meta: { deterministic: true },
});

describe('governed mode', () => {
  it('refuses forge_tool for a governed persona, pointing at forge_propose, audited; an activation goes through', async () => {
    const fx = await setup({ workspacePolicy: { toolsmith: { enabled: true, mode: { '*': 'governed', coder: 'direct' } } } });
    const r = await fx.forge.forgeTool(DOUBLE, { persona: 'agent' });
    expect(r).toMatchObject({ ok: false, kind: 'policy_denied' });
    expect(r.ok ? '' : r.message).toMatch(/governed mode \(policy toolsmith\.mode\).*forge_propose/);
    expect(fx.entries('forge.created').at(-1)?.data).toMatchObject({ ok: false, kind: 'policy_denied', persona: 'agent' });
    // A direct persona forges as always.
    expect(await fx.forge.forgeTool({ ...DOUBLE, name: 'text.other' }, { persona: 'coder' })).toMatchObject({ ok: true });
    const made = await fx.forge.forgeTool(DOUBLE, {
      persona: 'agent',
      activation: { proposal: 'p-0123456789abcdef', approvedBy: 'alice' },
    });
    expect(made).toMatchObject({ ok: true, tool: { name: 'text.double', state: 'active' } });
    expect(fx.entries('forge.created').at(-1)?.data).toMatchObject({
      ok: true,
      name: 'text.double',
      toolsmith: { proposal: 'p-0123456789abcdef', approved_by: 'alice' },
    });
  });

  it('tells a governed persona that calls an unknown tool to propose one, not to forge it', async () => {
    const fx = await setup({ workspacePolicy: { toolsmith: { enabled: true, mode: { agent: 'governed' } } } });
    const governed = await fx.forge.callTool('text.nope', {}, { persona: 'agent' });
    expect(governed.ok ? '' : governed.error.message).toMatch(
      /or forge_propose to propose one \(forge_tool is refused in governed mode\)$/,
    );
    const direct = await fx.forge.callTool('text.nope', {}, { persona: 'coder' });
    expect(direct.ok ? '' : direct.error.message).toMatch(/or forge_tool to create it$/);
  });

  it('says when the toolsmith is off, so the persona knows to ask an operator', async () => {
    const fx = await setup({ workspacePolicy: { toolsmith: { mode: { agent: 'governed' } } } });
    const r = await fx.forge.forgeTool(DOUBLE, { persona: 'agent' });
    expect(r.ok ? '' : r.message).toMatch(/toolsmith is off now: policy toolsmith\.enabled is false/);
  });
});

describe('trialCall', () => {
  it('runs a spec that is not stored, in the sandbox, audited as toolsmith.trial_run, never cached nor listed', async () => {
    const fx = await setup();
    const a = await fx.forge.trialCall(DOUBLE, { x: 4 }, { persona: 'agent', purpose: 'p-1' });
    if ('kind' in a) throw new Error(a.message);
    expect(a.ran).toBe(true);
    expect(a.runtime).toMatch(/^python3 \d+\.\d+/);
    expect(okData(a.envelope)).toEqual({ y: 8 });
    const b = await fx.forge.trialCall(DOUBLE, { x: 4 }, { persona: 'agent' });
    if ('kind' in b) throw new Error(b.message);
    expect(b.envelope.meta.cache).toBe('off');
    expect(b.envelope.meta.run_id).not.toBe(a.envelope.meta.run_id);
    expect(fx.entries('toolsmith.trial_run').map((e) => e.data.ok)).toEqual([true, true]);
    expect(fx.entries('forge.called')).toEqual([]);
    expect(await fx.forge.listTools()).toEqual([]);
    expect(fx.forge.callCount('text.double')).toBe(0);
    const m = fx.manifest(String(a.envelope.meta.run_id));
    expect(m).toMatchObject({ persona: 'agent', ok: true });
  });

  it('refuses an invalid input before anything runs, and a spec forging would refuse', async () => {
    const fx = await setup();
    const r = await fx.forge.trialCall(DOUBLE, { x: -1 }, { persona: 'agent' });
    if ('kind' in r) throw new Error(r.message);
    expect(r.ran).toBe(false);
    expect(failed(r.envelope, 'validation_failed').message).toMatch(/x/);
    expect(fx.sandboxRuns('text.double')).toEqual([]);
    expect(fx.entries('toolsmith.trial_run').at(-1)?.data).toMatchObject({ ok: false, kind: 'validation_failed' });
    expect(await fx.forge.trialCall({ ...DOUBLE, runtime: 'cobol' }, { x: 1 })).toMatchObject({ ok: false, kind: 'validation_failed' });
    expect(await fx.forge.trialCall({ ...DOUBLE, name: 'forge_tool' }, { x: 1 })).toMatchObject({ ok: false, kind: 'name_forbidden' });
  });

  it('a broken impl is a failed envelope with the reason (output checked like a call)', async () => {
    const fx = await setup();
    const bad = py('text.bad', 'print(json.dumps({"ok": True, "data": {"y": "no"}}))', { output_schema: DOUBLE.output_schema });
    const r = await fx.forge.trialCall(bad, {}, { persona: 'agent' });
    if ('kind' in r) throw new Error(r.message);
    expect(r.ran).toBe(true);
    failed(r.envelope, 'output_schema_failed');
  });
});

describe('setToolState and recordEvent', () => {
  it('retires a tool (hidden, refused), reactivates it, each with its toolsmith entry', async () => {
    const fx = await setup();
    const made = await fx.forge.forgeTool(DOUBLE);
    if (!made.ok) throw new Error(made.message);
    const seen: string[][] = [];
    fx.forge.on('toolsChanged', (c) => seen.push(c.names));
    const r = await fx.forge.setToolState('text.double', 'retired', {
      from: ['active'],
      digest: made.tool.digest,
      event: { type: 'toolsmith.retired', data: { by: 'alice' } },
    });
    expect(r).toMatchObject({ ok: true, tool: { state: 'retired', version: 2 } });
    expect(seen).toEqual([['text.double']]);
    expect(await fx.forge.listTools()).toEqual([]);
    failed(await fx.forge.callTool('text.double', { x: 1 }), 'unknown_tool');
    expect(fx.entries('toolsmith.retired').map((e) => e.data)).toEqual([
      { by: 'alice', name: 'text.double', scope: 'project', version: 2, digest: made.tool.digest, state: 'retired' },
    ]);
    // A restart reads the same state from disk.
    const again = await fx.reopen();
    expect(await again.listTools()).toEqual([]);
    const back = await fx.forge.setToolState('text.double', 'active', { from: ['retired'] });
    expect(back).toMatchObject({ ok: true, tool: { state: 'active', version: 3 } });
    expect(okData(await fx.forge.callTool('text.double', { x: 2 }))).toEqual({ y: 4 });
    expect(await fx.forge.setToolState('text.double', 'active', { from: ['retired'] })).toMatchObject({
      ok: false,
      kind: 'state_conflict',
    });
  });

  it('recordEvent writes toolsmith.* entries, and refuses the engine types', async () => {
    const fx = await setup();
    expect(await fx.forge.recordEvent('toolsmith.paused', { why: 'kill switch' })).toBeUndefined();
    expect(fx.entries('toolsmith.paused').map((e) => e.data)).toEqual([{ why: 'kill switch' }]);
    await expect(fx.forge.recordEvent('forge.created', {})).rejects.toThrow(/not a toolsmith\.\* event type/);
    const pol = fx.forge.policy();
    expect(pol.ok && pol.snapshot.policy.toolsmith.enabled).toBe(false);
    // The caller with the engine's defaults filled: one session per engine unless given.
    const me = fx.forge.caller();
    expect(me).toEqual({ persona: 'default', session: expect.stringMatching(/^s-[0-9a-f]{8}$/) });
    expect(fx.forge.caller({ persona: 'agent', task: 't1' })).toEqual({ persona: 'agent', session: me.session, task: 't1' });
  });
});
