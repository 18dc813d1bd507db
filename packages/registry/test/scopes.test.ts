import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createRegistry, SCOPES, scopeRoots } from '../src/index.js';
import { BY, fixture, spec, tempDir } from './helpers.js';

describe('scopeRoots', () => {
  it('computes the four roots of the on-disk layout', () => {
    expect(scopeRoots({ forgeHome: '/h/forge', project: '/p', session: 'abc-1', task: 'T.7' })).toEqual({
      user: '/h/forge/tools',
      project: '/p/.forge/tools',
      session: '/p/.forge/sessions/abc-1/tools',
      task: '/p/.forge/sessions/abc-1/tasks/T.7/tools',
    });
    expect(scopeRoots({ forgeHome: '/h/forge' })).toEqual({ user: '/h/forge/tools' });
    expect(scopeRoots({ forgeHome: '/h', project: '/p' })).toEqual({ user: '/h/tools', project: '/p/.forge/tools' });
  });

  it.each([
    ['a/b', 'must not contain "/" or "\\"'],
    ['..', 'must not contain ".."'],
    ['x..y', 'must not contain ".."'],
    ['.', 'must not be "."'],
    ['', 'must not be empty'],
    ['a b', 'may only hold printable ASCII'],
    ['a\nb', 'may only hold printable ASCII'],
    ['a\\b', 'must not contain "/" or "\\"'],
    ['x'.repeat(129), 'must be at most 128 characters'],
  ])('refuses the session or task id %j', (id, why) => {
    expect(() => scopeRoots({ forgeHome: '/h', project: '/p', session: id })).toThrow(
      expect.objectContaining({ code: 'invalid_option', message: expect.stringContaining(why) }),
    );
    expect(() => scopeRoots({ forgeHome: '/h', project: '/p', session: 's', task: id })).toThrow(
      expect.objectContaining({ code: 'invalid_option' }),
    );
  });

  it('refuses relative paths and a session or task without its parent', () => {
    expect(() => scopeRoots({ forgeHome: 'forge' })).toThrow(expect.objectContaining({ code: 'invalid_option' }));
    expect(() => scopeRoots({ forgeHome: '/h', project: 'p' })).toThrow(expect.objectContaining({ code: 'invalid_option' }));
    expect(() => scopeRoots({ forgeHome: '/h', session: 's' })).toThrow(expect.objectContaining({ code: 'invalid_option' }));
    expect(() => scopeRoots({ forgeHome: '/h', project: '/p', task: 't' })).toThrow(expect.objectContaining({ code: 'invalid_option' }));
  });
});

