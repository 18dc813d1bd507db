import { describe, expect, it } from 'vitest';
import { digestSpec } from '../src/index.js';
import { BY, fixture, spec } from './helpers.js';

describe('promote', () => {
  it('copies a project tool to the user scope with its origin', async () => {
    const f = await fixture();
    await f.registry.create(spec(), { scope: 'project', createdBy: BY });
    const r = await f.registry.promote('csv.count');
    expect(r).toEqual({
      ok: true,
      outcome: 'created',
      tool: {
        ...spec(),
        version: 1,
        digest: digestSpec(spec()),
        created_at: '2030-01-02T03:04:06.000Z',
        created_by: BY,
        scope: 'user',
        state: 'active',
        origin: { project: f.project, digest: digestSpec(spec()) },
      },
    });
    // The project tool still shadows its user copy.
    expect(f.registry.resolve('csv.count')).toMatchObject({ scope: 'project', shadows: ['user'] });
    // Another project sees the promoted tool.
    const elsewhere = f.open({ roots: { user: f.roots.user } });
    await elsewhere.load();
    expect(elsewhere.resolve('csv.count')).toMatchObject({ scope: 'user', tool: { origin: { project: f.project } } });
  });

  it('is a no-op reported as unchanged for an identical digest', async () => {
    const f = await fixture();
    await f.registry.create(spec(), { scope: 'project', createdBy: BY });
    const first = await f.registry.promote('csv.count');
    const again = await f.registry.promote('csv.count');
    expect(again).toMatchObject({ ok: true, outcome: 'unchanged', tool: { version: 1 } });
    if (first.ok && again.ok) expect(again.tool).toEqual(first.tool);
    expect((await f.registry.versions('csv.count', { scope: 'user' })).map((v) => v.version)).toEqual([1]);
  });

  it('updates a tool promoted earlier from the same project, keeping the old version', async () => {
    const f = await fixture();
    await f.registry.create(spec(), { scope: 'project', createdBy: BY });
    await f.registry.promote('csv.count');
    await f.registry.create(spec({ description: 'better' }), { scope: 'project', createdBy: BY, overwrite: true });
    const r = await f.registry.promote('csv.count');
    expect(r).toMatchObject({ ok: true, outcome: 'updated', tool: { version: 2, description: 'better' }, previous: { version: 1 } });
  });

  it('refuses a different tool of the same name from elsewhere with promote_conflict unless forced', async () => {
    const f = await fixture();
    await f.registry.create(spec({ description: 'the user one' }), { scope: 'user', createdBy: BY });
    await f.registry.create(spec(), { scope: 'project', createdBy: BY });
    const r = await f.registry.promote('csv.count');
    expect(r).toMatchObject({ ok: false, kind: 'promote_conflict' });
    if (!r.ok) {
      expect(r.message).toContain('the user scope already has a different "csv.count" (version 1,');
      expect(r.message).toContain('forged in the user scope); rename the tool or pass force to replace it');
    }
    expect(f.registry.list({ scope: 'user' }).map((t) => t.tool.description)).toEqual(['the user one']);

    const forced = await f.registry.promote('csv.count', { force: true });
    expect(forced).toMatchObject({
      ok: true,
      outcome: 'replaced',
      tool: { version: 2, description: spec().description },
      previous: { version: 1 },
    });
    const versions = await f.registry.versions('csv.count', { scope: 'user' });
    expect(versions.map((v) => [v.version, v.current, v.tool?.description])).toEqual([
      [1, false, 'the user one'],
      [2, true, spec().description],
    ]);
    const back = await f.registry.recover('csv.count', 1, { scope: 'user' });
    expect(back).toMatchObject({ ok: true, tool: { version: 3, description: 'the user one' } });
  });

  it('a tool promoted from another project conflicts too', async () => {
    const a = await fixture();
    await a.registry.create(spec(), { scope: 'project', createdBy: BY });
    await a.registry.promote('csv.count');
    // Same user scope, another project directory.
    const b = a.open({ projectDir: '/elsewhere/project' });
    await b.create(spec({ description: 'b' }), { scope: 'session', createdBy: BY });
    const r = await b.promote('csv.count', { from: 'session' });
    expect(r).toMatchObject({ ok: false, kind: 'promote_conflict' });
    if (!r.ok) expect(r.message).toContain(`promoted from ${a.project}`);
  });

  it('returns unknown_tool when the project has no such tool', async () => {
    const f = await fixture();
    await f.registry.create(spec(), { scope: 'user', createdBy: BY });
    expect(await f.registry.promote('csv.count')).toMatchObject({ ok: false, kind: 'unknown_tool' });
    expect(await f.registry.promote('missing')).toEqual({
      ok: false,
      kind: 'unknown_tool',
      message: 'no tool "missing" in the project scope; list the tools to see what exists',
    });
  });
});
