import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import {
  type CreatedBy,
  createRegistry,
  digestSpec,
  type ReadResult,
  type Scope,
  type StoredTool,
  type StoreFailure,
  type ToolSpec,
  type ToolStore,
} from '@forge/registry';
import { describe, expect, it, onTestFinished } from 'vitest';
import { tempDir } from './temp.js';

/**
 * How a child process opens the store of a {@link ToolStoreHarness}: it calls
 * `(await import(module))[export](...args, scope, builtins)` and gets a `ToolStore` over the same
 * storage as `open`. `module` is an absolute path or a package specifier; `args` are JSON.
 */
export interface ChildOpen {
  module: string;
  export: string;
  args: unknown[];
}

/** One test's storage, fresh and empty, as an implementation gives it to {@link describeToolStore}. */
export interface ToolStoreHarness {
  /** A store of `scope` over this storage (each call a new store object; every one sees the same tools). */
  open(scope: Scope, options?: { builtins?: readonly string[] }): Promise<ToolStore>;
  /** How a child process opens the same storage (see {@link ChildOpen}). */
  child: ChildOpen;
  /**
   * Makes the live record of `name` in `scope` unusable as damage would (half a JSON document, a
   * record that is not a tool): whatever the implementation can hold that `read` must report as `bad`.
   */
  corrupt(scope: Scope, name: string): Promise<void>;
  /** Releases everything `open` opened and removes the storage. */
  cleanup(): Promise<void>;
}

const CHILD = new URL('./registry-child.mjs', import.meta.url).pathname;
const BY: CreatedBy = { persona: 'conformance', session: 's-1' };
const BUILTINS = ['forge_tool', 'forge_call'];

/** A valid spec named `name` (a python3 tool that echoes its input); `description` tells versions apart. */
export function toolSpec(name: string, description = `the tool ${name}`): ToolSpec {
  return {
    name,
    description,
    input_schema: { type: 'object', properties: { n: { type: 'integer' } }, additionalProperties: false },
    impl: 'import json,sys\nprint(json.dumps({"ok": True, "data": json.load(sys.stdin)}))\n',
    runtime: 'python3',
  };
}

/** A stored tool of {@link toolSpec} as the registry writes it (version 0 by default: the writer sets `nextVersion`). */
export function storedTool(name: string, description?: string, scope: Scope = 'project', version = 0): StoredTool {
  const s = toolSpec(name, description);
  return {
    ...s,
    version,
    digest: digestSpec(s),
    created_at: '2030-01-02T03:04:05.000Z',
    created_by: BY,
    scope,
    state: 'active',
  };
}

/** Writes `t` at the next version when `name` is missing; returns that version, or undefined. */
async function create(store: ToolStore, t: StoredTool): Promise<number | undefined> {
  return store.put(t.name, (current, next) =>
    current.status === 'missing' ? { write: { ...t, version: next }, value: next } : { value: undefined },
  );
}

/** Writes `t` over whatever is there; returns the version written. */
async function overwrite(store: ToolStore, t: StoredTool): Promise<number> {
  return store.put(t.name, (_current, next) => ({ write: { ...t, version: next }, value: next }));
}

async function loadAll(store: ToolStore): Promise<{ tools: StoredTool[]; failures: StoreFailure[] }> {
  const tools: StoredTool[] = [];
  const failures: StoreFailure[] = [];
  await store.loadAll(
    (t) => tools.push(t),
    (f) => failures.push(f),
  );
  tools.sort((a, b) => (a.name < b.name ? -1 : 1));
  return { tools, failures };
}

interface ChildRun {
  child: ChildProcess;
  /** Resolves with the exit code or signal and the JSON line printed (undefined when none). */
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null; out: unknown; err: string }>;
}

function runChild(h: ToolStoreHarness, scope: Scope, args: Record<string, unknown>): ChildRun {
  const child = spawn(process.execPath, [CHILD, JSON.stringify({ open: h.child, scope, builtins: BUILTINS, ...args })], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout?.setEncoding('utf8').on('data', (s: string) => (out += s));
  child.stderr?.setEncoding('utf8').on('data', (s: string) => (err += s));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null; out: unknown; err: string }>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, out: out.trim() ? JSON.parse(out) : undefined, err }));
  });
  onTestFinished(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return { child, exit };
}

