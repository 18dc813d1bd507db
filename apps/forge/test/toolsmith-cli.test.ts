import { beforeAll, describe, expect, it } from 'vitest';
import { requireCliAndSandbox, scratch } from './helpers.js';
import { auditEntries, forge, forgeJson, propose, reverseBlueprint, serveAs, story, V2_IMPL, writePolicy } from './toolsmith-helpers.js';

/**
 * `forge toolsmith …` as an operator meets it: proposals made by the real toolsmith over a temp
 * home and project, reviewed, approved, raced, refused, rolled back and retired by separate CLI
 * processes, with `forge serve` running beside them. Real sandbox, real audit log.
 */

beforeAll(requireCliAndSandbox);

type Row = { id: string; state: string; name: string };

describe('forge toolsmith', () => {
  it('a validated proposal is listed, approved by another process, and reaches the running server as list_changed, callable at once', async () => {
    const s = scratch('forge-toolsmith-cli-');
    writePolicy(s);
    const c = await serveAs(s);
    const before = (await c.client.listTools()).tools.map((t) => t.name);
    expect(before).not.toContain('text__reverse');
    // Governed: the agent proposes; it is not offered forge_tool.
    expect(before).toContain('forge_propose');
    expect(before).not.toContain('forge_tool');

    const p = await propose(c, reverseBlueprint());
    expect(p).toMatchObject({ ok: true, proposal: { state: 'validated', name: 'text.reverse' } });
    const listed = await forgeJson<Row[]>(s, ['toolsmith', 'list']);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.data.map((r) => [r.id, r.state, r.name])).toEqual([[p.proposal.id, 'validated', 'text.reverse']]);
    const human = await forge(s, ['toolsmith', 'list', '--state', 'validated']);
    expect(human.stdout).toMatch(new RegExp(`${p.proposal.id}\\s+validated\\s+text\\.reverse\\s+text\\.reverse\\s+agent`));
    expect(human.stdout).toContain('1 awaiting approval');
    // Not live before approval.
    const early = await c.call('text.reverse', { text: 'abc' });
    expect(early.env).toMatchObject({ ok: false, error: { kind: 'unknown_tool' } });

    const changed = c.nextListChanged(20_000);
    const approved = await forge(s, ['toolsmith', 'approve', p.proposal.id, '--as', 'alice']);
    expect(approved.code, approved.stderr).toBe(0);
    expect(approved.stdout).toMatch(
      new RegExp(`^✓ approved ${p.proposal.id}: text\\.reverse v1 is live \\(sha256:[0-9a-f]{12}…, by alice\\)\\n$`),
    );
    await changed;
    const after = await c.client.listTools();
    expect(after.tools.map((t) => t.name)).toContain('text__reverse');
    const { env } = await c.call('text__reverse', { text: 'hello' });
    expect(env).toMatchObject({ ok: true, data: { reversed: 'olleh' } });
    const active = await forgeJson<Row[]>(s, ['toolsmith', 'list', '--state', 'active']);
    expect(active.data.map((r) => r.id)).toEqual([p.proposal.id]);
  });

  it('only a listed approver other than the proposer approves; two racing approvals give exactly one activation', async () => {
    const s = scratch('forge-toolsmith-cli-');
    writePolicy(s);
    const c = await serveAs(s);
    const p = await propose(c, reverseBlueprint());
    expect(p.proposal.state).toBe('validated');

    const stranger = await forge(s, ['toolsmith', 'approve', p.proposal.id, '--as', 'mallory']);
    expect(stranger.code, stranger.stdout + stranger.stderr).toBe(1);
    expect(stranger.stderr).toBe(`✗ policy_denied: "mallory" may not approve proposals: not in policy toolsmith.approvers (alice, bob)\n`);
    // The identity also comes from FORGE_OPERATOR; the proposing persona is refused even when listed.
    writePolicy(s, { ...GOVERNED_WITH_AGENT });
    const own = await forge(s, ['toolsmith', 'approve', p.proposal.id, '--json'], { FORGE_OPERATOR: 'agent' });
    expect(own.code, own.stdout + own.stderr).toBe(1);
    expect(JSON.parse(own.stdout)).toEqual({
      ok: false,
      kind: 'policy_denied',
      message: `"agent" proposed ${p.proposal.id} and may not approve it; another approver must`,
    });
    const unknown = await forgeJson(s, ['toolsmith', 'approve', 'p-0000000000000000', '--as', 'alice']);
    expect(unknown).toMatchObject({ code: 1, data: { ok: false, kind: 'unknown_proposal' } });
    writePolicy(s);

    const [a, b] = await Promise.all([
      forgeJson(s, ['toolsmith', 'approve', p.proposal.id, '--as', 'alice']),
      forgeJson(s, ['toolsmith', 'approve', p.proposal.id, '--as', 'bob']),
    ]);
    const codes = [a.code, b.code].sort();
    expect(codes, `${a.stderr}${b.stderr}`).toEqual([0, 1]);
    const loser = a.code === 1 ? a : b;
    expect(loser.data).toMatchObject({ ok: false, kind: 'state_conflict' });
    const winner = a.code === 0 ? a : b;
    expect(winner.data).toMatchObject({ ok: true, proposal: { id: p.proposal.id, state: 'active' }, tool: { name: 'text.reverse' } });

    const created = auditEntries(s).filter((e) => e.type === 'forge.created');
    expect(created).toHaveLength(1);
    expect(created[0]?.data.toolsmith).toEqual({
      proposal: p.proposal.id,
      approved_by: (winner.data as { proposal: { activated: { by: string } } }).proposal.activated.by,
    });
    expect(story(s).filter((t) => t === 'toolsmith.activated')).toHaveLength(1);
    const call = await forgeJson(s, ['tools', 'call', 'text.reverse', '{"text":"ab"}']);
    expect(call.data).toMatchObject({ ok: true, data: { reversed: 'ba' } });
  });

  it('a proposal with a wrong example fails validation: show gives the failing check, approve refuses it, reject closes it', async () => {
    const s = scratch('forge-toolsmith-cli-');
    writePolicy(s);
    const c = await serveAs(s);
    const bad = reverseBlueprint({ examples: [{ input: { text: 'abc' }, expect: { reversed: 'abc' } }] });
    const p = await propose(c, bad);
    expect(p.proposal.state).toBe('failed');

    const shown = await forge(s, ['toolsmith', 'show', p.proposal.id]);
    expect(shown.code, shown.stdout + shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(/^p-[0-9a-f]{16} {2}failed$/m);
    expect(shown.stdout).toMatch(/^validation {2}failed {2}\d+ checks, \d+ sandbox runs/m);
    expect(shown.stdout).toMatch(/^ {2}✗ {2}example {8}example 1 {2}[\d.]+ m?s {2}run \S+$/m);
    expect(shown.stdout).toContain('expect {"reversed":"abc"}');
    const review = await forgeJson<{ ok: true; proposal: { validation: { checks: { kind: string; ok: boolean }[] } } }>(s, [
      'toolsmith',
      'show',
      p.proposal.id,
    ]);
    expect(review.data.proposal.validation.checks.find((c) => c.kind === 'example')).toMatchObject({ ok: false });

    const refused = await forgeJson(s, ['toolsmith', 'approve', p.proposal.id, '--as', 'alice']);
    expect(refused).toMatchObject({ code: 1, data: { ok: false, kind: 'state_conflict' } });
    expect((refused.data as { message: string }).message).toMatch(/is failed, not validated; .* \(it failed: example 1/);
    const human = await forge(s, ['toolsmith', 'approve', p.proposal.id, '--as', 'alice']);
    expect(human.code, human.stdout + human.stderr).toBe(1);
    expect(human.stderr).toMatch(/^✗ state_conflict: proposal p-[0-9a-f]{16} is failed, not validated/);

    const noReason = await forge(s, ['toolsmith', 'reject', p.proposal.id, '--as', 'alice']);
    expect(noReason.code, noReason.stdout + noReason.stderr).toBe(2);
    expect(noReason.stderr).toContain('usage: forge toolsmith reject <id> --reason TEXT [--as NAME]');
    const rejected = await forge(s, ['toolsmith', 'reject', p.proposal.id, '--as', 'bob', '--reason', 'wrong example']);
    expect(rejected.code, rejected.stderr).toBe(0);
    expect(rejected.stdout).toBe(`✓ rejected ${p.proposal.id} (text.reverse): wrong example\n`);
    const listed = await forgeJson<Row[]>(s, ['toolsmith', 'list']);
    expect(listed.data.map((r) => r.state)).toEqual(['rejected']);
    expect(story(s)).toEqual(['toolsmith.proposed', 'toolsmith.validation_failed', 'toolsmith.rejected']);
  });

  it('a new version is reviewed with its diff, rollback brings the previous answer back, retire hides and refuses; the audit log verifies and tells the story', async () => {
    const s = scratch('forge-toolsmith-cli-');
    writePolicy(s);
    const c = await serveAs(s);
    const one = await propose(c, reverseBlueprint());
    // The server learns of another process's approval from its watch: v2 is proposed once it has
    // (a proposal made against a view without v1 says it replaces nothing, and its approval is refused).
    const live = c.nextListChanged(20_000);
    expect((await forge(s, ['toolsmith', 'approve', one.proposal.id, '--as', 'alice'])).code).toBe(0);
    await live;
    const broken = await propose(c, reverseBlueprint({ examples: [{ input: { text: 'x' }, expect: { reversed: 'y' } }] }));
    expect(broken.proposal.state).toBe('failed');
    const two = await propose(c, reverseBlueprint({ impl: V2_IMPL }));
    expect(two.proposal.state).toBe('validated');

    const shown = await forge(s, ['toolsmith', 'show', two.proposal.id]);
    expect(shown.stdout).toMatch(/^replaces {4}v1 sha256:[0-9a-f]{12}… \(p-[0-9a-f]{16}\)$/m);
    expect(shown.stdout).toContain('impl diff against the live v1 (- live, + proposed)');
    expect(shown.stdout).toContain(`- print(json.dumps({"ok": True, "data": {"reversed": a["text"][::-1]}}))`);
    expect(shown.stdout).toContain(
      `+ print(json.dumps({"ok": True, "data": {"reversed": "v2" if a["text"] == "which" else a["text"][::-1]}}))`,
    );
    expect(shown.stdout).toMatch(/^validation {2}passed/m);
    const review = await forgeJson<{ impl_diff: string; active: { version: number; proposal: string } }>(s, [
      'toolsmith',
      'show',
      two.proposal.id,
    ]);
    expect(review.data.active).toMatchObject({ version: 1, proposal: one.proposal.id });
    expect(review.data.impl_diff).toMatch(/^\+ .*"v2"/m);

    expect((await forge(s, ['toolsmith', 'approve', two.proposal.id, '--as', 'bob'])).code).toBe(0);
    expect((await forgeJson(s, ['tools', 'call', 'text.reverse', '{"text":"which"}'])).data).toMatchObject({ data: { reversed: 'v2' } });

    const back = await forge(s, ['toolsmith', 'rollback', 'text.reverse', '--as', 'alice']);
    expect(back.code, back.stderr).toBe(0);
    expect(back.stdout).toMatch(
      new RegExp(`^✓ rolled text\\.reverse back to ${one.proposal.id}: live as v\\d+ \\(${two.proposal.id} retired\\)\\n$`),
    );
    expect((await forgeJson(s, ['tools', 'call', 'text.reverse', '{"text":"which"}'])).data).toMatchObject({ data: { reversed: 'hcihw' } });

    const retired = await forgeJson(s, ['toolsmith', 'retire', 'text.reverse', '--as', 'alice', '--reason', 'not needed']);
    expect(retired).toMatchObject({
      code: 0,
      data: { ok: true, tool: { name: 'text.reverse', state: 'retired' }, proposal: { id: one.proposal.id, state: 'retired' } },
    });
    const tools = await forgeJson<{ name: string }[]>(s, ['tools', 'list']);
    expect(tools.data.map((t) => t.name)).not.toContain('text.reverse');
    const gone = await forgeJson(s, ['tools', 'call', 'text.reverse', '{"text":"which"}']);
    expect(gone).toMatchObject({ code: 1, data: { ok: false, error: { kind: 'unknown_tool' } } });
    const again = await forgeJson(s, ['toolsmith', 'retire', 'text.reverse', '--as', 'alice']);
    expect(again).toMatchObject({ code: 1, data: { ok: false, kind: 'unknown_tool' } });

    const verified = await forge(s, ['audit', 'verify']);
    expect(verified.code, verified.stdout).toBe(0);
    expect(story(s).filter((t) => t !== 'toolsmith.gap_recorded')).toEqual([
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
    ]);
  });

  it('gaps and cycle: unknown tool calls recur until the gap qualifies and the cycle reports it wanted', async () => {
    const s = scratch('forge-toolsmith-cli-');
    writePolicy(s);
    const first = await forgeJson(s, ['tools', 'call', 'text.shout', '{}']);
    expect((first.data as { error: { message: string } }).error.message).toMatch(/the toolsmith noted the request \(1 of 2 in 24 h/);
    await forge(s, ['tools', 'call', 'text.shout', '{}']);
    const gaps = await forgeJson<{ signature: string; count: number; qualifies: boolean }[]>(s, ['toolsmith', 'gaps']);
    expect(gaps.data.map((g) => [g.signature, g.count, g.qualifies])).toEqual([['text.shout', 2, true]]);
    const human = await forge(s, ['toolsmith', 'gaps']);
    expect(human.stdout).toMatch(/^text\.shout +missing_tool +2 +2 +\S+ +default +qualifies$/m);
    const cycle = await forgeJson<{ wanted: { signature: string }[]; awaiting_approval: number }>(s, ['toolsmith', 'cycle']);
    expect(cycle.code, cycle.stderr).toBe(0);
    expect(cycle.data.wanted.map((w) => w.signature)).toEqual(['text.shout']);
    const line = await forge(s, ['toolsmith', 'cycle']);
    expect(line.stdout).toMatch(
      /^✓ cycle at \S+: 1 wanted, 0 service absent, 0 awaiting approval\n {2}wanted +text\.shout +2 in window\n$/,
    );
    const doctor = await forge(s, ['doctor']);
    expect(doctor.stdout).toMatch(
      /^✓ toolsmith +on; governed: \*; capabilities text\.\*; approvers alice, bob; 0 proposal\(s\) awaiting approval$/m,
    );
  });
});

/** GOVERNED with the proposing persona listed as an approver too (it still may not approve its own). */
const GOVERNED_WITH_AGENT = {
  enabled: true,
  mode: { '*': 'governed' },
  capability_allow: ['text.*'],
  approvers: ['alice', 'bob', 'agent'],
  gap_recurrence_threshold: 2,
};
