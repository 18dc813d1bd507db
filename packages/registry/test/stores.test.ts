import { join } from 'node:path';
import { waitFor } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { checkStoredRecord, createRegistry, fileToolStore, type ReadResult, type ToolStore } from '../src/index.js';
import { BUILTINS, BY, fixture, requireBuilt, runChild, spec, tempDir } from './helpers.js';

describe('createRegistry over stores', () => {
  it('takes a store per scope instead of a directory, and refuses one that keeps another scope', async () => {
    const dir = await tempDir();
    const reg = createRegistry({ stores: { project: fileToolStore('project', join(dir, 'p'), BUILTINS) }, builtins: BUILTINS });
    expect(reg.roots).toEqual({});
    await reg.load();
    expect(await reg.create(spec(), { scope: 'project', createdBy: BY })).toMatchObject({
      ok: true,
      tool: { version: 1, scope: 'project' },
    });
    expect(reg.resolve('csv.count')?.scope).toBe('project');
    await expect(reg.create(spec(), { scope: 'user', createdBy: BY })).rejects.toMatchObject({ code: 'invalid_option' });
    expect(() => createRegistry({ stores: { user: fileToolStore('project', dir) } })).toThrow(
      expect.objectContaining({ code: 'invalid_option', message: expect.stringContaining('keeps the project scope') }),
    );
  });

  it('a store given for a scope wins over its directory in roots', async () => {
    const f = await fixture();
    const elsewhere = await tempDir();
    const reg = f.open({ stores: { user: fileToolStore('user', elsewhere, BUILTINS) } });
    await reg.create(spec(), { scope: 'user', createdBy: BY });
    expect(await fileToolStore('user', elsewhere).read('csv.count')).toMatchObject({ status: 'ok' });
    expect(await fileToolStore('user', f.roots.user).read('csv.count')).toEqual({ status: 'missing' });
  });
});

/** A file store whose `read` can be held after it has read (so what it returns is old by then). */
function gated(inner: ToolStore) {
  let gate: Promise<void> | undefined;
  let open: () => void = () => {};
  let reads = 0;
  let inflight = 0;
  const store: ToolStore = {
    ...inner,
    async read(name): Promise<ReadResult> {
      reads++;
      inflight++;
      try {
        const r = await inner.read(name);
        if (gate) await gate;
        return r;
      } finally {
        inflight--;
      }
    },
  };
  return {
    store,
    hold() {
      gate = new Promise((resolve) => (open = resolve));
    },
    release() {
      gate = undefined;
      open();
    },
    get reads() {
      return reads;
    },
    get inflight() {
      return inflight;
    },
  };
}

describe('watch refresh and own writes', () => {
  it('a watch re-read that a write of this registry overtakes does not put the older tool back', async () => {
    requireBuilt();
    const f = await fixture();
    const g = gated(fileToolStore('project', f.roots.project as string, BUILTINS));
    const reg = f.open({ stores: { project: g.store } });
    await reg.load();
    await reg.create(spec({ description: 'v1' }), { scope: 'project', createdBy: BY });
    // What memory held each time a change was reported: an older tool put back would show here.
    const reported: number[] = [];
    await reg.watch(() => reported.push(reg.resolve('csv.count')?.tool.version ?? 0), { debounceMs: 10 });
    g.hold();
    const before = g.reads;
    // Another process writes v2; the watcher's re-read sees it, then is held.
    await runChild({ roots: f.roots, op: 'overwrite', scope: 'project', spec: spec({ description: 'v2' }) }).result;
    await waitFor('the watcher to re-read', () => g.inflight > 0 && g.reads > before, { timeoutMs: 10_000, intervalMs: 10 });
    // Meanwhile this registry writes v3 (its own write does not go through read).
    expect(await reg.create(spec({ description: 'v3' }), { scope: 'project', createdBy: BY, overwrite: true })).toMatchObject({
      ok: true,
      tool: { version: 3 },
    });
    // The held re-read returns what it read (v2), sees that v3 overtook it, and reads again: a
    // read begun after the release, and none in flight, is that re-read done.
    const held = g.reads;
    g.release();
    await waitFor('the overtaken re-read to read again and finish', () => g.reads > held && g.inflight === 0, {
      timeoutMs: 10_000,
      intervalMs: 10,
    });
    expect(reg.resolve('csv.count')?.tool).toMatchObject({ version: 3, description: 'v3' });
    // The re-read that v3 overtook read again: v2 never came back, so nothing changed to report.
    expect(reported).toEqual([]);
  });
});

describe('checkStoredRecord', () => {
  const context = { name: 'csv.count', scope: 'user' as const, builtins: new Set(BUILTINS), path: 'db#user/csv.count' };
  it('gives the tool with the store’s scope, or why the record is unusable', async () => {
    const f = await fixture();
    const made = await f.registry.create(spec(), { scope: 'project', createdBy: BY });
    if (!made.ok) throw new Error(made.message);
    const record = JSON.parse(JSON.stringify(made.tool));
    expect(checkStoredRecord(record, context)).toEqual({ status: 'ok', tool: { ...made.tool, scope: 'user' } });
    expect(checkStoredRecord({ half: true }, context)).toMatchObject({
      status: 'bad',
      failure: { path: 'db#user/csv.count', reason: expect.stringMatching(/^not a valid tool spec: /), name: 'csv.count' },
    });
    expect(checkStoredRecord(record, { ...context, name: 'other' })).toEqual({
      status: 'bad',
      failure: { path: 'db#user/csv.count', reason: 'stored under "other" but the spec is named "csv.count"', name: 'other' },
    });
    expect(checkStoredRecord({ ...record, name: 'forge_tool' }, { ...context, name: 'forge_tool' })).toEqual({
      status: 'bad',
      failure: { path: 'db#user/csv.count', reason: '"forge_tool" is a built-in name; a stored tool cannot shadow it', name: 'forge_tool' },
    });
  });
});
