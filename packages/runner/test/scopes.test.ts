import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { example, failed, okData, py, setup } from './helpers.js';

/** A tool that answers with a fixed word, to tell versions and scopes apart. */
const says = (word: string, name = 'greet') => py(name, `print(json.dumps({"ok": True, "data": ${JSON.stringify(word)}}))`);
const names = (list: readonly { tool: { name: string }; scope: string }[]) => list.map((t) => `${t.tool.name}@${t.scope}`);

describe('scopes', () => {
  it('a session-scope tool is visible to that session only, in calls and in listTools', async () => {
    const fx = await setup();
    const made = await fx.forge.forgeTool(says('hi from A'), { scope: 'session', session: 'A' });
    expect(made).toMatchObject({ ok: true, tool: { scope: 'session', created_by: { session: 'A' } } });
    expect(existsSync(join(fx.project, '.forge', 'sessions', 'A', 'tools', 'greet.json'))).toBe(true);
    expect(okData(await fx.forge.callTool('greet', {}, { session: 'A' }))).toBe('hi from A');
    failed(await fx.forge.callTool('greet', {}, { session: 'B' }), 'unknown_tool');
    expect(names(await fx.forge.listTools({ session: 'A' }))).toEqual(['greet@session']);
    expect(names(await fx.forge.listTools({ session: 'B' }))).toEqual([]);
    expect(names(await fx.forge.listTools({ scope: 'session', session: 'A' }))).toEqual(['greet@session']);
    expect(names(await fx.forge.listTools({ scope: 'project', session: 'A' }))).toEqual([]);
  });

  it('the most specific scope wins: task → session → project → user, and the list shows what it shadows', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(says('project'))).ok).toBe(true);
    expect((await fx.forge.forgeTool(says('session'), { scope: 'session', session: 'A' })).ok).toBe(true);
    expect((await fx.forge.forgeTool(says('task'), { scope: 'task', session: 'A', task: 't1' })).ok).toBe(true);
    expect(okData(await fx.forge.callTool('greet', {}, { session: 'A', task: 't1' }))).toBe('task');
    expect(okData(await fx.forge.callTool('greet', {}, { session: 'A', task: 't2' }))).toBe('session');
    expect(okData(await fx.forge.callTool('greet', {}, { session: 'A' }))).toBe('session');
    expect(okData(await fx.forge.callTool('greet', {}, { session: 'B' }))).toBe('project');
    const listed = await fx.forge.listTools({ session: 'A', task: 't1' });
    expect(listed.map((t) => [t.tool.name, t.scope])).toEqual([['greet', 'task']]);
    expect((await fx.forge.listTools({ session: 'B' })).map((t) => [t.tool.name, t.scope])).toEqual([['greet', 'project']]);
    expect(fx.entries('forge.called').map((e) => [e.data.scope, e.data.task ?? null])).toEqual([
      ['task', 't1'],
      ['session', 't2'],
      ['session', null],
      ['project', null],
    ]);
  });

  it('listTools of a session shows the tools an earlier engine left in that session (it agrees with callTool)', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(says('kept'), { scope: 'session', session: 'A' })).ok).toBe(true);
    await fx.forge.close();
    const restarted = await fx.reopen();
    expect(names(await restarted.listTools({ session: 'A' }))).toEqual(['greet@session']);
    expect(okData(await restarted.callTool('greet', {}, { session: 'A' }))).toBe('kept');
  });

  it('removeTool removes from the scope the name resolves to; the less specific tool shows through', async () => {
    const fx = await setup();
    const changes: unknown[] = [];
    fx.forge.on('toolsChanged', (e) => changes.push(e));
    expect((await fx.forge.forgeTool(says('project'))).ok).toBe(true);
    expect((await fx.forge.forgeTool(says('session'), { scope: 'session', session: 'A' })).ok).toBe(true);
    const removed = await fx.forge.removeTool('greet', { session: 'A' });
    expect(removed).toMatchObject({ ok: true, tool: { name: 'greet', scope: 'session' } });
    expect(okData(await fx.forge.callTool('greet', {}, { session: 'A' }))).toBe('project');
    expect((await fx.forge.removeTool('greet', { scope: 'project' })).ok).toBe(true);
    failed(await fx.forge.callTool('greet', {}, { session: 'A' }), 'unknown_tool');
    expect(await fx.forge.removeTool('greet', { session: 'A' })).toMatchObject({ ok: false, kind: 'unknown_tool' });
    expect(await fx.forge.listTools({ session: 'A' })).toEqual([]);
    expect(fx.entries('forge.removed').map((e) => [e.data.ok, e.data.scope ?? null, e.data.kind ?? null])).toEqual([
      [true, 'session', null],
      [true, 'project', null],
      [false, null, 'unknown_tool'],
    ]);
    expect(changes).toEqual([
      { scopes: ['project'], names: ['greet'] },
      { scopes: ['session'], names: ['greet'] },
      { scopes: ['session'], names: ['greet'] },
      { scopes: ['project'], names: ['greet'] },
    ]);
  });

  it('promoteTool copies a project tool to the user scope: created, then unchanged, then updated', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(says('v1'))).ok).toBe(true);
    const created = await fx.forge.promoteTool('greet');
    expect(created).toMatchObject({ ok: true, outcome: 'created', tool: { scope: 'user', origin: { project: fx.project } } });
    expect(existsSync(join(fx.home, 'tools', 'greet.json'))).toBe(true);
    expect(await fx.forge.promoteTool('greet')).toMatchObject({ ok: true, outcome: 'unchanged' });
    expect((await fx.forge.forgeTool(says('v2'), { overwrite: true })).ok).toBe(true);
    expect(await fx.forge.promoteTool('greet')).toMatchObject({ ok: true, outcome: 'updated' });
    expect(await fx.forge.promoteTool('nothing_here')).toMatchObject({ ok: false, kind: 'unknown_tool' });
    expect(fx.entries('forge.promoted').map((e) => [e.data.ok, e.data.outcome ?? e.data.kind])).toEqual([
      [true, 'created'],
      [true, 'unchanged'],
      [true, 'updated'],
      [false, 'unknown_tool'],
    ]);
    expect(names(await fx.forge.listTools({ scope: 'user' }))).toEqual(['greet@user']);
  });

  it('promote_conflict: two projects sharing one home promote different tools of one name; force replaces', async () => {
    const a = await setup();
    const b = await setup({ home: a.home });
    expect((await a.forge.forgeTool(says('from A'))).ok).toBe(true);
    expect(await a.forge.promoteTool('greet')).toMatchObject({ ok: true, outcome: 'created' });
    // B sees A's promoted tool through the user scope (after its registry reloads).
    const b2 = await b.reopen();
    expect(okData(await b2.callTool('greet', {}))).toBe('from A');
    expect(names(await b2.listTools())).toEqual(['greet@user']);

    expect((await b2.forgeTool(says('from B'))).ok).toBe(true);
    expect(okData(await b2.callTool('greet', {}))).toBe('from B');
    const conflict = await b2.promoteTool('greet');
    expect(conflict).toMatchObject({ ok: false, kind: 'promote_conflict' });
    expect(b.entries('forge.promoted').at(-1)?.data).toMatchObject({ ok: false, kind: 'promote_conflict', name: 'greet' });
    expect(await b2.promoteTool('greet', { force: true })).toMatchObject({ ok: true, outcome: 'replaced' });
    const a2 = await a.reopen();
    expect(await a2.promoteTool('greet')).toMatchObject({ ok: false, kind: 'promote_conflict' });
  });

  it('a session id that could leave its directory is refused as an audited envelope, never thrown', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    okData(await fx.forge.callTool('fib', { n: 1 }, { session: 'one' }));
    const call = await fx.forge.callTool('fib', { n: 1 }, { session: '../../escape' }).catch((err: Error) => ({ threw: err.message }));
    expect.soft(call).toMatchObject({ ok: false });
    const forged = await fx.forge
      .forgeTool(says('x'), { scope: 'session', session: '../x' })
      .catch((err: Error) => ({ threw: err.message }));
    expect.soft(forged).toMatchObject({ ok: false });
    expect(existsSync(join(fx.project, 'escape'))).toBe(false);
    expect(existsSync(join(fx.project, '.forge', 'x'))).toBe(false);
  });
});

describe('listTools and the persona ACL', () => {
  it('lists only the tools the caller may call', async () => {
    const fx = await setup();
    for (const n of ['fib', 'word_count']) expect((await fx.forge.forgeTool(await example(n))).ok).toBe(true);
    expect(names(await fx.forge.listTools({ allowedTools: 'fib' }))).toEqual(['fib@project']);
    expect(names(await fx.forge.listTools({ allowedTools: '' }))).toEqual([]);
    expect(names(await fx.forge.listTools())).toEqual(['fib@project', 'word_count@project']);
  });
});