/** Runs a child to completion; its JSON output, or a failure with its stderr. */
async function childResult(h: ToolStoreHarness, scope: Scope, args: Record<string, unknown>): Promise<unknown> {
  const r = await runChild(h, scope, args).exit;
  if (r.code !== 0) throw new Error(`child exited with ${r.code ?? r.signal}: ${r.err}`);
  return r.out;
}

/** Waits until `n` children wait at the barrier `go`, then releases them. */
async function startTogether(go: string, n: number): Promise<void> {
  const prefix = `${basename(go)}.ready.`;
  for (let i = 0; ; i++) {
    const ready = (await readdir(dirname(go))).filter((f) => f.startsWith(prefix)).length;
    if (ready >= n) break;
    if (i > 3000) throw new Error(`only ${ready} of ${n} children reached the start barrier in 30 s`);
    await new Promise((r) => setTimeout(r, 10));
  }
  writeFileSync(go, '');
}

/** A start barrier in a temp dir removed when the test ends. */
function barrier(): string {
  const dir = tempDir('forge-conf-go-');
  onTestFinished(() => dir.remove());
  return join(dir.path, 'go');
}

/** Collects what `watch` reports; `until` waits (at most 15 s) for a name to be reported. */
function changeLog() {
  const seen: string[][] = [];
  return {
    seen,
    onChange: (names: string[]) => void seen.push(names),
    async until(name: string): Promise<void> {
      const deadline = Date.now() + 15_000;
      while (!seen.some((b) => b.includes(name))) {
        if (Date.now() > deadline) throw new Error(`watch did not report "${name}" within 15 s (reported: ${JSON.stringify(seen)})`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
}

function okTool(r: ReadResult): StoredTool {
  if (r.status !== 'ok') throw new Error(`expected a tool, got ${JSON.stringify(r)}`);
  return r.tool;
}

/** Kill points of the crash test: inside decide (lock held), then n event-loop turns after it returned. */
const KILL_POINTS: ReadonlyArray<'locked' | number> = ['locked', 0, 1, 2, 3, 4, 5, 6, 8, 10, 13, 16, 20, 25, 32, 48];

/** What the topics of the suite share: the implementation's label and a fresh harness per test. */
interface ToolStoreSuite {
  label: string;
  /** Fresh, empty storage for the current test, cleaned up when it ends. */
  harness(): Promise<ToolStoreHarness>;
}

/**
 * The conformance suite of `ToolStore` (see its contract in @forge/registry): behaviour,
 * concurrency across processes, crash safety (kill -9 at each step of a put), bad input, and the
 * registry itself over the store. `factory` gives each test fresh, empty storage; children open it
 * through `harness.child` and import built code (build @forge/registry and the implementation first).
 */
export function describeToolStore(label: string, factory: () => Promise<ToolStoreHarness>): void {
  const suite: ToolStoreSuite = {
    label,
    harness: async () => {
      const h = await factory();
      onTestFinished(() => h.cleanup());
      return h;
    },
  };
  describe(`ToolStore conformance: ${label}`, () => {
    describe('behaviour', () => toolStoreBehaviour(suite));
    describe('bad input', () => toolStoreBadInput(suite));
    describe('across processes', () => toolStoreAcrossProcesses(suite));
    describe('crash safety', () => toolStoreCrashSafety(suite));
    describe('the registry over the store', () => registryOverStore(suite));
  });
}

/** One process: put, read, versions, remove, collisions and loadAll. */
function toolStoreBehaviour({ harness }: ToolStoreSuite): void {
  it('put writes a new name at version 1; read gives it back with the store’s scope; where names the store without a password', async () => {
    const h = await harness();
    const store = await h.open('project');
    expect(store.scope).toBe('project');
    expect(typeof store.where).toBe('string');
    expect(store.where).not.toMatch(/\/\/[^/@]*:[^/@]*@/);
    expect(await store.read('csv.count')).toEqual({ status: 'missing' });
    const seen: Array<[ReadResult, number]> = [];
    const written = storedTool('csv.count', 'first', 'user');
    const value = await store.put('csv.count', (current, next) => {
      seen.push([current, next]);
      return { write: { ...written, version: next }, value: 'done' };
    });
    expect(value).toBe('done');
    expect(seen).toEqual([[{ status: 'missing' }, 1]]);
    // The scope is the store's, whatever the record said.
    expect(await store.read('csv.count')).toEqual({ status: 'ok', tool: { ...written, version: 1, scope: 'project' } });
    // Another store object over the same storage sees it.
    expect(okTool(await (await h.open('project')).read('csv.count')).description).toBe('first');
    // Scopes are apart.
    expect(await (await h.open('user')).read('csv.count')).toEqual({ status: 'missing' });
  });

  it('decide sees the current tool and the next version; a replace keeps the old one in versions; a decide that writes nothing changes nothing', async () => {
    const h = await harness();
    const store = await h.open('user');
    await create(store, storedTool('t.a', 'v1', 'user'));
    const v1 = okTool(await store.read('t.a'));
    const nothing = await store.put('t.a', (current, next) => {
      expect(current).toEqual({ status: 'ok', tool: v1 });
      expect(next).toBe(2);
      return { value: 'kept' };
    });
    expect(nothing).toBe('kept');
    expect(await store.read('t.a')).toEqual({ status: 'ok', tool: v1 });
    expect(await overwrite(store, storedTool('t.a', 'v2', 'user'))).toBe(2);
    expect(okTool(await store.read('t.a'))).toMatchObject({ version: 2, description: 'v2' });
    const versions = await store.versions('t.a');
    expect(versions.map((v) => [v.version, v.current, v.tool?.description])).toEqual([
      [1, false, 'v1'],
      [2, true, 'v2'],
    ]);
    for (const v of versions) expect(typeof v.path).toBe('string');
    expect(await store.versions('never.there')).toEqual([]);
  });

  it('remove keeps the removed version; version numbers are never reused; check can refuse', async () => {
    const h = await harness();
    const store = await h.open('session');
    await create(store, storedTool('t.r', 'v1', 'session'));
    await overwrite(store, storedTool('t.r', 'v2', 'session'));
    const refused = await store.remove('t.r', (current) => (current.status === 'ok' && current.tool.version === 2 ? 'no' : undefined));
    expect(refused).toEqual({ status: 'refused', failure: 'no' });
    expect(okTool(await store.read('t.r')).version).toBe(2);
    const removed = await store.remove('t.r');
    expect(removed).toMatchObject({ status: 'ok', tool: { version: 2, description: 'v2' } });
    expect(await store.read('t.r')).toEqual({ status: 'missing' });
    expect(await store.remove('t.r')).toEqual({ status: 'missing' });
    expect((await store.versions('t.r')).map((v) => [v.version, v.current])).toEqual([
      [1, false],
      [2, false],
    ]);
    expect(await create(store, storedTool('t.r', 'v3', 'session'))).toBe(3);
    expect((await store.versions('t.r')).map((v) => [v.version, v.current])).toEqual([
      [1, false],
      [2, false],
      [3, true],
    ]);
  });

  it('collisions: names that differ only by case, and names with the same wire name, read from the storage (also inside decide)', async () => {
    const h = await harness();
    const store = await h.open('project');
    for (const n of ['code.tool', 'a.b', 'other']) await create(store, storedTool(n));
    expect(await store.collisions('CODE.tool')).toEqual({ cases: ['code.tool'], wires: [] });
    expect(await store.collisions('code.tool')).toEqual({ cases: [], wires: [] });
    expect(await store.collisions('a__b')).toEqual({ cases: [], wires: ['a.b'] });
    expect(await store.collisions('A__B')).toEqual({ cases: [], wires: ['a.b'] });
    expect(await store.collisions('fresh')).toEqual({ cases: [], wires: [] });
    // What another store object wrote a moment ago counts: no cache.
    await create(await h.open('project'), storedTool('Code.Tool'));
    expect(await store.collisions('CODE.TOOL')).toEqual({ cases: ['Code.Tool', 'code.tool'], wires: [] });
    const inside = await store.put('a__b', async (_c, _n, collisions) => ({ value: await collisions() }));
    expect(inside).toEqual({ cases: [], wires: ['a.b'] });
  });

  it('loadAll yields every tool, and a corrupt record to onFailure with a reason while the others load', async () => {
    const h = await harness();
    const store = await h.open('project');
    for (const n of ['t.one', 't.two', 't.three', 'spoilt']) await create(store, storedTool(n));
    await h.corrupt('project', 'spoilt');
    const { tools, failures } = await loadAll(store);
    expect(tools.map((t) => t.name)).toEqual(['t.one', 't.three', 't.two']);
    expect(failures).toHaveLength(1);
    expect(failures[0]?.reason).toEqual(expect.any(String));
    expect(failures[0]?.reason.length).toBeGreaterThan(0);
    expect(failures[0]?.path).toEqual(expect.any(String));
    // The name it is stored under: the registry keeps the record as damaged, never drops it.
    expect(failures[0]?.name).toBe('spoilt');
    const bad = await store.read('spoilt');
    expect(bad).toMatchObject({ status: 'bad', failure: { reason: expect.any(String) } });
    // The name stays writable: decide sees the bad record, and a write replaces it.
    const version = await store.put('spoilt', (current, next) => {
      expect(current.status).toBe('bad');
      return { write: { ...storedTool('spoilt', 'repaired'), version: next }, value: next };
    });
    expect(okTool(await store.read('spoilt'))).toMatchObject({ version, description: 'repaired' });
    expect((await loadAll(store)).failures).toEqual([]);
    // An empty store loads as empty.
    expect(await loadAll(await h.open('task'))).toEqual({ tools: [], failures: [] });
  });

  it('a record under a built-in name is bad for a store opened with that built-in', async () => {
    const h = await harness();
    await create(await h.open('user'), storedTool('forge_tool', undefined, 'user'));
    const guarded = await h.open('user', { builtins: BUILTINS });
    expect(await guarded.read('forge_tool')).toMatchObject({ status: 'bad', failure: { reason: expect.any(String) } });
    const { tools, failures } = await loadAll(guarded);
    expect(tools).toEqual([]);
    expect(failures).toHaveLength(1);
  });
}

/** Names outside the grammar. */
function toolStoreBadInput({ harness }: ToolStoreSuite): void {
  it('names outside the grammar: put, remove and collisions throw invalid_option; read is missing; versions is empty; nothing is written', async () => {
    const h = await harness();
    const store = await h.open('project');
    await create(store, storedTool('inside'));
    for (const name of ['../x', '../../etc/passwd', 'a/b', '', '1bad', 'x'.repeat(65), 'a..b', 'trail.', 'sp ace']) {
      let decided = false;
      await expect(
        store.put(name, () => {
          decided = true;
          return { value: 1 };
        }),
      ).rejects.toMatchObject({ code: 'invalid_option' });
      expect(decided).toBe(false);
      await expect(store.remove(name)).rejects.toMatchObject({ code: 'invalid_option' });
      await expect(store.collisions(name)).rejects.toMatchObject({ code: 'invalid_option' });
      expect(await store.read(name)).toEqual({ status: 'missing' });
      expect(await store.versions(name)).toEqual([]);
    }
    expect((await loadAll(store)).tools.map((t) => t.name)).toEqual(['inside']);
  });
}

/** Child processes writing the same storage: watch, races on one name, many writes at once. */
function toolStoreAcrossProcesses({ harness }: ToolStoreSuite): void {
  it('watch reports names another process writes and removes, and stops on close', async () => {
    const h = await harness();
    const store = await h.open('project');
    const log = changeLog();
    const watcher = await store.watch(log.onChange, { debounceMs: 20 });
    await childResult(h, 'project', { op: 'create', name: 'w.one', tool: storedTool('w.one', 'from a child') });
    await log.until('w.one');
    expect(okTool(await store.read('w.one')).description).toBe('from a child');
    const before = log.seen.length;
    await childResult(h, 'project', { op: 'remove', name: 'w.one' });
    await log.until('w.one');
    await new Promise((r) => setTimeout(r, 50));
    expect(log.seen.slice(before).flat()).toContain('w.one');
    expect(await store.read('w.one')).toEqual({ status: 'missing' });
    // Another scope's writes are not this store's.
    await childResult(h, 'user', { op: 'create', name: 'w.user', tool: storedTool('w.user', undefined, 'user') });
    await childResult(h, 'project', { op: 'create', name: 'w.two', tool: storedTool('w.two') });
    await log.until('w.two');
    expect(log.seen.flat()).not.toContain('w.user');
    for (const batch of log.seen) expect([...batch].sort()).toEqual(batch);
    await watcher.close();
    await watcher.close();
    const after = log.seen.length;
    await childResult(h, 'project', { op: 'create', name: 'w.three', tool: storedTool('w.three') });
    await new Promise((r) => setTimeout(r, 300));
    expect(log.seen.length).toBe(after);
  });

  it('8 processes creating the same name at once: exactly one wins, the others see its tool as current', async () => {
    const h = await harness();
    const go = barrier();
    const runs = Array.from({ length: 8 }, (_, i) =>
      childResult(h, 'project', { op: 'create', name: 'race', tool: storedTool('race', `child ${i}`), go }),
    );
    await startTogether(go, 8);
    const results = (await Promise.all(runs)) as Array<{ won: boolean; version?: number; current?: StoredTool }>;
    const winners = results.filter((r) => r.won);
    expect(winners).toHaveLength(1);
    expect(winners[0]?.version).toBe(1);
    const live = okTool(await (await h.open('project')).read('race'));
    for (const r of results.filter((x) => !x.won)) expect(r.current).toEqual(live);
    expect((await (await h.open('project')).versions('race')).map((v) => [v.version, v.current])).toEqual([[1, true]]);
  });

  it('many names and many writes at once: nothing lost, every version numbered once', async () => {
    const h = await harness();
    const go = barrier();
    const runs: Promise<unknown>[] = [];
    for (let c = 0; c < 4; c++) {
      const tools = Array.from({ length: 15 }, (_, i) => storedTool(`many.c${c}.n${i}`));
      runs.push(childResult(h, 'project', { op: 'createMany', tools, go }));
      runs.push(childResult(h, 'project', { op: 'overwrite', name: 'shared', tool: storedTool('shared', `writer ${c}`), times: 6, go }));
    }
    await startTogether(go, 8);
    const results = await Promise.all(runs);
    const store = await h.open('project');
    const { tools, failures } = await loadAll(store);
    expect(failures).toEqual([]);
    expect(tools).toHaveLength(61);
    const acknowledged = results.filter((_, i) => i % 2 === 1).flat() as number[];
    expect([...acknowledged].sort((a, b) => a - b)).toEqual(Array.from({ length: 24 }, (_, i) => i + 1));
    const versions = await store.versions('shared');
    expect(versions.map((v) => v.version)).toEqual(Array.from({ length: 24 }, (_, i) => i + 1));
    expect(versions.every((v) => v.tool !== undefined)).toBe(true);
  });
}

/** Writers killed -9 at each step of a put, and inside decide with the lock held. */
function toolStoreCrashSafety({ label, harness }: ToolStoreSuite): void {
  it('kill -9 at each step of a put: the old tool or the new one, never a torn record; the name is writable again', async () => {
    const h = await harness();
    const store = await h.open('project');
    const names = KILL_POINTS.map((_, i) => `crash.k${i}`);
    const olds = new Map<string, StoredTool>();
    for (const n of names) {
      await create(store, storedTool(n, 'old'));
      olds.set(n, okTool(await store.read(n)));
    }
    const runs = KILL_POINTS.map(
      (at, i) => runChild(h, 'project', { op: 'crash', name: names[i], tool: storedTool(names[i] as string, 'new'), at }).exit,
    );
    const exits = await Promise.all(runs);
    for (const e of exits) expect(e.signal, e.err).toBe('SIGKILL');

    const outcomes: string[] = [];
    const { tools, failures } = await loadAll(await h.open('project'));
    expect(failures).toEqual([]);
    expect(tools.map((t) => t.name).sort()).toEqual([...names].sort());
    for (const n of names) {
      const now = okTool(await store.read(n));
      const old = olds.get(n) as StoredTool;
      if (now.version === 1) expect(now).toEqual(old);
      else expect(now).toEqual({ ...storedTool(n, 'new'), version: 2, scope: 'project' });
      outcomes.push(now.version === 1 ? 'old' : 'new');
      for (const v of await store.versions(n)) expect(v.tool, `${n} version ${v.version}: ${v.reason}`).toBeDefined();
    }
    // Writable again (a lock its dead holder left is taken over), with a number never used.
    const again = await Promise.all(names.map((n) => overwrite(store, storedTool(n, 'after'))));
    for (const [i, n] of names.entries()) {
      const used = (await store.versions(n)).filter((v) => !v.current).map((v) => v.version);
      expect(again[i]).toBeGreaterThan(Math.max(...used));
      expect(okTool(await store.read(n)).description).toBe('after');
    }
    // Both outcomes are legal; which ones occurred shows how far the kill points reached.
    console.info(`${label}: kill -9 outcomes by kill point ${KILL_POINTS.map((k, i) => `${k}:${outcomes[i]}`).join(' ')}`);
  }, 120_000);

  it('a lock left by a holder killed inside decide: 4 racing creators then take it over, and exactly one wins', async () => {
    const h = await harness();
    const dead = await runChild(h, 'project', { op: 'crash', name: 'crowd', tool: storedTool('crowd', 'dead'), at: 'locked' }).exit;
    expect(dead.signal, dead.err).toBe('SIGKILL');
    const go = barrier();
    const runs = Array.from({ length: 4 }, (_, i) =>
      childResult(h, 'project', { op: 'create', name: 'crowd', tool: storedTool('crowd', `child ${i}`), go }),
    );
    await startTogether(go, 4);
    const results = (await Promise.all(runs)) as Array<{ won: boolean; current?: StoredTool }>;
    expect(results.filter((r) => r.won)).toHaveLength(1);
    const live = okTool(await (await h.open('project')).read('crowd'));
    expect(live).toMatchObject({ version: 1, description: expect.stringMatching(/^child \d$/) });
    for (const r of results.filter((x) => !x.won)) expect(r.current).toEqual(live);
  }, 120_000);
}

/** createRegistry over stores of this implementation: scopes, damage, and watching another process. */
function registryOverStore({ harness }: ToolStoreSuite): void {
  it('create, resolve and shadow between two scopes; case and wire names are refused; a second registry loads the same', async () => {
    const h = await harness();
    const open = async () => ({
      project: await h.open('project', { builtins: BUILTINS }),
      user: await h.open('user', { builtins: BUILTINS }),
    });
    const reg = createRegistry({ stores: await open(), builtins: BUILTINS });
    expect(await reg.load()).toEqual({ loaded: { project: 0, user: 0 }, failed: [] });
    expect(await reg.create(toolSpec('csv.count', 'user one'), { scope: 'user', createdBy: BY })).toMatchObject({
      ok: true,
      tool: { version: 1, scope: 'user' },
    });
    expect(await reg.create(toolSpec('csv.count', 'project one'), { scope: 'project', createdBy: BY })).toMatchObject({ ok: true });
    expect(reg.resolve('csv.count')).toMatchObject({ scope: 'project', shadows: ['user'], tool: { description: 'project one' } });
    expect(await reg.create(toolSpec('CSV.count'), { scope: 'project', createdBy: BY })).toMatchObject({
      ok: false,
      kind: 'name_taken',
    });
    expect(await reg.create(toolSpec('csv__count'), { scope: 'user', createdBy: BY })).toMatchObject({ ok: false, kind: 'name_taken' });
    expect(await reg.create(toolSpec('forge_tool'), { scope: 'user', createdBy: BY })).toMatchObject({
      ok: false,
      kind: 'name_forbidden',
    });
    const second = createRegistry({ stores: await open(), builtins: BUILTINS });
    expect(await second.load()).toEqual({ loaded: { project: 1, user: 1 }, failed: [] });
    expect(second.resolve('csv.count')).toMatchObject({ scope: 'project', shadows: ['user'] });
    // The second registry's write is seen by the first one's store (not its memory: load).
    expect(await second.create(toolSpec('csv.count', 'replaced'), { scope: 'project', createdBy: BY, overwrite: true })).toMatchObject({
      ok: true,
      tool: { version: 2 },
      previous: { version: 1 },
    });
    expect(await reg.create(toolSpec('csv.count', 'stale view'), { scope: 'project', createdBy: BY })).toMatchObject({
      ok: false,
      kind: 'name_taken',
    });
    expect(await reg.remove('csv.count', { scope: 'project' })).toMatchObject({ ok: true, removed: { version: 2 } });
    expect(reg.resolve('csv.count')).toMatchObject({ scope: 'user', shadows: [] });
    expect((await reg.versions('csv.count', { scope: 'project' })).map((v) => v.version)).toEqual([1, 2]);
    expect(await reg.promote('csv.count', { from: 'project' })).toMatchObject({ ok: false, kind: 'unknown_tool' });
    expect(await reg.recover('csv.count', 1, { scope: 'project' })).toMatchObject({ ok: true, tool: { version: 3 } });
    expect(reg.resolve('csv.count')).toMatchObject({ scope: 'project', tool: { description: 'project one', version: 3 } });
  });

  it('a registry keeps a corrupt record as damaged: listed, hiding the tool below it, refused, removable into the history', async () => {
    const h = await harness();
    const open = async () => ({
      project: await h.open('project', { builtins: BUILTINS }),
      user: await h.open('user', { builtins: BUILTINS }),
    });
    const reg = createRegistry({ stores: await open(), builtins: BUILTINS });
    await reg.load();
    await reg.create(toolSpec('csv.count', 'user one'), { scope: 'user', createdBy: BY });
    await reg.create(toolSpec('csv.count', 'project one'), { scope: 'project', createdBy: BY });
    await h.corrupt('project', 'csv.count');
    const fresh = createRegistry({ stores: await open(), builtins: BUILTINS });
    const report = await fresh.load();
    expect(report.failed).toMatchObject([{ scope: 'project', name: 'csv.count', reason: expect.any(String) }]);
    const damaged = fresh.damaged('csv.count');
    expect(damaged).toMatchObject({ name: 'csv.count', scope: 'project', path: report.failed[0]?.path });
    expect(fresh.listDamaged()).toEqual([damaged]);
    // Fail closed: the user tool does not take the damaged one's place.
    expect(fresh.resolve('csv.count')).toBeUndefined();
    expect(fresh.list()).toEqual([]);
    expect(await fresh.setState('csv.count', 'retired', { scope: 'project' })).toMatchObject({ ok: false, kind: 'tool_damaged' });
    const asked: unknown[] = [];
    const removed = await fresh.remove('csv.count', {
      scope: 'project',
      authorize: (t) => {
        asked.push(t);
        return undefined;
      },
    });
    expect(asked).toEqual([undefined]);
    expect(removed).toEqual({ ok: true, damaged });
    expect(fresh.listDamaged()).toEqual([]);
    expect(fresh.resolve('csv.count')).toMatchObject({ scope: 'user', tool: { description: 'user one' } });
    const kept = await (await h.open('project')).versions('csv.count');
    expect(kept.filter((v) => !v.current && v.reason !== undefined)).toHaveLength(1);
  });

  it('a registry watching the store sees a tool another process writes, and reports a corrupt one as load_failed', async () => {
    const h = await harness();
    const events: unknown[] = [];
    const reg = createRegistry({
      stores: { project: await h.open('project', { builtins: BUILTINS }) },
      builtins: BUILTINS,
      onEvent: (e) => events.push(e),
    });
    await reg.load();
    const changes: unknown[] = [];
    await reg.watch((c) => changes.push(c), { debounceMs: 20 });
    onTestFinished(() => reg.close());
    await childResult(h, 'project', { op: 'create', name: 'from.child', tool: storedTool('from.child', 'child wrote it') });
    const deadline = Date.now() + 15_000;
    while (!reg.resolve('from.child') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(reg.resolve('from.child')).toMatchObject({ scope: 'project', tool: { description: 'child wrote it' } });
    expect(changes).toContainEqual([{ scope: 'project', names: ['from.child'] }]);
    await h.corrupt('project', 'from.child');
    while (reg.resolve('from.child') && Date.now() < deadline + 15_000) await new Promise((r) => setTimeout(r, 20));
    expect(reg.resolve('from.child')).toBeUndefined();
    expect(events).toContainEqual(expect.objectContaining({ type: 'registry.load_failed', scope: 'project', reason: expect.any(String) }));
  });
}
