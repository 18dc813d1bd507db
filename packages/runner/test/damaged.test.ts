/** A damaged tool file: listed as damaged, refused as `tool_damaged`, removable by who may remove it, never run. */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { example, failed, setup } from './helpers.js';

const POLICY = { persona_namespaces: { coder: 'code' }, operator_personas: ['ops'] };

/** Cuts a tool file in half, as a full disk or a foreign writer would leave it. */
function cutInHalf(path: string): void {
  const text = readFileSync(path, 'utf8');
  writeFileSync(path, text.slice(0, Math.floor(text.length / 2)));
}

describe('a damaged tool file', () => {
  it('is listed as damaged, not as a tool; a call by forge or wire name is refused tool_damaged, audited, and nothing runs', async () => {
    const fx = await setup({ userPolicy: POLICY });
    const made = await fx.forge.forgeTool({ ...(await example('fib')), name: 'code.fib' }, { persona: 'coder' });
    if (!made.ok) throw new Error(made.message);
    const path = join(fx.project, '.forge', 'tools', 'code.fib.json');
    cutInHalf(path);

    const restarted = await fx.reopen();
    expect(await restarted.listTools()).toEqual([]);
    const damaged = { name: 'code.fib', scope: 'project', path, reason: expect.stringMatching(/^not valid JSON: /) };
    expect(await restarted.listDamaged()).toEqual([damaged]);
    expect(await restarted.listDamaged({ scope: 'project' })).toEqual([damaged]);
    expect(await restarted.listDamaged({ scope: 'user' })).toEqual([]);

    for (const asked of ['code.fib', 'code__fib']) {
      const err = failed(await restarted.callTool(asked, { n: 4 }), 'tool_damaged');
      expect(err.message).toMatch(
        new RegExp(
          `^tool "code\\.fib" \\(project scope\\) is damaged and was not run: its file ${path.replaceAll('.', '\\.')} cannot be used \\(not valid JSON: .*\\); remove it \\(forge_remove, or forge tools remove code\\.fib --scope project: an operator persona or the owner of its namespace may, as the file no longer says who forged it\\) and forge it again, or restore the file from a copy$`,
        ),
      );
    }
    expect(fx.entries('forge.called').map((e) => [e.data.name, e.data.ok, e.data.kind])).toEqual([
      ['code.fib', false, 'tool_damaged'],
      ['code.fib', false, 'tool_damaged'],
    ]);
    expect(fx.sandboxRuns('code.fib')).toEqual([]);
    // Not an unknown tool: no gap for the toolsmith.
    const gaps: string[] = [];
    const told = await fx.reopen({ onUnknownTool: (n) => void gaps.push(n) });
    failed(await told.callTool('code.fib', {}), 'tool_damaged');
    expect(gaps).toEqual([]);
  });

  it('the persona ACL and forbidden names are judged first: a persona that may not call the name learns nothing of the file', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    cutInHalf(join(fx.project, '.forge', 'tools', 'fib.json'));
    const restarted = await fx.reopen();
    const denied = failed(await restarted.callTool('fib', {}, { allowedTools: 'other' }), 'acl.persona_denied');
    expect(denied.message).not.toContain('.json');
    expect(await restarted.listDamaged({ allowedTools: 'other' })).toEqual([]);
    expect(fx.entries('acl.persona_denied').at(-1)?.data).toMatchObject({ name: 'fib' });
  });

  it('hides a usable tool of the same name in a less specific scope (fail closed), until it is removed', async () => {
    const fx = await setup({ userPolicy: POLICY });
    const fib = await example('fib');
    expect((await fx.forge.forgeTool(fib, { scope: 'user' })).ok).toBe(true);
    expect((await fx.forge.forgeTool(fib)).ok).toBe(true);
    const path = join(fx.project, '.forge', 'tools', 'fib.json');
    cutInHalf(path);
    const restarted = await fx.reopen();
    expect(await restarted.listTools()).toEqual([]);
    expect(await restarted.listTools({ scope: 'user' })).toMatchObject([{ scope: 'user', shadowedBy: 'project' }]);
    failed(await restarted.callTool('fib', { n: 3 }), 'tool_damaged');

    // Its creator cannot be read, so outside every namespace only an operator may remove it.
    const refused = await restarted.removeTool('fib');
    expect(refused).toMatchObject({
      ok: false,
      kind: 'acl.persona_denied',
      message: expect.stringContaining('does not say who forged it'),
    });
    expect(existsSync(path)).toBe(true);
    const removed = await restarted.removeTool('fib', { persona: 'ops' });
    expect(removed).toEqual({
      ok: true,
      damaged: { name: 'fib', scope: 'project', path, reason: expect.stringMatching(/^not valid JSON: /) },
    });
    expect(existsSync(path)).toBe(false);
    expect(fx.entries('forge.removed').at(-1)?.data).toEqual({
      ok: true,
      name: 'fib',
      persona: 'ops',
      session: expect.any(String),
      scope: 'project',
      damaged: { path, reason: expect.stringMatching(/^not valid JSON: /) },
    });
    expect(await restarted.listDamaged()).toEqual([]);
    expect(await restarted.listTools()).toMatchObject([{ scope: 'user', tool: { name: 'fib' } }]);
  });

  it('in a namespace, its owner removes it like a healthy tool; another persona may not', async () => {
    const fx = await setup({ userPolicy: POLICY });
    expect((await fx.forge.forgeTool({ ...(await example('fib')), name: 'code.fib' }, { persona: 'coder' })).ok).toBe(true);
    cutInHalf(join(fx.project, '.forge', 'tools', 'code.fib.json'));
    const restarted = await fx.reopen();
    expect(await restarted.removeTool('code.fib', { persona: 'eve' })).toMatchObject({ ok: false, kind: 'namespace_denied' });
    expect(await restarted.removeTool('code.fib', { persona: 'coder' })).toMatchObject({ ok: true, damaged: { name: 'code.fib' } });
    expect(await restarted.removeTool('code.fib', { persona: 'coder' })).toMatchObject({ ok: false, kind: 'unknown_tool' });
  });
});
