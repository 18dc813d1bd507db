import { mkdir, readdir, readFile, stat, symlink, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createRegistry, digestSpec, type StoredTool } from '../src/index.js';
import { BY, fixture, requireBuilt, runChild, spec, startTogether, tempDir } from './helpers.js';

async function mode(path: string): Promise<number> {
  return (await stat(path)).mode & 0o777;
}

async function readJson(path: string): Promise<StoredTool> {
  return JSON.parse(await readFile(path, 'utf8')) as StoredTool;
}

describe('create', () => {
  it('stamps and writes the tool atomically with modes 0600/0700', async () => {
    const f = await fixture();
    const r = await f.registry.create(spec(), { scope: 'task', createdBy: BY });
    const expected = {
      ...spec(),
      version: 1,
      digest: digestSpec(spec()),
      created_at: '2030-01-02T03:04:05.000Z',
      created_by: BY,
      scope: 'task',
      state: 'active',
    };
    expect(r).toEqual({ ok: true, tool: expected });
    const root = f.roots.task ?? '';
    expect(await readJson(join(root, 'csv.count.json'))).toEqual(expected);
    expect(await mode(join(root, 'csv.count.json'))).toBe(0o600);
    // Every directory the registry created on the way is private.
    for (const d of [
      '.forge',
      '.forge/sessions',
      '.forge/sessions/s1',
      '.forge/sessions/s1/tasks/t1',
      '.forge/sessions/s1/tasks/t1/tools',
    ]) {
      expect(await mode(join(f.project, d))).toBe(0o700);
    }
    expect(await mode(join(root, '.versions'))).toBe(0o700);
    expect(await mode(join(root, '.locks'))).toBe(0o700);
    // No temp file or lock is left behind.
    expect((await readdir(root)).sort()).toEqual(['.locks', '.versions', 'csv.count.json']);
    expect(await readdir(join(root, '.locks'))).toEqual([]);
    expect(f.registry.resolve('csv.count')).toEqual({ tool: expected, scope: 'task', shadows: [], wireName: 'csv__count' });
  });

  it('ignores stamps in the submitted spec', async () => {
    const f = await fixture();
    const r = await f.registry.create(
      { ...spec(), version: 40, state: 'retired', scope: 'user', origin: { project: '/x', digest: digestSpec(spec()) } },
      { scope: 'project', createdBy: BY },
    );
    expect(r).toMatchObject({ ok: true, tool: { version: 1, state: 'active', scope: 'project' } });
    if (r.ok) expect(r.tool.origin).toBeUndefined();
  });

  it('returns validation_failed and name_forbidden without touching the disk', async () => {
    const f = await fixture();
    expect(await f.registry.create(spec({ runtime: 'ruby' }), { scope: 'user', createdBy: BY })).toMatchObject({
      ok: false,
      kind: 'validation_failed',
    });
    expect(await f.registry.create(spec({ name: 'forge_call' }), { scope: 'user', createdBy: BY })).toEqual({
      ok: false,
      kind: 'name_forbidden',
      message: '"forge_call" is a built-in tool name and cannot be forged; choose another name',
    });
    await expect(stat(f.roots.user)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('refuses an existing name with name_taken unless overwrite', async () => {
    const f = await fixture();
    await f.registry.create(spec(), { scope: 'project', createdBy: BY });
    const again = await f.registry.create(spec({ description: 'other' }), { scope: 'project', createdBy: BY });
    expect(again).toEqual({
      ok: false,
      kind: 'name_taken',
      message: 'tool "csv.count" already exists in the project scope (version 1); choose another name or pass overwrite to replace it',
    });
    expect(f.registry.resolve('csv.count')?.tool.description).toBe(spec().description);
  });

  it('8 processes creating the same name at once: exactly one wins, the others get name_taken', async () => {
    requireBuilt();
    const f = await fixture();
    const go = join(await tempDir(), 'go');
    const runs = Array.from({ length: 8 }, (_, i) =>
      runChild({ roots: f.roots, op: 'create', scope: 'project', spec: spec({ description: `from child ${i}` }), go }),
    );
    await startTogether(go, 8);
    const results = (await Promise.all(runs.map((r) => r.result))) as Array<{ ok: boolean; kind?: string; tool?: StoredTool }>;
    const winners = results.filter((r) => r.ok);
    expect(winners).toHaveLength(1);
    expect(results.filter((r) => !r.ok).map((r) => r.kind)).toEqual(Array(7).fill('name_taken'));
    const onDisk = await readJson(join(f.roots.project ?? '', 'csv.count.json'));
    expect(onDisk).toEqual(winners[0]?.tool);
    expect(onDisk.version).toBe(1);
  });

  it('throws root_unusable when the scope directory cannot be created', async () => {
    const dir = await tempDir();
    const file = join(dir, 'not-a-dir');
    await writeFile(file, 'x');
    const registry = createRegistry({ roots: { user: join(file, 'tools') } });
    await expect(registry.create(spec(), { scope: 'user', createdBy: BY })).rejects.toMatchObject({
      name: 'RegistryError',
      code: 'root_unusable',
    });
    await expect(createRegistry({ roots: { user: file } }).load()).rejects.toMatchObject({ code: 'root_unusable' });
  });

  it('throws invalid_option for a scope that is not configured', async () => {
    const registry = createRegistry({ roots: { user: await tempDir() } });
    await expect(registry.create(spec(), { scope: 'task', createdBy: BY })).rejects.toMatchObject({ code: 'invalid_option' });
  });
});

describe('overwrite, remove, versions and recover', () => {
  it('overwrite bumps the version and keeps the previous one recoverable', async () => {
    const f = await fixture();
    await f.registry.create(spec(), { scope: 'user', createdBy: BY });
    const v2 = await f.registry.create(spec({ description: 'v2' }), { scope: 'user', createdBy: BY, overwrite: true });
    expect(v2).toMatchObject({ ok: true, tool: { version: 2, description: 'v2' }, previous: { version: 1, digest: digestSpec(spec()) } });
    const versions = await f.registry.versions('csv.count', { scope: 'user' });
    expect(versions.map((v) => [v.version, v.current, v.tool?.description])).toEqual([
      [1, false, spec().description],
      [2, true, 'v2'],
    ]);
    expect(versions[0]?.path).toBe(join(f.roots.user, '.versions', 'csv.count', '1.json'));
    expect(await mode(versions[0]?.path ?? '')).toBe(0o600);

    const back = await f.registry.recover('csv.count', 1, { scope: 'user' });
    expect(back).toMatchObject({
      ok: true,
      tool: { version: 3, description: spec().description, digest: digestSpec(spec()) },
      previous: { version: 2 },
    });
    expect(f.registry.resolve('csv.count')?.tool.version).toBe(3);
    expect((await f.registry.versions('csv.count', { scope: 'user' })).map((v) => v.version)).toEqual([1, 2, 3]);
    expect(await f.registry.recover('csv.count', 9, { scope: 'user' })).toMatchObject({ ok: false, kind: 'unknown_tool' });
  });

  it('remove keeps the removed version recoverable; a new create continues the numbering', async () => {
    const f = await fixture();
    await f.registry.create(spec(), { scope: 'session', createdBy: BY });
    const removed = await f.registry.remove('csv.count', { scope: 'session' });
    expect(removed).toMatchObject({ ok: true, removed: { name: 'csv.count', version: 1 } });
    expect(f.registry.resolve('csv.count')).toBeUndefined();
    expect(await readdir(f.roots.session ?? '')).not.toContain('csv.count.json');
    expect(await f.registry.remove('csv.count', { scope: 'session' })).toMatchObject({ ok: false, kind: 'unknown_tool' });
    expect((await f.registry.versions('csv.count', { scope: 'session' })).map((v) => [v.version, v.current])).toEqual([[1, false]]);

    const again = await f.registry.create(spec({ description: 'new' }), { scope: 'session', createdBy: BY });
    expect(again).toMatchObject({ ok: true, tool: { version: 2 } });
    const rec = await f.registry.recover('csv.count', 1, { scope: 'session' });
    expect(rec).toMatchObject({ ok: true, tool: { version: 3, description: spec().description } });
  });

  it('never loses an acknowledged overwrite: 8 processes overwriting at once all land in the history', async () => {
    requireBuilt();
    const f = await fixture();
    await f.registry.create(spec(), { scope: 'project', createdBy: BY });
    const go = join(await tempDir(), 'go');
    const runs = Array.from({ length: 8 }, (_, i) =>
      runChild({ roots: f.roots, op: 'overwrite', scope: 'project', spec: spec({ description: `child ${i}` }), go }),
    );
    await startTogether(go, 8);
    const results = (await Promise.all(runs.map((r) => r.result))) as Array<{ ok: boolean; tool: StoredTool }>;
    expect(results.every((r) => r.ok)).toBe(true);
    expect(results.map((r) => r.tool.version).sort((a, b) => a - b)).toEqual([2, 3, 4, 5, 6, 7, 8, 9]);
    const versions = await f.registry.versions('csv.count', { scope: 'project' });
    expect(versions.map((v) => v.version)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]);
    for (const r of results) expect(versions.find((v) => v.version === r.tool.version)?.tool).toEqual(r.tool);
  });
});

describe('load', () => {
  async function put(root: string, file: string, value: unknown): Promise<string> {
    await mkdir(root, { recursive: true });
    const path = join(root, file);
    await writeFile(path, typeof value === 'string' ? value : JSON.stringify(value));
    return path;
  }

  function stored(over: Record<string, unknown> = {}): StoredTool {
    const s = spec(over);
    return {
      ...s,
      version: 1,
      digest: digestSpec(s),
      created_at: '2030-01-01T00:00:00.000Z',
      created_by: BY,
      scope: 'project',
      state: 'active',
    };
  }

  it('skips each broken file with one event naming its path and reason, and loads the others', async () => {
    const f = await fixture();
    const root = f.roots.project ?? '';
    await put(root, 'good.json', stored({ name: 'good' }));
    await put(root, 'ns.good2.json', stored({ name: 'ns.good2' }));
    const badJson = await put(root, 'broken.json', '{"name": "broken",');
    const wrongName = await put(root, 'alias.json', stored({ name: 'other' }));
    const invalid = await put(root, 'invalid.json', { ...stored({ name: 'invalid' }), runtime: 42 });
    const noStamps = await put(root, 'bare.json', spec({ name: 'bare' }));
    const builtin = await put(root, 'forge_tool.json', stored({ name: 'forge_tool' }));
    const dir = join(root, 'adir.json');
    await mkdir(dir);
    const link = join(root, 'linked.json');
    await symlink(join(root, 'good.json'), link);
    // Not tool files: ignored without an event.
    await put(root, 'README.txt', 'notes');
    await put(root, '.tmp-123-abc', '{');

    const report = await f.registry.load();
    expect(report.loaded).toEqual({ task: 0, session: 0, project: 2, user: 0 });
    expect(f.registry.list().map((t) => t.tool.name)).toEqual(['good', 'ns.good2']);
    const byPath = Object.fromEntries(f.events.map((e) => [e.path, e]));
    expect(f.events).toHaveLength(7);
    expect(f.events.every((e) => e.type === 'registry.load_failed' && e.scope === 'project')).toBe(true);
    expect(byPath[badJson]?.reason).toMatch(/^not valid JSON: /);
    expect(byPath[wrongName]?.reason).toBe('file name "alias.json" does not match the spec name "other"');
    expect(byPath[invalid]?.reason).toBe('not a valid tool spec: runtime: must be string');
    expect(byPath[noStamps]?.reason).toBe("not a valid tool spec: spec: must have required property 'version'");
    expect(byPath[builtin]?.reason).toBe('"forge_tool" is a built-in name; a file cannot shadow it');
    expect(byPath[dir]?.reason).toBe('not a regular file (a directory)');
    expect(byPath[link]?.reason).toBe('not a regular file (a symbolic link)');
    expect(report.failed).toHaveLength(7);
  });

  it('compiles no schema and checks no digest while loading (that is the caller’s job at call time)', async () => {
    const f = await fixture();
    const tool = stored({ name: 'lazy', input_schema: { type: 'object', properties: { n: { type: 'strng' } } } });
    await put(f.roots.user, 'lazy.json', { ...tool, digest: `sha256:${'f'.repeat(64)}` });
    await f.registry.load();
    expect(f.events).toEqual([]);
    expect(f.registry.resolve('lazy')?.tool.name).toBe('lazy');
  });

  it('takes the scope from the directory, not from the file', async () => {
    const f = await fixture();
    await put(f.roots.user, 'moved.json', stored({ name: 'moved' }));
    await f.registry.load();
    expect(f.registry.resolve('moved')).toMatchObject({ scope: 'user', tool: { scope: 'user' } });
  });

  it('reads missing scope directories as empty and creates nothing', async () => {
    const f = await fixture();
    expect(await f.registry.load()).toEqual({ loaded: { task: 0, session: 0, project: 0, user: 0 }, failed: [] });
    expect(await readdir(f.project)).toEqual([]);
  });
});

describe('temporary files of writes that died', () => {
  it('load removes stale ones (over an hour old) and leaves fresh ones to their writers', async () => {
    const { registry: reg, roots } = await fixture();
    await mkdir(roots.project as string, { recursive: true });
    const stale = join(roots.project as string, '.tmp-4242-deadbeef');
    const fresh = join(roots.project as string, '.tmp-4243-cafebabe');
    await writeFile(stale, '{"half": ');
    await writeFile(fresh, '{"half": ');
    const hourAgo = new Date(Date.now() - 2 * 3600_000);
    await utimes(stale, hourAgo, hourAgo);
    const report = await reg.load();
    expect(report.failed).toEqual([]);
    const names = await readdir(roots.project as string);
    expect(names).not.toContain('.tmp-4242-deadbeef');
    expect(names).toContain('.tmp-4243-cafebabe');
  });
});

describe('create keeps its own copy', () => {
  it('is not affected by later changes to the submitted object, and refuses non-JSON data', async () => {
    const f = await fixture();
    const s = spec();
    await f.registry.create(s, { scope: 'user', createdBy: BY });
    (s.input_schema as { type: string }).type = 'array';
    expect(f.registry.resolve('csv.count')?.tool.input_schema.type).toBe('object');
    const bad = await f.registry.create({ ...spec({ name: 'big' }), meta: { timeout_ms: 10n } }, { scope: 'user', createdBy: BY });
    expect(bad).toMatchObject({ ok: false, kind: 'validation_failed', message: expect.stringContaining('spec: must be plain JSON data') });
  });
});

describe('environment problems', () => {
  it('overwriting where a directory sits in place of the file throws root_unusable, and the others still work', async () => {
    const f = await fixture();
    await mkdir(join(f.roots.user, 'csv.count.json'), { recursive: true });
    await expect(f.registry.create(spec(), { scope: 'user', createdBy: BY, overwrite: true })).rejects.toMatchObject({
      code: 'root_unusable',
    });
    expect(await f.registry.create(spec(), { scope: 'user', createdBy: BY })).toMatchObject({ ok: false, kind: 'name_taken' });
    expect((await f.registry.create(spec({ name: 'other' }), { scope: 'user', createdBy: BY })).ok).toBe(true);
  });
});
