/**
 * Wire names: the name an MCP client sees for a tool (`^[a-zA-Z0-9_-]{1,64}$`), how it is derived
 * from the forge name, and the forge-time refusal of two tools that would share one.
 */
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isValidToolName, type StoredTool, WIRE_NAME_PATTERN, wireName } from '../src/index.js';
import { BY, fixture, requireBuilt, runChild, spec, startTogether, tempDir } from './helpers.js';

/** A 60-character name with 5 dots: 65 characters once flattened, so its wire name is hashed. */
const LONG = 'analytics.reports.quarterly.revenue_by_region.eur.normalised';
/** Its wire name, worked out by hand from the rule (pinned: a change would rename tools on the wire). */
const LONG_WIRE = 'analytics__reports__quarterly__revenue_by_region__eur___51b5eb12';

/** A small seeded PRNG (mulberry32), so a failing case can be replayed. */
function prng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const LETTERS = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
const REST = `${LETTERS}0123456789_-.`;

/** A random valid tool name of 1–64 characters, dot-heavy so many need the hash. */
function randomName(rand: () => number): string {
  for (;;) {
    // half of them long (48–64 characters), where a few dots already pass 64 once flattened
    const len = rand() < 0.5 ? 48 + Math.floor(rand() * 17) : 1 + Math.floor(rand() * 64);
    let s = LETTERS[Math.floor(rand() * LETTERS.length)] as string;
    while (s.length < len) {
      const pool = rand() < 0.2 && !s.endsWith('.') ? '.' : REST;
      s += pool[Math.floor(rand() * pool.length)];
    }
    if (isValidToolName(s)) return s;
  }
}

describe('wireName', () => {
  it('maps dots to "__", keeps names without dots, and hashes what would exceed 64 characters', () => {
    expect(wireName('code.csv_stats')).toBe('code__csv_stats');
    expect(wireName('greet')).toBe('greet');
    expect(wireName('a.b.c')).toBe('a__b__c');
    expect(wireName('Fx-9.y_z')).toBe('Fx-9__y_z');
    const sixtyFour = `a${'b'.repeat(63)}`;
    expect(wireName(sixtyFour)).toBe(sixtyFour);
    // 60 characters with 4 dots flatten to exactly 64: no hash yet
    expect(wireName('analytics.reports.quarterly.revenue_by_region.eur_normalised')).toBe(
      'analytics__reports__quarterly__revenue_by_region__eur_normalised',
    );
    expect(wireName(LONG)).toBe(LONG_WIRE);
    expect(LONG_WIRE).toBe(`${LONG.replaceAll('.', '__').slice(0, 55)}_${createHash('sha256').update(LONG).digest('hex').slice(0, 8)}`);
    // two long names that share the first 55 flattened characters still differ by their hash
    expect(wireName('analytics.reports.quarterly.revenue_by_region.eur.normalized')).toBe(
      'analytics__reports__quarterly__revenue_by_region__eur___d56e0dc7',
    );
  });

  it('always gives a name matching ^[a-zA-Z0-9_-]{1,64}$, deterministically (20 000 generated names)', () => {
    const rand = prng(14);
    const seen = new Map<string, string>();
    let hashed = 0;
    for (let i = 0; i < 20_000; i++) {
      const name = randomName(rand);
      const wire = wireName(name);
      expect(wire).toMatch(WIRE_NAME_PATTERN);
      expect(wireName(name)).toBe(wire);
      const flat = name.replaceAll('.', '__');
      if (flat.length <= 64) expect(wire).toBe(flat);
      else {
        hashed++;
        expect(wire).toHaveLength(64);
        expect(wire.slice(0, 55)).toBe(flat.slice(0, 55));
        expect(wire.slice(55)).toMatch(/^_[0-9a-f]{8}$/);
      }
      if (!name.includes('.')) expect(wire).toBe(name);
      // names whose flat forms differ never share a wire name (in practice: 32 bits of hash)
      const before = seen.get(wire);
      if (before !== undefined && before !== name) expect(before.replaceAll('.', '__')).toBe(flat);
      seen.set(wire, name);
    }
    expect(hashed).toBeGreaterThan(1000); // the long-name branch is exercised, not just present
  });

  it('throws invalid_option for a string that is not a tool name, rather than returning a bad wire name', () => {
    for (const bad of ['', '1abc', 'a..b', 'a.', 'a/b', 'x'.repeat(65), 'a b']) {
      expect(() => wireName(bad)).toThrow(expect.objectContaining({ name: 'RegistryError', code: 'invalid_option' }));
    }
  });
});

