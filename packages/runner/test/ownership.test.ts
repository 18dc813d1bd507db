/**
 * Remove, promote and replace pass the gates of forging and need the tool to be the persona's
 * (its namespace, its creator, or an operator); names compare regardless of case.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { failed, py, setup, writeAtomic } from './helpers.js';

const says = (word: string, name: string) => py(name, `print(json.dumps({"ok": True, "data": ${JSON.stringify(word)}}))`);

const POLICY = { persona_namespaces: { coder: 'code' }, operator_personas: ['ops'] };
const as = (persona: string) => ({ persona, session: `s-${persona}` });

describe('remove and promote: ownership', () => {
  it('a persona may neither remove nor promote a tool in another persona’s namespace (namespace_denied, audited)', async () => {
    const fx = await setup({ workspacePolicy: POLICY });
    expect(await fx.forge.forgeTool(says('mine', 'code.tool'), as('coder'))).toMatchObject({ ok: true });

    const removed = await fx.forge.removeTool('code.tool', as('eve'));
    expect(removed).toEqual({
      ok: false,
      kind: 'namespace_denied',
      message:
        '"code.tool" is in the namespace of persona "coder" (code.*), and persona "eve" may not remove tools there; ask persona "coder" or an operator (policy operator_personas)',
    });
    const promoted = await fx.forge.promoteTool('code.tool', as('eve'));
    expect(promoted).toMatchObject({
      ok: false,
      kind: 'namespace_denied',
      message: expect.stringContaining('may not promote tools there'),
    });
    // in any case
    expect(await fx.forge.removeTool('CODE.tool', as('eve'))).toMatchObject({ ok: false, kind: 'namespace_denied' });

    expect(fx.entries('tool.namespace_denied').map((e) => [e.data.action, e.data.persona, e.data.name, e.data.kind])).toEqual([
      ['remove', 'eve', 'code.tool', 'namespace_denied'],
      ['promote', 'eve', 'code.tool', 'namespace_denied'],
      ['remove', 'eve', 'CODE.tool', 'namespace_denied'],
    ]);
    expect(fx.entries('forge.removed').filter((e) => e.data.ok)).toEqual([]);
    expect(existsSync(join(fx.project, '.forge', 'tools', 'code.tool.json'))).toBe(true);
    expect(existsSync(join(fx.home, 'tools', 'code.tool.json'))).toBe(false);
    expect((await fx.forge.listTools(as('coder'))).map((t) => t.tool.name)).toEqual(['code.tool']);
  });

  it('a tool outside every namespace is its creator’s: another persona gets acl.persona_denied (audited), the creator may', async () => {
    const fx = await setup({ workspacePolicy: POLICY });
    expect(await fx.forge.forgeTool(says('bob', 'greet'), as('bob'))).toMatchObject({ ok: true });

    expect(await fx.forge.removeTool('greet', as('eve'))).toEqual({
      ok: false,
      kind: 'acl.persona_denied',
      message:
        'persona "eve" may not remove "greet": it was forged by persona "bob", and a tool outside every namespace can be removed only by the persona that forged it or an operator persona (policy operator_personas)',
    });
    expect(await fx.forge.promoteTool('greet', as('eve'))).toMatchObject({ ok: false, kind: 'acl.persona_denied' });
    // nor replace it by forging over it
    expect(await fx.forge.forgeTool(says('eve', 'greet'), { ...as('eve'), overwrite: true })).toMatchObject({
      ok: false,
      kind: 'acl.persona_denied',
      message: expect.stringContaining('can be replaced only by the persona that forged it'),
    });
    expect(fx.entries('acl.persona_denied').map((e) => [e.data.action ?? 'forge', e.data.persona, e.data.name])).toEqual([
      ['remove', 'eve', 'greet'],
      ['promote', 'eve', 'greet'],
      ['forge', 'eve', 'greet'],
    ]);
    expect((await fx.forge.listTools()).map((t) => [t.tool.name, t.tool.version, t.tool.created_by.persona])).toEqual([
      ['greet', 1, 'bob'],
    ]);

    // the creator may do all three
    expect(await fx.forge.forgeTool(says('bob v2', 'greet'), { ...as('bob'), overwrite: true })).toMatchObject({
      ok: true,
      tool: { version: 2 },
    });
    expect(await fx.forge.promoteTool('greet', as('bob'))).toMatchObject({ ok: true, outcome: 'created' });
    expect(await fx.forge.removeTool('greet', { ...as('bob'), scope: 'project' })).toMatchObject({ ok: true });
    // and the user copy it promoted is its own too
    expect(await fx.forge.removeTool('greet', as('eve'))).toMatchObject({ ok: false, kind: 'acl.persona_denied' });
    expect(await fx.forge.removeTool('greet', as('bob'))).toMatchObject({ ok: true, tool: { scope: 'user' } });
  });

  it('the owner of a namespace may remove and promote its tools', async () => {
    const fx = await setup({ workspacePolicy: POLICY });
    expect(await fx.forge.forgeTool(says('mine', 'code.tool'), as('coder'))).toMatchObject({ ok: true });
    expect(await fx.forge.promoteTool('code.tool', as('coder'))).toMatchObject({ ok: true, outcome: 'created' });
    expect(await fx.forge.removeTool('code.tool', as('coder'))).toMatchObject({ ok: true, tool: { scope: 'project' } });
    expect(fx.entries('forge.removed').map((e) => [e.data.ok, e.data.persona])).toEqual([[true, 'coder']]);
  });

  it('an operator persona may remove and promote any tool', async () => {
    const fx = await setup({ workspacePolicy: POLICY });
    expect(await fx.forge.forgeTool(says('mine', 'code.tool'), as('coder'))).toMatchObject({ ok: true });
    expect(await fx.forge.forgeTool(says('bob', 'greet'), as('bob'))).toMatchObject({ ok: true });
    expect(await fx.forge.promoteTool('greet', as('ops'))).toMatchObject({ ok: true, outcome: 'created' });
    expect(await fx.forge.promoteTool('code.tool', as('ops'))).toMatchObject({ ok: true, outcome: 'created' });
    expect(await fx.forge.removeTool('code.tool', { ...as('ops'), scope: 'project' })).toMatchObject({ ok: true });
    expect(await fx.forge.removeTool('greet', { ...as('ops'), scope: 'project' })).toMatchObject({ ok: true });
    expect(fx.entries('forge.promoted').map((e) => [e.data.ok, e.data.persona])).toEqual([
      [true, 'ops'],
      [true, 'ops'],
    ]);
  });

  it('the persona ACL, allow-rules and forbidden names gate remove and promote as they gate forging and calls', async () => {
    const fx = await setup({ workspacePolicy: POLICY });
    expect(await fx.forge.forgeTool(says('bob', 'deploy_x'), as('bob'))).toMatchObject({ ok: true });

    // FORGE_ALLOWED_TOOLS: what a persona may not call, it may not remove either
    const acl = await fx.forge.removeTool('deploy_x', { ...as('bob'), allowedTools: 'other' });
    expect(acl).toMatchObject({ ok: false, kind: 'acl.persona_denied', message: expect.stringContaining('may not remove "deploy_x"') });
    expect(fx.entries('acl.persona_denied').at(-1)?.data).toMatchObject({ action: 'remove', persona: 'bob', name: 'deploy_x' });

    // a policy edit forbids the name: the creator can no longer promote or remove it; an operator may remove it
    writeAtomic(join(fx.project, '.forge', 'policy.json'), JSON.stringify({ ...POLICY, forbidden_tool_names: ['DEPLOY_*'] }));
    expect(await fx.forge.promoteTool('deploy_x', as('bob'))).toMatchObject({ ok: false, kind: 'name_forbidden' });
    expect(await fx.forge.removeTool('deploy_x', as('bob'))).toMatchObject({ ok: false, kind: 'name_forbidden' });
    expect(await fx.forge.promoteTool('deploy_x', as('ops'))).toMatchObject({ ok: false, kind: 'name_forbidden' });
    expect(fx.entries('forge.promoted').map((e) => [e.data.persona, e.data.kind])).toEqual([
      ['bob', 'name_forbidden'],
      ['ops', 'name_forbidden'],
    ]);

    // allow-rules in force: managing a tool needs the rule that lets the persona execute it
    writeAtomic(join(fx.project, '.forge', 'policy.rules'), 'allow bob_t tool:other execute\n');
    expect(await fx.forge.removeTool('deploy_x', as('ops'))).toMatchObject({
      ok: false,
      kind: 'policy_denied',
      message: expect.stringContaining('allow ops_t tool:deploy_x execute'),
    });
    writeAtomic(join(fx.project, '.forge', 'policy.rules'), 'allow ops_t tool:deploy_x execute\n');
    expect(await fx.forge.removeTool('deploy_x', as('ops'))).toMatchObject({ ok: true });
  });

  it('a file no one can read says nothing of its creator: only an operator may remove it', async () => {
    const fx = await setup({ workspacePolicy: POLICY });
    writeAtomic(join(fx.project, '.forge', 'tools', 'broken.json'), '{ not json');
    expect(await fx.forge.removeTool('broken', { ...as('bob'), scope: 'project' })).toMatchObject({
      ok: false,
      kind: 'acl.persona_denied',
      message: expect.stringContaining('does not say who forged it'),
    });
    expect(existsSync(join(fx.project, '.forge', 'tools', 'broken.json'))).toBe(true);
    // Removed, and said so (it was answered unknown_tool before, though the file was gone).
    expect(await fx.forge.removeTool('broken', { ...as('ops'), scope: 'project' })).toMatchObject({
      ok: true,
      damaged: { name: 'broken', scope: 'project' },
    });
    expect(existsSync(join(fx.project, '.forge', 'tools', 'broken.json'))).toBe(false);
  });
});

describe('names compare regardless of case', () => {
  it('refuses CODE.tool beside code.tool, and Greet in a session beside the project’s greet (name_taken, naming the tool)', async () => {
    const fx = await setup({ workspacePolicy: POLICY });
    expect(await fx.forge.forgeTool(says('a', 'code.tool'), as('coder'))).toMatchObject({ ok: true });
    const r = await fx.forge.forgeTool(says('b', 'CODE.tool'), as('coder'));
    expect(r).toEqual({
      ok: false,
      kind: 'name_taken',
      message:
        'tool "CODE.tool" differs only by case from the existing tool "code.tool" (project scope), and names are compared regardless of case; choose another name, or forge "code.tool" with overwrite to replace that tool',
    });
    // another persona is kept out of the namespace in any case
    expect(await fx.forge.forgeTool(says('b', 'CODE.tool'), as('eve'))).toMatchObject({ ok: false, kind: 'namespace_denied' });

    expect(await fx.forge.forgeTool(says('p', 'greet'), as('bob'))).toMatchObject({ ok: true });
    expect(await fx.forge.forgeTool(says('s', 'Greet'), { ...as('bob'), scope: 'session' })).toMatchObject({
      ok: false,
      kind: 'name_taken',
      message: expect.stringContaining('"greet" (project scope)'),
    });
    expect(await fx.forge.forgeTool(says('s', 'greet'), { ...as('bob'), scope: 'session' })).toMatchObject({ ok: true });
    expect(await fx.forge.forgeTool(says('s', 'GREET'), { ...as('bob'), scope: 'project', overwrite: true })).toMatchObject({
      ok: false,
      kind: 'name_taken',
    });
    expect(fx.entries('forge.created').filter((e) => e.data.kind === 'name_taken')).toHaveLength(3);
  });

  it('refuses DEPLOY_prod when deploy_* is forbidden, at forge and at call', async () => {
    const fx = await setup({ workspacePolicy: { forbidden_tool_names: ['deploy_*'] } });
    expect(await fx.forge.forgeTool(says('x', 'DEPLOY_prod'))).toMatchObject({ ok: false, kind: 'name_forbidden' });
    expect(await fx.forge.forgeTool(says('x', 'Forge_list'))).toMatchObject({ ok: false, kind: 'name_forbidden' });
    expect(await fx.forge.forgeTool(says('x', 'Deploy'))).toMatchObject({ ok: true });
    writeAtomic(join(fx.project, '.forge', 'policy.json'), JSON.stringify({ forbidden_tool_names: ['DEPLOY*'] }));
    failed(await fx.forge.callTool('Deploy', {}), 'name_forbidden');
  });
});
