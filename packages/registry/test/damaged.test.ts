/** A damaged tool record is kept, listed, refused and removable: it never vanishes in silence. */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { ScopeChange, StoredTool } from '../src/index.js';
import { BY, fixture, spec } from './helpers.js';

/** Cuts a tool file in half, as a crash of something other than forge, or a full disk, would. */
function cutInHalf(path: string): void {
  const text = readFileSync(path, 'utf8');
  writeFileSync(path, text.slice(0, Math.floor(text.length / 2)));
}

describe('damaged tool records', () => {
  it('a file cut in half is kept as damaged: named, with its path and reason; it neither resolves nor lists as a tool', async () => {
    const f = await fixture();
    await f.registry.create(spec({ name: 'keep' }), { scope: 'project', createdBy: BY });
    await f.registry.create(spec({ name: 'ns.spoilt' }), { scope: 'project', createdBy: BY });
    const path = join(f.roots.project ?? '', 'ns.spoilt.json');
    cutInHalf(path);

    const fresh = f.open();
    const report = await fresh.load();
    expect(report.failed).toEqual([{ scope: 'project', name: 'ns.spoilt', path, reason: expect.stringMatching(/^not valid JSON: /) }]);
    const damaged = { name: 'ns.spoilt', scope: 'project', path, reason: expect.stringMatching(/^not valid JSON: /) };
    expect(fresh.listDamaged()).toEqual([damaged]);
    expect(fresh.listDamaged({ scope: 'project' })).toEqual([damaged]);
    expect(fresh.listDamaged({ scope: 'user' })).toEqual([]);
    expect(fresh.damaged('ns.spoilt')).toEqual(damaged);
    expect(fresh.resolve('ns.spoilt')).toBeUndefined();
    expect(fresh.byWireName('ns__spoilt')).toEqual([]);
    expect(fresh.list().map((t) => t.tool.name)).toEqual(['keep']);
    expect(fresh.damaged('keep')).toBeUndefined();
    expect(f.events).toContainEqual({ type: 'registry.load_failed', scope: 'project', path, reason: damaged.reason });
  });

  it('a damaged record hides a usable tool of the same name in a less specific scope (fail closed)', async () => {
    const f = await fixture();
    await f.registry.create(spec({ description: 'the user one' }), { scope: 'user', createdBy: BY });
    await f.registry.create(spec({ description: 'the project one' }), { scope: 'project', createdBy: BY });
    cutInHalf(join(f.roots.project ?? '', 'csv.count.json'));
    const r = f.open();
    await r.load();
    expect(r.damaged('csv.count')).toMatchObject({ scope: 'project' });
    // Not the user tool in its place: the damaged file might have been a newer version of it.
    expect(r.resolve('csv.count')).toBeUndefined();
    expect(r.byWireName('csv__count')).toEqual([]);
    expect(r.list()).toEqual([]);
    expect(r.list({ scope: 'user' })).toMatchObject([{ tool: { description: 'the user one' }, scope: 'user', shadowedBy: 'project' }]);
    // Still a name in use: a case variant is refused as before.
    expect(await r.create(spec({ name: 'CSV.count' }), { scope: 'session', createdBy: BY })).toMatchObject({
      ok: false,
      kind: 'name_taken',
    });
  });

  it('a usable tool in a more specific scope hides a damaged one below it; the damaged one is still listed by scope', async () => {
    const f = await fixture();
    await f.registry.create(spec({ description: 'the user one' }), { scope: 'user', createdBy: BY });
    await f.registry.create(spec({ description: 'the project one' }), { scope: 'project', createdBy: BY });
    cutInHalf(join(f.roots.user, 'csv.count.json'));
    const r = f.open();
    await r.load();
    expect(r.resolve('csv.count')).toMatchObject({ scope: 'project', shadows: [], tool: { description: 'the project one' } });
    expect(r.damaged('csv.count')).toBeUndefined();
    expect(r.listDamaged()).toMatchObject([{ name: 'csv.count', scope: 'user' }]);
  });

  it('remove asks authorize with undefined, removes the damaged record into the history, and uncovers the tool below', async () => {
    const f = await fixture();
    await f.registry.create(spec({ description: 'the user one' }), { scope: 'user', createdBy: BY });
    await f.registry.create(spec(), { scope: 'project', createdBy: BY });
    const path = join(f.roots.project ?? '', 'csv.count.json');
    cutInHalf(path);
    const r = f.open();
    await r.load();
    const asked: (StoredTool | undefined)[] = [];
    const refused = await r.remove('csv.count', {
      scope: 'project',
      authorize: (t) => {
        asked.push(t);
        return { ok: false, kind: 'acl.persona_denied', message: 'not yours' };
      },
    });
    expect(refused).toEqual({ ok: false, kind: 'acl.persona_denied', message: 'not yours' });
    expect(asked).toEqual([undefined]);
    expect(existsSync(path)).toBe(true);
    expect(r.damaged('csv.count')).toMatchObject({ scope: 'project' });

    const removed = await r.remove('csv.count', { scope: 'project', authorize: () => undefined });
    expect(removed).toEqual({
      ok: true,
      damaged: { name: 'csv.count', scope: 'project', path, reason: expect.stringMatching(/^not valid JSON: /) },
    });
    expect(existsSync(path)).toBe(false);
    expect(r.damaged('csv.count')).toBeUndefined();
    expect(r.listDamaged()).toEqual([]);
    expect(r.resolve('csv.count')).toMatchObject({ scope: 'user', tool: { description: 'the user one' } });
    // Kept like any removed version (under version 0: what it was cannot be read).
    const kept = await r.versions('csv.count', { scope: 'project' });
    expect(kept.map((v) => [v.version, v.current, v.tool, v.reason])).toEqual([
      [0, false, undefined, expect.stringMatching(/^not valid JSON: /)],
    ]);
    expect(await r.remove('csv.count', { scope: 'project' })).toMatchObject({ ok: false, kind: 'unknown_tool' });
  });

  it('a forge with overwrite replaces a damaged record; setState and promote refuse it as tool_damaged', async () => {
    const f = await fixture();
    await f.registry.create(spec(), { scope: 'project', createdBy: BY });
    const path = join(f.roots.project ?? '', 'csv.count.json');
    cutInHalf(path);
    const r = f.open();
    await r.load();
    for (const refused of [await r.setState('csv.count', 'retired', { scope: 'project' }), await r.promote('csv.count')]) {
      expect(refused).toMatchObject({ ok: false, kind: 'tool_damaged' });
      expect(!refused.ok && refused.message).toContain(
        `tool "csv.count" in the project scope is damaged and cannot be used: ${path}: not valid JSON`,
      );
    }
    expect(await r.create(spec(), { scope: 'project', createdBy: BY })).toMatchObject({
      ok: false,
      kind: 'name_taken',
      message: expect.stringContaining('(a damaged record: not valid JSON'),
    });
    expect(await r.create(spec({ description: 'again' }), { scope: 'project', createdBy: BY, overwrite: true })).toMatchObject({
      ok: true,
      tool: { description: 'again' },
    });
    expect(r.damaged('csv.count')).toBeUndefined();
    expect(r.resolve('csv.count')).toMatchObject({ tool: { description: 'again' } });
  });

  it('a record under no tool name, or under a built-in, is only an event: nothing to list, refuse or remove', async () => {
    const f = await fixture();
    await f.registry.create(spec({ name: 'keep' }), { scope: 'user', createdBy: BY });
    writeFileSync(join(f.roots.user, '1bad.json'), '{"half":');
    writeFileSync(join(f.roots.user, 'forge_tool.json'), '{"half":');
    const r = f.open();
    const report = await r.load();
    expect(report.failed.map((x) => x.path).sort()).toEqual([join(f.roots.user, '1bad.json'), join(f.roots.user, 'forge_tool.json')]);
    expect(r.listDamaged()).toEqual([]);
    expect(r.damaged('forge_tool')).toBeUndefined();
  });

  it('a watching registry sees a file damaged and repaired by another process: the name is reported each time', async () => {
    const f = await fixture();
    await f.registry.create(spec({ description: 'the user one' }), { scope: 'user', createdBy: BY });
    await f.registry.create(spec(), { scope: 'project', createdBy: BY });
    const path = join(f.roots.project ?? '', 'csv.count.json');
    const good = readFileSync(path, 'utf8');
    const batches: ScopeChange[][] = [];
    let wake: () => void = () => {};
    const next = async (): Promise<ScopeChange[]> => {
      if (batches.length === 0) await new Promise<void>((resolve) => (wake = resolve));
      return batches.shift() ?? [];
    };
    await f.registry.watch((c) => {
      batches.push(c);
      wake();
    });
    cutInHalf(path);
    expect(await next()).toEqual([{ scope: 'project', names: ['csv.count'] }]);
    expect(f.registry.damaged('csv.count')).toMatchObject({ scope: 'project', path });
    expect(f.registry.resolve('csv.count')).toBeUndefined();
    writeFileSync(path, good);
    expect(await next()).toEqual([{ scope: 'project', names: ['csv.count'] }]);
    expect(f.registry.damaged('csv.count')).toBeUndefined();
    expect(f.registry.resolve('csv.count')).toMatchObject({ scope: 'project', shadows: ['user'] });
  });
});
