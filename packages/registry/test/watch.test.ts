import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { waitFor } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { digestSpec, type ScopeChange } from '../src/index.js';
import { BY, fixture, requireBuilt, runChild, spec } from './helpers.js';

/** Collects change batches; `next()` returns the next unread one, failing if none arrives within 10 s (scaled). */
function changes() {
  const batches: ScopeChange[][] = [];
  let read = 0;
  return {
    batches,
    onChange(c: ScopeChange[]) {
      batches.push(c);
    },
    async next(): Promise<ScopeChange[]> {
      await waitFor(`change event ${read + 1}`, () => batches.length > read, { timeoutMs: 10_000 });
      return batches[read++] ?? [];
    },
  };
}

describe('watch', () => {
  it('sees tools that another process forges, promotes and removes', async () => {
    requireBuilt();
    const f = await fixture();
    await f.registry.load();
    const c = changes();
    await f.registry.watch(c.onChange);

    await runChild({ roots: f.roots, op: 'create', scope: 'project', spec: spec() }).result;
    expect(await c.next()).toEqual([{ scope: 'project', names: ['csv.count'] }]);
    expect(f.registry.resolve('csv.count')).toMatchObject({ scope: 'project', tool: { created_by: { persona: 'child' } } });

    await runChild({ roots: f.roots, op: 'promote', name: 'csv.count' }).result;
    expect(await c.next()).toEqual([{ scope: 'user', names: ['csv.count'] }]);
    expect(f.registry.resolve('csv.count')).toMatchObject({ scope: 'project', shadows: ['user'] });

    await runChild({ roots: f.roots, op: 'remove', scope: 'project', name: 'csv.count' }).result;
    expect(await c.next()).toEqual([{ scope: 'project', names: ['csv.count'] }]);
    expect(f.registry.resolve('csv.count')).toMatchObject({ scope: 'user', shadows: [] });
  });

  it('debounces a burst into one batch and does not report its own writes', async () => {
    requireBuilt();
    const f = await fixture();
    await f.registry.load();
    const c = changes();
    await f.registry.watch(c.onChange, { debounceMs: 1000, maxWaitMs: 5000 });

    // Own writes update memory at once and are not reported again.
    await f.registry.create(spec({ name: 'own' }), { scope: 'session', createdBy: BY });
    const specs = ['t.a', 't.b', 't.c', 't.d'].map((name) => spec({ name }));
    await runChild({ roots: f.roots, op: 'createMany', scope: 'session', specs }).result;
    expect(await c.next()).toEqual([{ scope: 'session', names: ['t.a', 't.b', 't.c', 't.d'] }]);
    expect(c.batches).toHaveLength(1);
    expect(f.registry.list({ scope: 'session' }).map((t) => t.tool.name)).toEqual(['own', 't.a', 't.b', 't.c', 't.d']);
  });

  it('reports a file corrupted by hand: one event, the tool drops out, the others stay', async () => {
    const f = await fixture();
    await f.registry.create(spec({ name: 'keep' }), { scope: 'project', createdBy: BY });
    await f.registry.create(spec({ name: 'spoil' }), { scope: 'project', createdBy: BY });
    const c = changes();
    await f.registry.watch(c.onChange);
    const path = join(f.roots.project ?? '', 'spoil.json');
    await writeFile(path, '{"half":');
    expect(await c.next()).toEqual([{ scope: 'project', names: ['spoil'] }]);
    expect(f.events).toEqual([{ type: 'registry.load_failed', scope: 'project', path, reason: expect.stringMatching(/^not valid JSON/) }]);
    expect(f.registry.list().map((t) => t.tool.name)).toEqual(['keep']);
  });

  it('close() stops watching deterministically', async () => {
    requireBuilt();
    const f = await fixture();
    const c = changes();
    await f.registry.watch(c.onChange);
    await expect(f.registry.watch(c.onChange)).rejects.toMatchObject({ code: 'invalid_option' });
    await f.registry.close();
    await f.registry.close();
    await runChild({ roots: f.roots, op: 'create', scope: 'task', spec: spec() }).result;
    // Lets time pass: six debounce periods, time enough to (wrongly) report the tool; a closed
    // watcher that rightly reports nothing gives no event to wait for.
    await new Promise((r) => setTimeout(r, 300));
    expect(c.batches).toEqual([]);
    expect(f.registry.resolve('csv.count')).toBeUndefined();
    // It can watch again after close, and picks up what it missed only on load().
    await f.registry.watch(c.onChange);
    await f.registry.load();
    expect(f.registry.resolve('csv.count')?.scope).toBe('task');
  });
});

/** The inotify watch lines of this process (over all its inotify instances), from /proc/self/fdinfo. */
function inotifyWatchLines(): string[] {
  const lines: string[] = [];
  for (const fd of readdirSync('/proc/self/fd')) {
    let target = '';
    try {
      target = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      continue; // closed meanwhile (the readdir's own descriptor)
    }
    if (target !== 'anon_inode:inotify') continue;
    let info = '';
    try {
      info = readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8');
    } catch {
      continue; // closed meanwhile
    }
    lines.push(...info.split('\n').filter((l) => l.startsWith('inotify wd:')));
  }
  return lines;
}

/** inotify watches this process holds. */
function inotifyWatches(): number {
  return inotifyWatchLines().length;
}

