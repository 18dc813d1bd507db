/**
 * Names compare regardless of case (a tool that differs from a visible one only by case is
 * refused), and `authorize` lets the caller refuse a replace, a remove or a promote under the
 * name's lock.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Failure, StoredTool } from '../src/index.js';
import { BY, fixture, spec } from './helpers.js';

const OTHER = { persona: 'eve', session: 'sess-2' };

describe('names that differ only by case', () => {
  it('refuses CODE.tool beside code.tool in the same scope, naming the existing tool', async () => {
    const f = await fixture();
    expect((await f.registry.create(spec({ name: 'code.tool' }), { scope: 'project', createdBy: BY })).ok).toBe(true);
    const r = await f.registry.create(spec({ name: 'CODE.tool' }), { scope: 'project', createdBy: BY });
    expect(r).toEqual({
      ok: false,
      kind: 'name_taken',
      message:
        'tool "CODE.tool" differs only by case from the existing tool "code.tool" (project scope), and names are compared regardless of case; choose another name, or forge "code.tool" with overwrite to replace that tool',
    });
    expect(existsSync(join(f.roots.project as string, 'CODE.tool.json'))).toBe(false);
    expect(f.registry.resolve('CODE.tool')).toBeUndefined();
    // overwrite does not make a case variant the same name
    expect(await f.registry.create(spec({ name: 'Code.Tool' }), { scope: 'project', createdBy: BY, overwrite: true })).toMatchObject({
      ok: false,
      kind: 'name_taken',
    });
    // the very name with overwrite replaces as always
    expect(
      await f.registry.create(spec({ name: 'code.tool', description: 'v2' }), { scope: 'project', createdBy: BY, overwrite: true }),
    ).toMatchObject({ ok: true, tool: { version: 2 } });
  });

  it('refuses a variant of a tool in another scope of the registry (a user tool is visible to the project)', async () => {
    const f = await fixture();
    await f.registry.create(spec({ name: 'greet' }), { scope: 'user', createdBy: BY });
    const r = await f.registry.create(spec({ name: 'Greet' }), { scope: 'project', createdBy: BY });
    expect(r).toMatchObject({ ok: false, kind: 'name_taken', message: expect.stringContaining('"greet" (user scope)') });
    // the same name in a more specific scope still shadows, as it always did
    expect(await f.registry.create(spec({ name: 'greet' }), { scope: 'project', createdBy: BY })).toMatchObject({ ok: true });
    expect(f.registry.caseVariantOf('GREET')).toMatchObject({ scope: 'project', tool: { name: 'greet' } });
    expect(f.registry.caseVariantOf('greet')).toBeUndefined();
  });

  it('sees a variant another process wrote since this registry loaded', async () => {
    const f = await fixture();
    await f.registry.load();
    const other = f.open();
    expect((await other.create(spec({ name: 'code.tool' }), { scope: 'project', createdBy: BY })).ok).toBe(true);
    expect(f.registry.caseVariantOf('CODE.tool')).toBeUndefined(); // not reloaded
    const r = await f.registry.create(spec({ name: 'CODE.tool' }), { scope: 'project', createdBy: BY });
    expect(r).toMatchObject({ ok: false, kind: 'name_taken', message: expect.stringContaining('"code.tool" (project scope)') });
  });

  it('serializes concurrent creates of two variants: exactly one wins', async () => {
    const f = await fixture();
    const a = f.open();
    const b = f.open();
    const results = await Promise.all([
      a.create(spec({ name: 'race.tool' }), { scope: 'project', createdBy: BY }),
      b.create(spec({ name: 'RACE.tool' }), { scope: 'project', createdBy: BY }),
    ]);
    expect(results.map((r) => r.ok).sort()).toEqual([false, true]);
    expect(results.find((r) => !r.ok)).toMatchObject({ kind: 'name_taken' });
  });

  it('loads variants that already exist side by side, and lets each be replaced by its very name', async () => {
    const f = await fixture();
    await f.registry.create(spec({ name: 'code.tool' }), { scope: 'project', createdBy: BY });
    const twin = await f.registry.create(spec({ name: 'code.tool' }), { scope: 'session', createdBy: BY });
    expect(twin.ok).toBe(true);
    // a variant written before names were compared regardless of case
    const legacy = { ...(twin.ok ? twin.tool : {}), name: 'CODE.tool', scope: 'project' } as StoredTool;
    writeFileSync(join(f.roots.project as string, 'CODE.tool.json'), JSON.stringify(legacy));
    const fresh = f.open();
    await fresh.load();
    expect(fresh.resolve('CODE.tool')).toMatchObject({ scope: 'project' });
    expect(fresh.resolve('code.tool')).toMatchObject({ scope: 'session' });
    expect(await fresh.create(spec({ name: 'Code.Tool' }), { scope: 'task', createdBy: BY })).toMatchObject({ kind: 'name_taken' });
    expect(
      await fresh.create(spec({ name: 'CODE.tool', description: 'x' }), { scope: 'project', createdBy: BY, overwrite: true }),
    ).toMatchObject({ ok: true });
  });

  it('refuses to promote a tool whose name differs only by case from a user tool, even with force', async () => {
    const f = await fixture();
    await f.registry.create(spec({ name: 'greet' }), { scope: 'user', createdBy: BY });
    // the project variant came from before (written by hand)
    mkdirSync(f.roots.project as string, { recursive: true, mode: 0o700 });
    const created = await f.open({ roots: { project: f.roots.project } }).create(spec({ name: 'Greet' }), {
      scope: 'project',
      createdBy: BY,
    });
    expect(created.ok).toBe(true);
    for (const force of [false, true]) {
      expect(await f.registry.promote('Greet', { force })).toEqual({
        ok: false,
        kind: 'promote_conflict',
        message:
          'the user scope already has "greet", which differs from "Greet" only by case, and names are compared regardless of case; rename the tool before promoting it',
      });
    }
  });
});

describe('authorize', () => {
  const refuse =
    (seen: (StoredTool | undefined)[]) =>
    (existing: StoredTool | undefined): Failure<string> => {
      seen.push(existing);
      return { ok: false, kind: 'acl.persona_denied', message: `not yours: ${existing?.created_by.persona}` };
    };

  it('is asked before overwrite replaces a tool, with the live tool; a refusal writes nothing', async () => {
    const f = await fixture();
    await f.registry.create(spec(), { scope: 'project', createdBy: BY });
    const seen: (StoredTool | undefined)[] = [];
    const r = await f.registry.create(spec({ description: 'mine now' }), {
      scope: 'project',
      createdBy: OTHER,
      overwrite: true,
      authorize: refuse(seen),
    });
    expect(r).toEqual({ ok: false, kind: 'acl.persona_denied', message: 'not yours: tester' });
    expect(seen.map((t) => t?.created_by)).toEqual([BY]);
    expect(f.registry.resolve('csv.count')?.tool).toMatchObject({ version: 1, created_by: BY });
    expect((await f.registry.versions('csv.count', { scope: 'project' })).map((v) => v.version)).toEqual([1]);
    // not asked for a new name
    const fresh: (StoredTool | undefined)[] = [];
    expect(
      await f.registry.create(spec({ name: 'fresh' }), { scope: 'project', createdBy: OTHER, overwrite: true, authorize: refuse(fresh) }),
    ).toMatchObject({ ok: true });
    expect(fresh).toEqual([]);
  });

  it('is asked before remove; a refusal leaves the tool in place', async () => {
    const f = await fixture();
    await f.registry.create(spec(), { scope: 'project', createdBy: BY });
    const seen: (StoredTool | undefined)[] = [];
    expect(await f.registry.remove('csv.count', { scope: 'project', authorize: refuse(seen) })).toEqual({
      ok: false,
      kind: 'acl.persona_denied',
      message: 'not yours: tester',
    });
    expect(existsSync(join(f.roots.project as string, 'csv.count.json'))).toBe(true);
    expect(f.registry.resolve('csv.count')).toMatchObject({ scope: 'project' });
    expect(await f.registry.remove('csv.count', { scope: 'project', authorize: () => undefined })).toMatchObject({ ok: true });
  });

  it('gets undefined for an unreadable file (nobody can say who wrote it)', async () => {
    const f = await fixture();
    mkdirSync(f.roots.project as string, { recursive: true, mode: 0o700 });
    writeFileSync(join(f.roots.project as string, 'broken.json'), '{ not json');
    const seen: (StoredTool | undefined)[] = [];
    expect(await f.registry.remove('broken', { scope: 'project', authorize: refuse(seen) })).toMatchObject({ ok: false });
    expect(seen).toEqual([undefined]);
    expect(existsSync(join(f.roots.project as string, 'broken.json'))).toBe(true);
  });

  it('is asked for the source of a promote and for the user tool it would replace', async () => {
    const f = await fixture();
    await f.registry.create(spec(), { scope: 'project', createdBy: BY });
    const seen: (StoredTool | undefined)[] = [];
    expect(await f.registry.promote('csv.count', { authorize: refuse(seen) })).toMatchObject({ ok: false, kind: 'acl.persona_denied' });
    expect(seen.map((t) => t?.scope)).toEqual(['project']);
    expect(f.registry.resolve('csv.count')?.shadows).toEqual([]);

    // a different user tool of the same name, from elsewhere: the source passes, the target does not
    await f.registry.create(spec({ description: 'theirs' }), { scope: 'user', createdBy: OTHER });
    const asked: (StoredTool | undefined)[] = [];
    const check = (t: StoredTool | undefined) => {
      asked.push(t);
      return t?.scope === 'user' ? ({ ok: false, kind: 'acl.persona_denied', message: 'the user tool is not yours' } as const) : undefined;
    };
    expect(await f.registry.promote('csv.count', { force: true, authorize: check })).toMatchObject({
      ok: false,
      message: 'the user tool is not yours',
    });
    expect(asked.map((t) => t?.scope)).toEqual(['project', 'user']);
    expect(f.registry.list({ scope: 'user' })[0]?.tool).toMatchObject({ description: 'theirs', created_by: OTHER });
  });
});
