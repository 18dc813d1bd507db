/**
 * Hardening of issue 13: names match regardless of case (forbidden names, namespaces), who may
 * remove or promote a tool, globs that cannot backtrack, and bounded policy files.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  checkNamespace,
  checkPersonaAcl,
  checkToolName,
  checkToolOwner,
  createPolicy,
  isOperator,
  mergePolicies,
  POLICY_LIMITS,
  type PolicyEvent,
  parsePolicyDocument,
  parseRules,
  parseToolAcl,
} from '../src/index.js';
import { denied, snapshotOf, tempDir } from './helpers.js';

const OK = { ok: true };

describe('forbidden names match regardless of case', () => {
  const snap = snapshotOf({ forbidden_tool_names: ['deploy_*', 'sys.exec', 'sh?ll'] });

  it('refuses every case variant of a glob and of an exact name, saying it matched regardless of case', () => {
    expect(denied(checkToolName(snap, 'DEPLOY_prod'), 'name_forbidden')).toMatchInlineSnapshot(
      `"tool name "DEPLOY_prod" matches the forbidden pattern "deploy_*" (policy forbidden_tool_names, matched regardless of case); choose another name"`,
    );
    for (const name of ['Deploy_x', 'dEpLoY_', 'SYS.EXEC', 'Sys.Exec', 'SHELL', 'ShAll', 'Forge_list', 'FORGE_TOOL']) {
      expect(checkToolName(snap, name), name).toMatchObject({ ok: false, kind: 'name_forbidden' });
    }
    // Exactly as written: the message is the one it always was.
    expect(denied(checkToolName(snap, 'deploy_prod'), 'name_forbidden')).not.toContain('regardless');
    for (const name of ['deploy', 'sysXexec', 'shel']) expect(checkToolName(snap, name), name).toEqual(OK);
    // FORGE_ALLOWED_TOOLS stays exact: an allow-list is not widened by case.
    const acl = parseToolAcl('code.*');
    expect(checkPersonaAcl(acl, 'coder', 'code.fib')).toEqual(OK);
    expect(checkPersonaAcl(acl, 'coder', 'CODE.fib')).toMatchObject({ ok: false, kind: 'acl.persona_denied' });
  });

  it('an upper-case pattern refuses the lower-case name too', () => {
    const s = snapshotOf({ forbidden_tool_names: ['PROD.*'] });
    expect(checkToolName(s, 'prod.db')).toMatchObject({ ok: false, kind: 'name_forbidden' });
  });
});

describe('globs cannot backtrack', () => {
  it('decides a many-star glob against a long near miss (a regular expression would take hours)', () => {
    const s = snapshotOf({ forbidden_tool_names: ['*a*a*a*a*a*a*a*a*a*a*a*a*b'] });
    expect(checkToolName(s, 'a'.repeat(63))).toEqual(OK);
    expect(checkToolName(s, `${'a'.repeat(62)}b`)).toMatchObject({ ok: false, kind: 'name_forbidden' });
    const acl = parseToolAcl('*x*x*x*x*x*x*x*x*x*x*x*x*y');
    expect(checkPersonaAcl(acl, 'p', 'x'.repeat(64)).ok).toBe(false);
    // The glob language is unchanged: * any run (empty too), ? exactly one, the rest literal.
    const g = snapshotOf({ forbidden_tool_names: ['a*b?c', '*.x', 'q**'] });
    for (const name of ['abzc', 'aXbYc', 'a.b.bzc', 'm.x', 'q', 'qqq']) expect(checkToolName(g, name).ok, name).toBe(false);
    for (const name of ['abc', 'ab', 'abzzc', 'x', 'mx', 'aq']) expect(checkToolName(g, name), name).toEqual(OK);
  });
});

describe('persona namespaces match regardless of case', () => {
  const snap = snapshotOf({ persona_namespaces: { coder: 'code', reviewer: 'Review.tools' } });

  it('keeps a persona out of another namespace in any case', () => {
    expect(denied(checkNamespace(snap, 'writer', 'CODE.tool'), 'namespace_denied')).toMatchInlineSnapshot(
      `""CODE.tool" is in the namespace of persona "coder" (code.*), and persona "writer" may not forge there; choose a name outside it"`,
    );
    for (const name of ['Code.fib', 'review.tools.x', 'REVIEW.TOOLS.x']) {
      expect(checkNamespace(snap, 'writer', name), name).toMatchObject({ ok: false, kind: 'namespace_denied' });
    }
    expect(checkNamespace(snap, 'coder', 'review.TOOLS.lint')).toMatchObject({ ok: false, kind: 'namespace_denied' });
  });

  it('lets a persona use its own namespace in any case', () => {
    expect(checkNamespace(snap, 'coder', 'CODE.fib')).toEqual(OK);
    expect(checkNamespace(snap, 'reviewer', 'review.tools.lint')).toEqual(OK);
  });
});

describe('who may remove, promote or replace a tool', () => {
  const snap = snapshotOf({ persona_namespaces: { coder: 'code' }, operator_personas: ['ops'] });

  it('a tool under a namespace belongs to it: another persona is refused namespace_denied, naming the action', () => {
    expect(
      denied(checkToolOwner(snap, 'eve', { name: 'code.tool', creator: 'coder' }, 'remove'), 'namespace_denied'),
    ).toMatchInlineSnapshot(
      `""code.tool" is in the namespace of persona "coder" (code.*), and persona "eve" may not remove tools there; ask persona "coder" or an operator (policy operator_personas)"`,
    );
    expect(denied(checkToolOwner(snap, 'eve', { name: 'CODE.tool', creator: 'eve' }, 'promote'), 'namespace_denied')).toContain(
      'may not promote tools there',
    );
    expect(checkToolOwner(snap, 'coder', { name: 'code.tool', creator: 'someone' }, 'remove')).toEqual(OK);
  });

  it('a persona with a namespace may not touch tools outside it', () => {
    expect(denied(checkToolOwner(snap, 'coder', { name: 'greet', creator: 'coder' }, 'remove'), 'namespace_denied')).toMatchInlineSnapshot(
      `"persona "coder" may only remove tools named code.<name> (policy persona_namespaces), and "greet" is not one; ask its owner or an operator (policy operator_personas)"`,
    );
  });

  it('a tool outside every namespace belongs to the persona that forged it', () => {
    expect(checkToolOwner(snap, 'eve', { name: 'greet', creator: 'eve' }, 'remove')).toEqual(OK);
    expect(denied(checkToolOwner(snap, 'eve', { name: 'greet', creator: 'bob' }, 'remove'), 'acl.persona_denied')).toMatchInlineSnapshot(
      `"persona "eve" may not remove "greet": it was forged by persona "bob", and a tool outside every namespace can be removed only by the persona that forged it or an operator persona (policy operator_personas)"`,
    );
    expect(denied(checkToolOwner(snap, 'eve', { name: 'greet', creator: 'bob' }, 'forge'), 'acl.persona_denied')).toContain(
      'can be replaced only by',
    );
    expect(denied(checkToolOwner(snap, 'eve', { name: 'greet', creator: undefined }, 'promote'), 'acl.persona_denied')).toContain(
      'does not say who forged it',
    );
  });

  it('an operator persona may manage any tool; operators are listed by exact persona name', () => {
    expect(isOperator(snap, 'ops')).toBe(true);
    expect(isOperator(snap, 'OPS')).toBe(false);
    expect(isOperator(snap, 'constructor')).toBe(false);
    expect(checkToolOwner(snap, 'ops', { name: 'code.tool', creator: 'coder' }, 'remove')).toEqual(OK);
    expect(checkToolOwner(snap, 'ops', { name: 'greet', creator: undefined }, 'promote')).toEqual(OK);
    expect(checkToolOwner(snapshotOf(), 'ops', { name: 'greet', creator: 'bob' }, 'remove').ok).toBe(false);
  });

  it('operator_personas is merged as a union and validated as persona names', () => {
    expect(mergePolicies({ operator_personas: ['a'] }, { operator_personas: ['b', 'a'] }).operator_personas).toEqual(['a', 'b']);
    const r = parsePolicyDocument('{"operator_personas": ["ok", "1bad"]}', 'policy.json');
    expect(r.ok ? '' : r.problem.message).toMatchInlineSnapshot(
      `"policy.json:1:30: operator_personas[1] must be a persona name: a letter, then letters, digits, _ or - (at most 64) (got "1bad")"`,
    );
  });
});

describe('policy files are bounded', () => {
  it('refuses more entries than a list allows, at the list', () => {
    const names = Array.from({ length: 1001 }, (_, i) => `t${i}`);
    const r = parsePolicyDocument(`{\n  "forbidden_tool_names": ${JSON.stringify(names)}\n}`, 'policy.json');
    expect(r.ok ? '' : r.problem.message).toMatchInlineSnapshot(
      `"policy.json:2:27: forbidden_tool_names has 1001 entries, more than the limit of 1000; a policy this large is almost certainly generated by mistake: trim it"`,
    );
    const personas = Object.fromEntries(Array.from({ length: 1001 }, (_, i) => [`p${i}`, `n${i}`]));
    const p = parsePolicyDocument(JSON.stringify({ persona_namespaces: personas }), 'policy.json');
    expect(p.ok ? '' : p.problem.reason).toContain('persona_namespaces has 1001 entries, more than the limit of 1000');
    expect(parsePolicyDocument(JSON.stringify({ forbidden_tool_names: names.slice(0, 1000) }), 'policy.json').ok).toBe(true);
  });

  it('refuses a rules file with more rules than the limit, at the first rule past it', () => {
    const line = 'allow coder_t tool:fib execute\n';
    const text = `# generated\n${line.repeat(POLICY_LIMITS.rules + 1)}`;
    const r = parseRules(text, 'policy.rules');
    expect(r.ok ? '' : r.problem.message).toBe(
      `policy.rules:${POLICY_LIMITS.rules + 2}: more than ${POLICY_LIMITS.rules} rules, the limit of a rules file; a file this large is almost certainly generated by mistake: trim it`,
    );
    expect(parseRules(line.repeat(POLICY_LIMITS.rules), 'policy.rules').ok).toBe(true);
  });

  it('refuses a 41 MB policy.json that is otherwise valid, by its size, without parsing it', async () => {
    const dir = await tempDir();
    const file = join(dir, 'policy.json');
    // Valid JSON and a valid policy, padded: only the size is wrong.
    const text = `{"breakers": {"per_tool_rpm": 7}${' '.repeat(41_000_000)}}`;
    writeFileSync(file, text);
    const events: PolicyEvent[] = [];
    const state = createPolicy({ workspaceFile: file, onEvent: (e) => events.push(e) }).current();
    expect(state).toEqual({
      ok: false,
      kind: 'policy_denied',
      message: `no policy is in force, so nothing runs: ${file}: size ${text.length} bytes exceeds the limit of 1048576 bytes (1 MiB) for a policy file (real ones are a few kilobytes); check that this is the right file, or trim it. Fix the file; it is reread at the next call`,
    });
    expect(events).toEqual([
      {
        type: 'policy.reload_failed',
        file,
        reason: expect.stringMatching(/^size 41000033 bytes exceeds the limit/),
        message: expect.stringContaining(`${file}: size 41000033 bytes`),
        kept: 'nothing',
      },
    ]);
  });

  it('keeps the last good policy when a reload meets an oversized file, and reports it once', async () => {
    const dir = await tempDir();
    const file = join(dir, 'policy.json');
    const rules = join(dir, 'policy.rules');
    writeFileSync(file, '{"breakers": {"per_tool_rpm": 7}}');
    writeFileSync(rules, 'allow coder_t tool:fib execute\n');
    const events: PolicyEvent[] = [];
    const policy = createPolicy({ workspaceFile: file, rulesFile: rules, onEvent: (e) => events.push(e) });
    const before = policy.current();
    if (!before.ok) throw new Error(before.message);

    writeFileSync(file, `{"breakers": {"per_tool_rpm": 9}}${' '.repeat(POLICY_LIMITS.policyFileBytes)}`);
    writeFileSync(rules, `allow coder_t tool:fib execute\n${'#'.repeat(POLICY_LIMITS.rulesFileBytes)}\n`);
    const after = policy.current();
    if (!after.ok) throw new Error(after.message);
    expect(after.snapshot.policy.breakers.per_tool_rpm).toBe(7);
    expect(after.snapshot.rules?.size).toBe(1);
    expect(after.snapshot.sources.map((s) => s.status)).toEqual(['kept', 'kept']);
    const failed = events.filter((e) => e.type === 'policy.reload_failed');
    expect(failed).toEqual([
      expect.objectContaining({ file, kept: 'last_good', reason: expect.stringContaining('exceeds the limit of 1048576 bytes (1 MiB)') }),
      expect.objectContaining({
        file: rules,
        kept: 'last_good',
        reason: expect.stringContaining('exceeds the limit of 4194304 bytes (4 MiB) for a rules file'),
      }),
    ]);
    // Asked again: the same files, the same answer, nothing reported twice.
    expect(policy.current()).toEqual(after);
    expect(events.filter((e) => e.type === 'policy.reload_failed')).toHaveLength(2);

    writeFileSync(file, '{"breakers": {"per_tool_rpm": 9}}');
    const fixed = policy.current();
    expect(fixed.ok && fixed.snapshot.policy.breakers.per_tool_rpm).toBe(9);
  });

  it('a file of exactly the limit is read', async () => {
    const dir = await tempDir();
    const file = join(dir, 'policy.json');
    const head = '{"breakers": {"per_tool_rpm": 3}}';
    writeFileSync(file, head + ' '.repeat(POLICY_LIMITS.policyFileBytes - head.length));
    const s = createPolicy({ workspaceFile: file }).current();
    expect(s.ok && s.snapshot.policy.breakers.per_tool_rpm).toBe(3);
  });
});