/** The inodes this process watches with inotify (each line gives it in hex: `ino:1a2b`). */
function inotifyWatchedInodes(): Set<number> {
  return new Set(inotifyWatchLines().map((l) => Number.parseInt(/\bino:([0-9a-f]+)/.exec(l)?.[1] ?? '', 16)));
}

describe('watch and missing directories', () => {
  it('creates no scope directory, and sees a tool forged later into one that did not exist', async () => {
    requireBuilt();
    const f = await fixture();
    await f.registry.load();
    const c = changes();
    await f.registry.watch(c.onChange);
    // Watching leaves nothing behind in a project (or home) that has no forge state yet.
    expect(existsSync(join(f.project, '.forge'))).toBe(false);
    expect(existsSync(f.roots.user as string)).toBe(false);

    await runChild({ roots: f.roots, op: 'create', scope: 'project', spec: spec() }).result;
    expect(await c.next()).toEqual([{ scope: 'project', names: ['csv.count'] }]);
    expect(f.registry.resolve('csv.count')).toMatchObject({ scope: 'project' });
  });

  it('follows a directory made one level at a time, and a tool written before its directory was watched', async () => {
    const f = await fixture();
    await f.registry.load();
    const c = changes();
    await f.registry.watch(c.onChange);
    const user = f.roots.user as string;
    // The levels appear one by one, the last with a tool already in it.
    mkdirSync(join(user, '..'), { recursive: true });
    // The watcher has moved down to the level just made: an inotify watch is on its inode.
    const parent = statSync(join(user, '..')).ino;
    await waitFor('the watcher to watch the directory just made', () => inotifyWatchedInodes().has(parent));
    mkdirSync(user);
    await writeByHand(user);
    expect(await c.next()).toEqual([{ scope: 'user', names: ['late'] }]);
    expect(f.registry.resolve('late')?.scope).toBe('user');
  });
});

describe('watch cost', () => {
  it('one inotify watch per scope directory, however many tools it holds', async () => {
    const f = await fixture();
    for (let i = 0; i < 300; i++) await f.registry.create(spec({ name: `t.n${i}` }), { scope: 'project', createdBy: BY });
    const before = inotifyWatches();
    const c = changes();
    await f.registry.watch(c.onChange);
    const scopes = Object.values(f.roots).filter(Boolean).length;
    expect(inotifyWatches() - before).toBeLessThanOrEqual(scopes);
    // And it still sees a change to any one of them.
    await writeFile(join(f.roots.project ?? '', 't.n150.json'), '{"half":');
    expect(await c.next()).toEqual([{ scope: 'project', names: ['t.n150'] }]);
    await f.registry.close();
    expect(inotifyWatches()).toBe(before);
  });
});

describe('watch and hostile names', () => {
  it('reports a hand-dropped file whose name is not a tool name, and keeps going', async () => {
    const f = await fixture();
    const c = changes();
    await f.registry.watch(c.onChange);
    const bad = join(f.roots.user, '1bad.json');
    mkdirSync(f.roots.user, { recursive: true });
    await writeFile(bad, '{}');
    await f.registry.create(spec({ name: 'fine' }), { scope: 'project', createdBy: BY });
    await writeByHand(f.roots.user);
    expect(await c.next()).toEqual([{ scope: 'user', names: ['late'] }]);
    expect(f.events).toContainEqual({
      type: 'registry.load_failed',
      scope: 'user',
      path: bad,
      reason: 'file name "1bad.json" is not a tool name: it must start with a letter (got "1bad")',
    });
  });

  it('never lets a name leave its directory', async () => {
    const f = await fixture();
    for (const name of ['../tools', '../../x', 'a/b']) {
      expect(await f.registry.remove(name, { scope: 'project' })).toMatchObject({ ok: false, kind: 'unknown_tool' });
      expect(await f.registry.promote(name)).toMatchObject({ ok: false, kind: 'unknown_tool' });
      expect(await f.registry.recover(name, 1, { scope: 'user' })).toMatchObject({ ok: false, kind: 'unknown_tool' });
      expect(await f.registry.versions(name, { scope: 'user' })).toEqual([]);
    }
  });
});

/** Writes a valid stored tool `late` straight into `root`, as another program would. */
async function writeByHand(root: string): Promise<void> {
  mkdirSync(root, { recursive: true });
  const s = spec({ name: 'late' });
  const tool = {
    ...s,
    version: 1,
    digest: digestSpec(s),
    created_at: '2030-01-01T00:00:00.000Z',
    created_by: BY,
    scope: 'user',
    state: 'active',
  };
  await writeFile(join(root, 'late.json'), JSON.stringify(tool));
}

describe('watch errors', () => {
  it('hands what onChange throws to onError instead of crashing', async () => {
    const f = await fixture();
    const errors: unknown[] = [];
    let calls = 0;
    await f.registry.watch(
      () => {
        calls++;
        throw new Error('listener bug');
      },
      { onError: (e) => errors.push(e) },
    );
    await writeByHand(f.roots.user);
    await waitFor('onError to receive what onChange threw', () => errors.length > 0, { timeoutMs: 10_000 });
    expect(calls).toBe(1);
    expect(errors).toEqual([new Error('listener bug')]);
    expect(f.registry.resolve('late')?.scope).toBe('user');
  });
});
