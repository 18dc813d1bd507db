import { describe, expect, it } from 'vitest';
import { BY, fixture, spec } from './helpers.js';

describe('tool states', () => {
  it('a retired tool neither resolves, lists nor shadows; its content and digest stay, and it reactivates', async () => {
    const { registry, open } = await fixture();
    await registry.load();
    const user = await registry.create(spec({ description: 'the user one' }), { scope: 'user', createdBy: BY });
    const made = await registry.create(spec(), { scope: 'project', createdBy: BY });
    if (!made.ok || !user.ok) throw new Error('create failed');
    expect(registry.resolve('csv.count')?.scope).toBe('project');

    const retired = await registry.setState('csv.count', 'retired', { scope: 'project', from: ['active'], digest: made.tool.digest });
    expect(retired).toMatchObject({ ok: true, tool: { state: 'retired', version: 2, digest: made.tool.digest } });
    // The user scope's tool is what a call finds now, and the project scope lists nothing.
    expect(registry.resolve('csv.count')).toMatchObject({ scope: 'user', shadows: [] });
    expect(registry.list({ scope: 'project' })).toEqual([]);
    expect(registry.list().map((t) => t.scope)).toEqual(['user']);
    // Another process reads the same from disk.
    const other = open();
    await other.load();
    expect(other.resolve('csv.count')?.scope).toBe('user');
    expect((await other.versions('csv.count', { scope: 'project' })).map((v) => [v.version, v.tool?.state])).toEqual([
      [1, 'active'],
      [2, 'retired'],
    ]);

    // Compare-and-set: a wrong state or digest changes nothing.
    const wrong = await registry.setState('csv.count', 'active', { scope: 'project', from: ['active'] });
    expect(wrong).toMatchObject({ ok: false, kind: 'state_conflict', message: expect.stringMatching(/is retired, not active/) });
    const stale = await registry.setState('csv.count', 'active', { scope: 'project', digest: 'sha256:00' });
    expect(stale).toMatchObject({ ok: false, kind: 'state_conflict', message: expect.stringMatching(/not sha256:00/) });

    const back = await registry.setState('csv.count', 'active', { scope: 'project', from: ['retired'] });
    expect(back).toMatchObject({ ok: true, tool: { state: 'active', version: 3 } });
    expect(registry.resolve('csv.count')).toMatchObject({ scope: 'project', shadows: ['user'] });
  });

  it('refuses unknown tools, bad names and unknown states', async () => {
    const { registry } = await fixture();
    await registry.load();
    expect(await registry.setState('nope', 'retired', { scope: 'project' })).toMatchObject({ ok: false, kind: 'unknown_tool' });
    expect(await registry.setState('../x', 'retired', { scope: 'project' })).toMatchObject({ ok: false, kind: 'unknown_tool' });
    await registry.create(spec(), { scope: 'project', createdBy: BY });
    expect(await registry.setState('csv.count', 'gone' as 'retired', { scope: 'project' })).toMatchObject({
      ok: false,
      kind: 'validation_failed',
    });
    expect(registry.resolve('csv.count')?.tool.state).toBe('active');
  });

  it('a forge over a retired name needs overwrite, like any name in use', async () => {
    const { registry } = await fixture();
    await registry.load();
    await registry.create(spec(), { scope: 'project', createdBy: BY });
    await registry.setState('csv.count', 'retired', { scope: 'project' });
    expect(await registry.create(spec(), { scope: 'project', createdBy: BY })).toMatchObject({ ok: false, kind: 'name_taken' });
    const again = await registry.create(spec({ description: 'v2' }), { scope: 'project', createdBy: BY, overwrite: true });
    expect(again).toMatchObject({ ok: true, tool: { state: 'active', version: 3 } });
  });
});