describe('forge-time refusal of a shared wire name', () => {
  it('refuses a__b beside a.b in the same scope, naming both tools and the wire name', async () => {
    const f = await fixture();
    expect((await f.registry.create(spec({ name: 'a.b' }), { scope: 'project', createdBy: BY })).ok).toBe(true);
    const r = await f.registry.create(spec({ name: 'a__b' }), { scope: 'project', createdBy: BY });
    expect(r).toEqual({
      ok: false,
      kind: 'name_taken',
      message:
        'tool "a__b" and the existing tool "a.b" (project scope) would both be served to MCP clients as "a__b" (on the wire every "." becomes "__", and wire names are compared regardless of case); choose another name for "a__b"',
    });
    expect(f.registry.resolve('a__b')).toBeUndefined();
    // overwrite does not make another name the same tool
    expect(await f.registry.create(spec({ name: 'a__b' }), { scope: 'project', createdBy: BY, overwrite: true })).toMatchObject({
      ok: false,
      kind: 'name_taken',
    });
  });

  it('refuses across every scope, regardless of case, and between two dotted names (a_.b and a._b)', async () => {
    const f = await fixture();
    await f.registry.create(spec({ name: 'code.csv_stats' }), { scope: 'user', createdBy: BY });
    for (const scope of ['project', 'session', 'task'] as const) {
      expect(await f.registry.create(spec({ name: 'code__csv_stats' }), { scope, createdBy: BY })).toMatchObject({
        ok: false,
        kind: 'name_taken',
        message: expect.stringContaining(
          'the existing tool "code.csv_stats" (user scope) would both be served to MCP clients as "code__csv_stats"',
        ),
      });
    }
    expect(await f.registry.create(spec({ name: 'Code__CSV_stats' }), { scope: 'task', createdBy: BY })).toMatchObject({
      ok: false,
      kind: 'name_taken',
      message: expect.stringContaining(
        'would be served to MCP clients as "Code__CSV_stats" and "code__csv_stats", which differ only by case',
      ),
    });
    await f.registry.create(spec({ name: 'a_.b' }), { scope: 'session', createdBy: BY });
    expect(await f.registry.create(spec({ name: 'a._b' }), { scope: 'project', createdBy: BY })).toMatchObject({
      ok: false,
      kind: 'name_taken',
      message: expect.stringContaining('"a_.b" (session scope) would both be served to MCP clients as "a___b"'),
    });
  });

  it('lets the same name shadow itself in another scope (that is not a collision)', async () => {
    const f = await fixture();
    await f.registry.create(spec({ name: 'a.b' }), { scope: 'user', createdBy: BY });
    for (const scope of ['project', 'session', 'task'] as const) {
      expect(await f.registry.create(spec({ name: 'a.b' }), { scope, createdBy: BY })).toMatchObject({ ok: true });
    }
    expect(f.registry.resolve('a.b')).toMatchObject({ scope: 'task', shadows: ['session', 'project', 'user'], wireName: 'a__b' });
    expect(f.registry.byWireName('a__b').map((r) => [r.tool.name, r.scope])).toEqual([['a.b', 'task']]);
  });

  it('refuses a 64-character name equal to a long name’s hashed wire name, both ways', async () => {
    const f = await fixture();
    expect((await f.registry.create(spec({ name: LONG }), { scope: 'project', createdBy: BY })).ok).toBe(true);
    expect(await f.registry.create(spec({ name: LONG_WIRE }), { scope: 'project', createdBy: BY })).toMatchObject({
      ok: false,
      kind: 'name_taken',
      message: expect.stringContaining(`would both be served to MCP clients as "${LONG_WIRE}"`),
    });
    const g = await fixture();
    expect((await g.registry.create(spec({ name: LONG_WIRE }), { scope: 'user', createdBy: BY })).ok).toBe(true);
    expect(await g.registry.create(spec({ name: LONG }), { scope: 'session', createdBy: BY })).toMatchObject({
      ok: false,
      kind: 'name_taken',
    });
    // the long name's sibling, same 55-character prefix, another hash: no collision
    expect(
      await g.registry.create(spec({ name: 'analytics.reports.quarterly.revenue_by_region.eur.normalized' }), {
        scope: 'session',
        createdBy: BY,
      }),
    ).toMatchObject({ ok: true });
  });

  it('refuses a name whose wire name a built-in has (regardless of case); the built-in itself stays name_forbidden', async () => {
    const f = await fixture();
    expect(await f.registry.create(spec({ name: 'FORGE_TOOL' }), { scope: 'project', createdBy: BY })).toEqual({
      ok: false,
      kind: 'name_taken',
      message:
        'tool "FORGE_TOOL" and the built-in tool "forge_tool" would be served to MCP clients as "FORGE_TOOL" and "forge_tool", which differ only by case (on the wire every "." becomes "__", and wire names are compared regardless of case); choose another name for "FORGE_TOOL"',
    });
    expect(await f.registry.create(spec({ name: 'forge_tool' }), { scope: 'project', createdBy: BY })).toMatchObject({
      kind: 'name_forbidden',
    });
    // forge.tool is not forge_tool on the wire (forge__tool): allowed
    expect(await f.registry.create(spec({ name: 'forge.tool' }), { scope: 'project', createdBy: BY })).toMatchObject({ ok: true });
  });

  it('sees a twin another process wrote since this registry loaded (the directory is read under the lock)', async () => {
    const f = await fixture();
    await f.registry.load();
    expect((await f.open().create(spec({ name: 'a.b' }), { scope: 'project', createdBy: BY })).ok).toBe(true);
    expect(f.registry.wireVariantOf('a__b')).toBeUndefined(); // not reloaded
    expect(await f.registry.create(spec({ name: 'a__b' }), { scope: 'project', createdBy: BY })).toMatchObject({
      ok: false,
      kind: 'name_taken',
      message: expect.stringContaining('the existing tool "a.b" (project scope)'),
    });
  });

  it('concurrent creates of a.b, a__b and A__B in three scopes of one registry: exactly one wins', async () => {
    // Each scope has its own directory and locks: only the registry's record of writes in
    // flight keeps two of them from both deciding before memory has either.
    let inFlight = 0;
    for (let round = 0; round < 10; round++) {
      const f = await fixture();
      const results = await Promise.all([
        f.registry.create(spec({ name: 'a.b' }), { scope: 'session', createdBy: BY }),
        f.registry.create(spec({ name: 'a__b' }), { scope: 'project', createdBy: BY }),
        f.registry.create(spec({ name: 'A__B' }), { scope: 'user', createdBy: BY }),
      ]);
      expect(results.filter((r) => r.ok)).toHaveLength(1);
      expect(results.filter((r) => !r.ok).map((r) => !r.ok && r.kind)).toEqual(['name_taken', 'name_taken']);
      if (results.some((r) => !r.ok && /being written now/.test(r.message))) inFlight++;
    }
    expect(inFlight).toBeGreaterThan(0);
  });

  it('8 processes racing a.b against a__b in one scope, 24 pairs each: exactly one of each pair wins', async () => {
    // With the old per-name lock (a.b and a__b took different locks) about one pair in five got
    // both names written here; with the lock colliding names share, none does.
    requireBuilt();
    const f = await fixture();
    const go = join(await tempDir(), 'go');
    const pairs = 24;
    const runs = Array.from({ length: 8 }, (_, i) =>
      runChild({
        roots: f.roots,
        op: 'createMany',
        scope: 'project',
        specs: Array.from({ length: pairs }, (_, k) => spec({ name: i % 2 ? `race${k}.x` : `race${k}__x` })),
        go,
      }),
    );
    await startTogether(go, 8);
    const results = (await Promise.all(runs.map((r) => r.result))) as Array<Array<{ ok: boolean; kind?: string; tool?: StoredTool }>>;
    for (let k = 0; k < pairs; k++) {
      const outcomes = results.map((r) => r[k]);
      expect(
        outcomes.filter((r) => r?.ok),
        `pair ${k}`,
      ).toHaveLength(1);
      expect(outcomes.filter((r) => !r?.ok).map((r) => r?.kind)).toEqual(Array(7).fill('name_taken'));
    }
    const fresh = f.open();
    await fresh.load();
    expect(fresh.list()).toHaveLength(pairs);
    expect(fresh.list().filter((t) => t.wireConflict)).toEqual([]);
  });

  it('promote refuses a tool whose wire name a user tool has (promote_conflict, naming both)', async () => {
    const f = await fixture();
    await f.registry.create(spec({ name: 'a__b' }), { scope: 'user', createdBy: BY });
    // a project a.b written by hand beside it (a registry would have refused it)
    const twin = await f.open({ roots: { project: f.roots.project as string } }).create(spec({ name: 'a.b' }), {
      scope: 'project',
      createdBy: BY,
    });
    expect(twin.ok).toBe(true);
    await f.registry.load();
    expect(await f.registry.promote('a.b')).toEqual({
      ok: false,
      kind: 'promote_conflict',
      message:
        'tool "a.b" and the existing tool "a__b" (user scope) would both be served to MCP clients as "a__b" (on the wire every "." becomes "__", and wire names are compared regardless of case); rename the tool before promoting it',
    });
  });

  it('recover refuses a version whose wire name another tool took meanwhile', async () => {
    const f = await fixture();
    await f.registry.create(spec({ name: 'a.b' }), { scope: 'project', createdBy: BY });
    expect((await f.registry.remove('a.b', { scope: 'project' })).ok).toBe(true);
    await f.registry.create(spec({ name: 'a__b' }), { scope: 'project', createdBy: BY });
    expect(await f.registry.recover('a.b', 1, { scope: 'project' })).toMatchObject({
      ok: false,
      kind: 'name_taken',
      message: expect.stringContaining('"a__b" (project scope)'),
    });
  });
});

