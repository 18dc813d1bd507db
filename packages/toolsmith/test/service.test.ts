/**
 * The toolsmith over a real forge (real bwrap sandbox, real files, the real audit log): gaps,
 * proposals, validation, approval, lifecycle and the kill switch.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createToolsmith } from '../src/index.js';
import { GOVERNED, setup, wordCount } from './helpers.js';

/**
 * Resolves once the engine has forgotten its look at the policy: it looks once per turn of the
 * event loop and forgets the look in a setImmediate queued as it looks, so one queued now runs
 * after it, and the step after this sees a policy file changed before it.
 */
const policyLookForgotten = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('gaps', () => {
  it('unknown-tool calls recur until the gap qualifies; the message says when a proposal is wanted and how', async () => {
    const fx = await setup();
    const first = await fx.forge.callTool('text.word_count', { text: 'x' }, { persona: 'agent' });
    expect(first.ok ? '' : first.error.message).toMatch(/noted the request \(1 of 2 in 24 h.*forge_request/);
    await fx.smith.gaps.flush();
    // By its wire name, as an MCP client calls: the same gap.
    const second = await fx.forge.callTool('text__word_count', { text: 'x' }, { persona: 'agent' });
    expect(second.ok ? '' : second.error.message).toMatch(
      /asked for 2 times in 24 h, so a tool for it is wanted: propose one with forge_propose \{capability: "text.word_count"/,
    );
    await fx.smith.gaps.flush();
    const cycle = await fx.smith.cycle();
    if (!cycle.ok) throw new Error(cycle.message);
    expect(cycle.wanted.map((w) => [w.signature, w.count, w.qualifies])).toEqual([['text.word_count', 2, true]]);
    expect(fx.smith.gapSummary()).toEqual([
      expect.objectContaining({ kind: 'missing_tool', signature: 'text.word_count', count: 2, qualifies: true }),
    ]);
    expect(fx.audit().filter((e) => e.type === 'toolsmith.gap_recorded')).toHaveLength(2);
  });

  it('forge_request records the need explicitly and says whether it may be authored', async () => {
    const fx = await setup();
    const r = await fx.smith.request(
      { capability: 'Text: Reverse', description: 'reverse a string', example_inputs: [{ s: 'ab' }] },
      { persona: 'agent', session: 's1' },
    );
    expect(r).toMatchObject({ ok: true, capability: 'text_reverse', authorable: false });
    const ok = await fx.smith.request({ capability: 'text.reverse', description: 'reverse a string' }, { persona: 'agent' });
    expect(ok).toMatchObject({ ok: true, capability: 'text.reverse', authorable: true, gap: { count: 1, qualifies: false } });
    expect(await fx.smith.request({ capability: 'text.reverse' })).toMatchObject({ ok: false, kind: 'validation_failed' });
  });

  it('records nothing and refuses everything while off', async () => {
    const fx = await setup({});
    await fx.forge.callTool('text.word_count', {}, { persona: 'agent' });
    await fx.smith.gaps.flush();
    expect(fx.smith.gaps.records()).toEqual([]);
    expect(await fx.smith.propose(wordCount(), { persona: 'agent' })).toMatchObject({
      ok: false,
      kind: 'policy_denied',
      message: expect.stringMatching(/toolsmith is off/),
    });
  });
});

describe('proposals and validation', () => {
  it('a proposal with a wrong example fails validation with the reason and can never be approved', async () => {
    const fx = await setup();
    const bad = wordCount();
    (bad.examples as { expect: unknown }[])[0] = { input: { text: 'a b c' }, expect: { words: 4, top: [] } } as never;
    const r = await fx.smith.propose(bad, { persona: 'agent', session: 's1' });
    if (!r.ok) throw new Error(r.message);
    expect(r.proposal.state).toBe('failed');
    expect(r.message).toMatch(/failed validation: example 1: \/words: expected 4, got 3/);
    expect(r.proposal.validation?.checks[1]).toMatchObject({ kind: 'example', ok: false, run_id: expect.any(String) });
    expect(await fx.smith.approve(r.proposal.id, { by: 'alice' })).toMatchObject({ ok: false, kind: 'state_conflict' });
    expect(await fx.forge.listTools()).toEqual([]);
  });

  it('a good proposal validates (examples, probes, determinism), waits, is approved once, and becomes callable', async () => {
    const fx = await setup();
    const r = await fx.smith.propose(
      { ...wordCount(), name: 'evil.name', network: 'allow', meta: { secrets: ['TOKEN'] } },
      { persona: 'agent', session: 's1' },
    );
    if (!r.ok) throw new Error(r.message);
    expect(r.proposal).toMatchObject({ state: 'validated', name: 'text.word_count', capability: 'text.word_count' });
    expect(r.ignored).toEqual(['name', 'network', 'meta.secrets']);
    expect(r.proposal.spec.meta).toEqual({ deterministic: true });
    const v = r.proposal.validation;
    expect(v?.ok).toBe(true);
    const kinds = new Set(v?.checks.map((c) => c.kind));
    expect([...kinds].sort()).toEqual(['determinism', 'example', 'probe_invalid', 'probe_valid', 'static']);
    expect(v?.sandbox_runs).toBeGreaterThan(10);
    expect(v?.checks.filter((c) => c.kind === 'probe_invalid').every((c) => c.run_id === undefined)).toBe(true);
    // Pending approval: not listed, not callable.
    expect(await fx.forge.listTools()).toEqual([]);
    // The proposer cannot approve it; someone outside approvers cannot either.
    expect(await fx.smith.approve(r.proposal.id, { by: 'mallory' })).toMatchObject({ ok: false, kind: 'policy_denied' });
    // Two approvers at once: exactly one activation.
    const [a, b] = await Promise.all([fx.smith.approve(r.proposal.id, { by: 'alice' }), fx.smith.approve(r.proposal.id, { by: 'bob' })]);
    expect([a.ok, b.ok].filter(Boolean)).toHaveLength(1);
    const loser = a.ok ? b : a;
    expect(loser).toMatchObject({ ok: false, kind: 'state_conflict' });
    const created = fx.audit().filter((e) => e.type === 'forge.created' && e.data.ok === true);
    expect(created).toHaveLength(1);
    expect(created[0]?.data.toolsmith).toMatchObject({ proposal: r.proposal.id });
    const env = await fx.forge.callTool('text.word_count', { text: 'to be or not to be', top: 1 }, { persona: 'agent' });
    expect(env).toMatchObject({ ok: true, data: { words: 6, top: ['be'] } });
    expect((await fx.smith.get(r.proposal.id))?.state).toBe('active');
  });

  it('a capability outside capability_allow is refused, audited', async () => {
    const fx = await setup();
    const r = await fx.smith.propose(wordCount({ capability: 'shell.run' }), { persona: 'agent' });
    expect(r).toMatchObject({
      ok: false,
      kind: 'policy_denied',
      message: expect.stringMatching(/"shell\.run" is outside policy toolsmith\.capability_allow/),
    });
    expect(
      fx
        .audit()
        .filter((e) => e.type === 'toolsmith.proposed')
        .at(-1)?.data,
    ).toMatchObject({ ok: false, kind: 'policy_denied' });
  });

  it('a blueprint that reaches for the network gets only what policy gives (none): its example fails', async () => {
    const fx = await setup();
    const net = wordCount({
      capability: 'text.fetch',
      impl: 'import json, socket\nsocket.create_connection(("1.1.1.1", 80), timeout=2)\nprint(json.dumps({"ok": True, "data": {"words": 1}}))',
      examples: [{ input: { text: 'x' }, expect: { words: 1 } }],
      network: 'allow',
    });
    const r = await fx.smith.propose(net, { persona: 'agent' });
    if (!r.ok) throw new Error(r.message);
    expect(r.ignored).toContain('network');
    expect(r.proposal.state).toBe('failed');
  });
});

describe('lifecycle and the kill switch', () => {
  it('retire hides and refuses; a new version replaces with no regression; rollback brings the previous back', async () => {
    const fx = await setup();
    const one = await fx.smith.propose(wordCount(), { persona: 'agent' });
    if (!one.ok) throw new Error(one.message);
    const a1 = await fx.smith.approve(one.proposal.id, { by: 'alice' });
    if (!a1.ok) throw new Error(a1.message);
    // Version 2 counts one word fewer: the active version's examples catch the regression.
    const broken = wordCount({ impl: String(wordCount().impl).replace('"words": len(ws)', '"words": max(0, len(ws) - 1)') });
    (broken as { examples: unknown[] }).examples = [{ input: { text: '' }, expect: { words: 0, top: [] } }];
    const regress = await fx.smith.propose(broken, { persona: 'agent' });
    if (!regress.ok) throw new Error(regress.message);
    expect(regress.proposal.state).toBe('failed');
    expect(regress.proposal.validation?.summary).toMatch(/regression: example 1 of the active version/);
    // A good version 2 answers the examples alike and marks a top of 10 or more: it replaces version 1.
    const v2 = wordCount({
      impl: String(wordCount().impl).replace(
        '"top": [k for k, _ in top]}',
        '"top": [k for k, _ in top], **({"v": 2} if a.get("top", 0) >= 10 else {})}',
      ),
    });
    const two = await fx.smith.propose(v2, { persona: 'agent' });
    if (!two.ok) throw new Error(two.message);
    expect(two.proposal).toMatchObject({ state: 'validated', replaces: { proposal: one.proposal.id } });
    const review = await fx.smith.show(two.proposal.id);
    expect(review.ok && review.impl_diff).toMatch(/^\+ .*"v": 2/m);
    const a2 = await fx.smith.approve(two.proposal.id, { by: 'bob' });
    if (!a2.ok) throw new Error(a2.message);
    expect(await fx.forge.callTool('text.word_count', { text: 'a', top: 10 })).toMatchObject({ data: { v: 2 } });
    expect((await fx.smith.get(one.proposal.id))?.state).toBe('retired');

    const back = await fx.smith.rollback('text.word_count', { by: 'alice' });
    if (!back.ok) throw new Error(back.message);
    expect(back.proposal.id).toBe(one.proposal.id);
    const env = await fx.forge.callTool('text.word_count', { text: 'a', top: 10 });
    expect(env).toMatchObject({ ok: true, data: { words: 1 } });
    expect(env.ok && (env.data as Record<string, unknown>).v).toBeUndefined();

    const gone = await fx.smith.retire('text.word_count', { by: 'alice', reason: 'not needed' });
    if (!gone.ok) throw new Error(gone.message);
    expect(await fx.forge.listTools()).toEqual([]);
    expect(await fx.forge.callTool('text.word_count', { text: 'a' })).toMatchObject({ ok: false, error: { kind: 'unknown_tool' } });
    const story = fx
      .audit()
      .map((e) => e.type)
      .filter((t) => t.startsWith('toolsmith.') && t !== 'toolsmith.trial_run');
    expect(story).toEqual([
      'toolsmith.proposed',
      'toolsmith.validated',
      'toolsmith.approved',
      'toolsmith.activated',
      'toolsmith.proposed',
      'toolsmith.validation_failed',
      'toolsmith.proposed',
      'toolsmith.validated',
      'toolsmith.approved',
      'toolsmith.activated',
      'toolsmith.rolled_back',
      'toolsmith.retired',
      // The call of the retired tool: an unknown tool now, so a gap.
      'toolsmith.gap_recorded',
    ]);
  });

  it('the kill switch stops proposing, approving, cycling and recording at once, without a restart', async () => {
    const fx = await setup();
    const r = await fx.smith.propose(wordCount(), { persona: 'agent' });
    if (!r.ok) throw new Error(r.message);
    fx.policy({ toolsmith: { ...GOVERNED.toolsmith, paused: true } });
    const paused = { ok: false, kind: 'policy_denied', message: expect.stringMatching(/paused.*toolsmith\.paused is true/) };
    expect(await fx.smith.approve(r.proposal.id, { by: 'alice' })).toMatchObject(paused);
    expect(await fx.smith.propose(wordCount(), { persona: 'agent' })).toMatchObject(paused);
    expect(await fx.smith.cycle()).toMatchObject(paused);
    await fx.forge.callTool('text.other', {}, { persona: 'agent' });
    await fx.smith.gaps.flush();
    expect(fx.smith.gaps.records()).toEqual([]);
    expect(fx.audit().filter((e) => e.type === 'toolsmith.paused')).toHaveLength(1);
    // Governed personas still may not forge directly.
    expect(
      await fx.forge.forgeTool(
        { name: 'text.x', description: 'x', input_schema: { type: 'object' }, impl: 'print(1)', runtime: 'python3' },
        { persona: 'agent' },
      ),
    ).toMatchObject({ ok: false, kind: 'policy_denied' });
    fx.policy(GOVERNED);
    const ok = await fx.smith.approve(r.proposal.id, { by: 'alice' });
    expect(ok).toMatchObject({ ok: true });
  });

  it('a policy file that fails to reload pauses the toolsmith (fail-safe)', async () => {
    const fx = await setup();
    const { writeFileSync, renameSync } = await import('node:fs');
    const file = `${fx.project}/.forge/policy.json`;
    writeFileSync(`${file}.tmp`, '{"toolsmith": {"enabled": tru');
    renameSync(`${file}.tmp`, file);
    // The engine reads the policy once per turn of the event loop: the next step is a later turn.
    await policyLookForgotten();
    expect(await fx.smith.propose(wordCount(), { persona: 'agent' })).toMatchObject({
      ok: false,
      kind: 'policy_denied',
      message: expect.stringMatching(/failed to reload, so the toolsmith is paused/),
    });
  });
});

describe('what is approved is what was validated', () => {
  it('a proposal file edited after validation is refused at approval, and nothing goes live', async () => {
    const fx = await setup();
    const r = await fx.smith.propose(wordCount(), { persona: 'agent' });
    if (!r.ok) throw new Error(r.message);
    const { readFileSync, writeFileSync } = await import('node:fs');
    const file = `${fx.project}/.forge/toolsmith/proposals/${r.proposal.id}.json`;
    const doc = JSON.parse(readFileSync(file, 'utf8'));
    doc.spec.impl = 'import os\nos.system("echo pwned")';
    writeFileSync(file, JSON.stringify(doc));
    const a = await fx.smith.approve(r.proposal.id, { by: 'alice' });
    expect(a).toMatchObject({ ok: false, kind: 'state_conflict', message: expect.stringMatching(/spec is not the one validated/) });
    expect(await fx.forge.listTools()).toEqual([]);
    expect(fx.audit().filter((e) => e.type === 'forge.created')).toEqual([]);
  });

  it('a session proposes at most per_session_forge_count tools', async () => {
    const fx = await setup({ ...GOVERNED, breakers: { per_session_forge_count: 1 } });
    const bad = wordCount({ examples: [{ input: { text: 'a' }, expect: { words: 9 } }] });
    const first = await fx.smith.propose(bad, { persona: 'agent', session: 's1' });
    expect(first).toMatchObject({ ok: true, proposal: { state: 'failed' } });
    expect(await fx.smith.propose(bad, { persona: 'agent', session: 's1' })).toMatchObject({ ok: false, kind: 'breaker_open' });
    expect(await fx.smith.propose(bad, { persona: 'agent', session: 's2' })).toMatchObject({ ok: true });
  });
});

describe('a damaged proposal file', () => {
  it('cut in half, not JSON or of the wrong shape: skipped with a warning naming it, refused by name, and nothing else is lost', async () => {
    const fx = await setup();
    const warnings: string[] = [];
    const smith = createToolsmith({ forge: fx.forge, onWarning: (m) => warnings.push(m) });
    onTestFinished(() => smith.close());
    const a = await smith.propose(wordCount(), { persona: 'agent' });
    const b = await smith.propose(wordCount({ capability: 'text.word_tally' }), { persona: 'agent' });
    if (!a.ok || !b.ok) throw new Error('propose failed');
    const dir = join(fx.project, '.forge', 'toolsmith', 'proposals');
    const file = join(dir, `${a.proposal.id}.json`);
    const good = readFileSync(file, 'utf8');
    const damages: [string, string, RegExp][] = [
      ['cut in half', good.slice(0, Math.floor(good.length / 2)), /not valid JSON \(a torn or hand-edited file\?\)/],
      ['not JSON', 'a proposal, once\n', /not valid JSON/],
      ['wrong shape', JSON.stringify({ ...JSON.parse(good), state: 'approved' }), /"state" "approved" is not one of/],
    ];
    for (const [what, text, reason] of damages) {
      writeFileSync(file, text);
      warnings.length = 0;
      // Listing skips it, and says so: never an empty answer in silence.
      expect(
        (await smith.list()).map((p) => p.id),
        what,
      ).toEqual([b.proposal.id]);
      expect(warnings, what).toEqual([
        expect.stringMatching(new RegExp(`^${file.replaceAll('.', '\\.')}: [\\s\\S]*; it is skipped \\(restore it`)),
      ]);
      expect(warnings[0], what).toMatch(reason);
      // Every step on it names the file and what to do, and does nothing.
      for (const r of [
        await smith.approve(a.proposal.id, { by: 'alice' }),
        await smith.reject(a.proposal.id, { by: 'alice', reason: 'no' }),
        await smith.show(a.proposal.id),
      ]) {
        expect(r, what).toMatchObject({ ok: false, kind: 'unknown_proposal' });
        expect(!r.ok && r.message, what).toContain(`proposal "${a.proposal.id}" cannot be read, so nothing was done: ${file}: `);
        expect(!r.ok && r.message, what).toMatch(reason);
        expect(!r.ok && r.message, what).toContain('restore the file from a copy');
      }
      expect(readFileSync(file, 'utf8'), what).toBe(text);
      expect(existsSync(join(dir, `${a.proposal.id}.claim`)), what).toBe(false);
    }
    // A missing proposal is still just missing.
    expect(await smith.show('p-0000000000000000')).toMatchObject({ message: expect.stringMatching(/^no proposal "p-0000000000000000"/) });
    // Restored, the proposal is whole again; the other one was never touched.
    writeFileSync(file, good);
    expect((await smith.list()).map((p) => p.id).sort()).toEqual([a.proposal.id, b.proposal.id].sort());
    expect(await smith.approve(b.proposal.id, { by: 'alice' })).toMatchObject({ ok: true });
    expect(await smith.approve(a.proposal.id, { by: 'bob' })).toMatchObject({ ok: true });
    expect((await fx.forge.listTools()).map((t) => t.tool.name).sort()).toEqual(['text.word_count', 'text.word_tally']);
  });
});

describe('reject', () => {
  it('needs a listed approver and a reason; a rejection and an approval racing give exactly one decision', async () => {
    const fx = await setup();
    const r = await fx.smith.propose(wordCount(), { persona: 'agent' });
    if (!r.ok) throw new Error(r.message);
    expect(await fx.smith.reject(r.proposal.id, { by: 'mallory', reason: 'no' })).toMatchObject({ ok: false, kind: 'policy_denied' });
    expect(await fx.smith.reject(r.proposal.id, { by: 'bob', reason: ' ' })).toMatchObject({ ok: false, kind: 'validation_failed' });
    const [a, b] = await Promise.all([
      fx.smith.approve(r.proposal.id, { by: 'alice' }),
      fx.smith.reject(r.proposal.id, { by: 'bob', reason: 'duplicate of text.count' }),
    ]);
    expect([a.ok, b.ok].filter(Boolean)).toHaveLength(1);
    const final = await fx.smith.get(r.proposal.id);
    const live = await fx.forge.listTools();
    if (a.ok) expect([final?.state, live.length]).toEqual(['active', 1]);
    else expect([final?.state, live.length, final?.history.at(-1)?.reason]).toEqual(['rejected', 0, 'duplicate of text.count']);
  });
});

describe('taking capability away works while paused or off; nobody approves their own', () => {
  it('retire and reject go through with the kill switch set and with the toolsmith off; self-approval is refused', async () => {
    const fx = await setup({ ...GOVERNED, toolsmith: { ...GOVERNED.toolsmith, approvers: ['alice', 'agent'] } });
    const live = await fx.smith.propose(wordCount(), { persona: 'agent' });
    const other = await fx.smith.propose(wordCount({ capability: 'text.other' }), { persona: 'agent' });
    if (!live.ok || !other.ok) throw new Error('propose failed');
    expect(await fx.smith.approve(live.proposal.id, { by: 'agent' })).toMatchObject({
      ok: false,
      kind: 'policy_denied',
      message: expect.stringMatching(/"agent" proposed .* and may not approve it/),
    });
    expect(await fx.smith.approve(live.proposal.id, { by: 'alice' })).toMatchObject({ ok: true });
    fx.policy({ toolsmith: { ...GOVERNED.toolsmith, approvers: ['alice', 'agent'], paused: true } });
    await policyLookForgotten();
    expect(await fx.smith.retire('text.word_count', { by: 'alice' })).toMatchObject({ ok: true, tool: { state: 'retired' } });
    fx.policy({ toolsmith: { approvers: ['alice'] } });
    await policyLookForgotten();
    expect(await fx.smith.reject(other.proposal.id, { by: 'alice', reason: 'not now' })).toMatchObject({
      ok: true,
      proposal: { state: 'rejected' },
    });
    expect(await fx.forge.listTools()).toEqual([]);
  });
});

describe('a proposal that names its gap', () => {
  it('is filed under the gap as the store keys it, so its review shows the gap history', async () => {
    const fx = await setup();
    await fx.forge.callTool('text__word_count', { text: 'x' }, { persona: 'agent' });
    await fx.smith.gaps.flush();
    const { capability: _c, ...rest } = wordCount();
    const r = await fx.smith.propose({ ...rest, gap: 'missing_tool:Text.Word_Count' }, { persona: 'agent' });
    if (!r.ok) throw new Error(r.message);
    expect(r.proposal).toMatchObject({ name: 'text.word_count', gap: { kind: 'missing_tool', signature: 'text.word_count' } });
    const review = await fx.smith.show(r.proposal.id);
    expect(review.ok && review.gap_history.map((g) => g.source)).toEqual(['unknown_tool']);
  });
});

describe('an unusable store', () => {
  it('is a refusal that names the directory, not an exception', async () => {
    const fx = await setup();
    const { writeFileSync } = await import('node:fs');
    const { createToolsmith } = await import('../src/index.js');
    writeFileSync(`${fx.root}/not-a-dir`, 'x');
    const smith = createToolsmith({ forge: fx.forge, dir: `${fx.root}/not-a-dir/toolsmith`, onWarning: () => {} });
    try {
      const r = await smith.propose(wordCount(), { persona: 'agent' });
      expect(r).toMatchObject({ ok: false, kind: 'internal', message: expect.stringMatching(/could not propose: .*not-a-dir/) });
    } finally {
      await smith.close();
    }
  });
});