describe('shadowing', () => {
  it('resolves task → session → project → user and says what is shadowed', async () => {
    const f = await fixture();
    for (const scope of [...SCOPES].reverse()) {
      const r = await f.registry.create(spec({ description: `in ${scope}` }), { scope, createdBy: BY });
      expect(r.ok).toBe(true);
    }
    expect(SCOPES).toEqual(['task', 'session', 'project', 'user']);
    const r = f.registry.resolve('csv.count');
    expect(r).toMatchObject({ scope: 'task', shadows: ['session', 'project', 'user'], tool: { description: 'in task' } });

    // A second registry over the same directories sees the same thing after load().
    const other = f.open();
    await other.load();
    expect(other.resolve('csv.count')).toEqual(r);

    await f.registry.remove('csv.count', { scope: 'task' });
    expect(f.registry.resolve('csv.count')).toMatchObject({ scope: 'session', shadows: ['project', 'user'] });
    await f.registry.remove('csv.count', { scope: 'project' });
    expect(f.registry.resolve('csv.count')).toMatchObject({ scope: 'session', shadows: ['user'] });
    await f.registry.remove('csv.count', { scope: 'session' });
    expect(f.registry.resolve('csv.count')).toMatchObject({ scope: 'user', shadows: [], tool: { description: 'in user' } });
    expect(f.registry.resolve('nope')).toBeUndefined();
  });

  it('lists effective tools, or one scope with the hidden ones marked', async () => {
    const f = await fixture();
    await f.registry.create(spec({ name: 'b.tool' }), { scope: 'user', createdBy: BY });
    await f.registry.create(spec({ name: 'a.tool' }), { scope: 'user', createdBy: BY });
    await f.registry.create(spec({ name: 'a.tool', description: 'mine' }), { scope: 'session', createdBy: BY });
    await f.registry.create(spec({ name: 'c.tool' }), { scope: 'task', createdBy: BY });

    const all = f.registry.list();
    expect(all.map((t) => [t.tool.name, t.scope, t.shadows])).toEqual([
      ['a.tool', 'session', ['user']],
      ['b.tool', 'user', []],
      ['c.tool', 'task', []],
    ]);
    expect(f.registry.list()).toBe(all);
    expect(Object.isFrozen(all)).toBe(true);
    expect(f.registry.list({ scope: 'user' }).map((t) => [t.tool.name, t.shadowedBy])).toEqual([
      ['a.tool', 'session'],
      ['b.tool', undefined],
    ]);
    expect(f.registry.list({ scope: 'session' }).map((t) => [t.tool.name, t.shadows, t.shadowedBy])).toEqual([
      ['a.tool', ['user'], undefined],
    ]);
    expect(f.registry.list({ scope: 'project' })).toEqual([]);
    await f.registry.remove('b.tool', { scope: 'user' });
    expect(f.registry.list().map((t) => t.tool.name)).toEqual(['a.tool', 'c.tool']);
  });

  it('works with only the user scope configured', async () => {
    const registry = createRegistry({ roots: { user: await tempDir() } });
    await registry.load();
    expect((await registry.create(spec(), { scope: 'user', createdBy: BY })).ok).toBe(true);
    expect(registry.resolve('csv.count')?.scope).toBe('user');
    expect(registry.list({ scope: 'task' })).toEqual([]);
  });
});

describe('built-in names', () => {
  it('cannot be forged in any scope, are reported as built-in and never resolve to a file', async () => {
    const f = await fixture();
    for (const scope of SCOPES) {
      for (const name of ['forge_tool', 'forge_call', 'forge_list', 'forge_promote', 'forge_remove']) {
        expect(await f.registry.create(spec({ name }), { scope, createdBy: BY })).toMatchObject({ ok: false, kind: 'name_forbidden' });
      }
    }
    expect(f.registry.isBuiltin('forge_call')).toBe(true);
    expect(f.registry.isBuiltin('csv.count')).toBe(false);
    expect(f.registry.resolve('forge_call')).toBeUndefined();
  });
});

describe('a registry over some scopes only', () => {
  it('serves a session scope on its own (no user scope), and refuses to promote without one', async () => {
    const dir = await tempDir();
    const roots = scopeRoots({ forgeHome: join(dir, 'home'), project: join(dir, 'p'), session: 's1' });
    const reg = createRegistry({ roots: { session: roots.session } });
    await reg.load();
    const made = await reg.create(
      { name: 'only_here', description: 'd', runtime: 'sh', impl: 'echo {}', input_schema: { type: 'object' } },
      { scope: 'session', createdBy: { persona: 'p', session: 's1' } },
    );
    expect(made.ok).toBe(true);
    expect(reg.resolve('only_here')).toMatchObject({ scope: 'session', shadows: [] });
    await expect(reg.promote('only_here', { from: 'session' })).rejects.toMatchObject({ code: 'invalid_option' });
    await expect(
      reg.create(
        { name: 'x', description: 'd', runtime: 'sh', impl: 'echo {}', input_schema: { type: 'object' } },
        { scope: 'user', createdBy: { persona: 'p', session: 's1' } },
      ),
    ).rejects.toMatchObject({ code: 'invalid_option' });
  });
});