describe('listings and lookups by wire name', () => {
  it('every row carries its wireName; twins written before the check load, are marked, and resolve by forge name', async () => {
    const f = await fixture();
    const made = await f.registry.create(spec({ name: 'a.b' }), { scope: 'project', createdBy: BY });
    if (!made.ok) throw new Error(made.message);
    const copy = (name: string) => ({ ...made.tool, name }) as StoredTool;
    // files written by an older forge, which did not check wire names
    writeFileSync(join(f.roots.project as string, 'a__b.json'), JSON.stringify(copy('a__b')));
    writeFileSync(join(f.roots.project as string, 'x_.y.json'), JSON.stringify(copy('x_.y')));
    writeFileSync(join(f.roots.project as string, 'x._y.json'), JSON.stringify(copy('x._y')));
    const fresh = f.open();
    expect((await fresh.load()).failed).toEqual([]);
    expect(fresh.list().map((t) => [t.tool.name, t.wireName, t.wireConflict])).toEqual([
      ['a.b', 'a__b', ['a__b']], // a__b is the forge name of the other: it keeps the wire name
      ['a__b', 'a__b', undefined],
      ['x._y', 'x___y', ['x_.y']], // neither is named x___y: neither is served under it
      ['x_.y', 'x___y', ['x._y']],
    ]);
    expect(fresh.byWireName('a__b').map((r) => r.tool.name)).toEqual(['a.b', 'a__b']);
    expect(fresh.byWireName('A__b')).toEqual([]);
    expect(fresh.wireVariantOf('a.b')?.tool.name).toBe('a__b');
    // the very name with overwrite still replaces beside its twin
    expect(
      await fresh.create(spec({ name: 'a.b', description: 'v2' }), { scope: 'project', createdBy: BY, overwrite: true }),
    ).toMatchObject({
      ok: true,
    });
    expect(fresh.list({ scope: 'project' }).map((t) => t.wireName)).toEqual(['a__b', 'a__b', 'x___y', 'x___y']);
  });
});
