import { spawn } from 'node:child_process';
import type { PostgresServer } from '@forge/conformance/postgres';
import { storedTool, toolSpec } from '@forge/conformance/registry';
import { type CreatedBy, createRegistry, type StoredTool, type ToolStore } from '@forge/registry';
import { waitFor } from '@forge/test-utils';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { postgresToolStore } from '../src/registry.js';
import { buildChildEntry, freshDatabase, migrateRegistry, SCOPE_IDS, startPostgres } from './registry-harness.js';

let server: PostgresServer;
let child: { module: string; remove(): void };
beforeAll(async () => {
  [server, child] = await Promise.all([startPostgres(), buildChildEntry()]);
});
afterAll(async () => {
  child?.remove();
  await server?.stop();
});

const BY: CreatedBy = { persona: 'tester', session: 's-1' };
/** A stored tool of the project scope at `version` (1 by default). */
const tool = (name: string, description?: string, version = 1): StoredTool => storedTool(name, description, 'project', version);

async function db() {
  const d = await freshDatabase(server);
  onTestFinished(() => d.cleanup());
  return d;
}

async function write(store: ToolStore, t: StoredTool): Promise<number> {
  return store.put(t.name, (_c, next) => ({ write: { ...t, version: next }, value: next }));
}

/** Waits (at most 15 s, scaled) until `seen` holds a batch with `name` (from batch `from` on). */
async function until(seen: string[][], name: string, from = 0): Promise<void> {
  await waitFor(
    () => `${name} to be reported (reported ${JSON.stringify(seen)})`,
    () => seen.slice(from).some((b) => b.includes(name)),
    { timeoutMs: 15_000 },
  );
}

/** Runs the conformance child with `args` (the store opened over `url`); its JSON output. */
function runChild(url: string, args: Record<string, unknown>): Promise<unknown> {
  const script = new URL('../../conformance/src/registry-child.mjs', import.meta.url).pathname;
  const open = { module: child.module, export: 'openStore', args: [url, SCOPE_IDS] };
  const p = spawn(process.execPath, [script, JSON.stringify({ open, scope: 'project', builtins: [], ...args })], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  onTestFinished(() => {
    if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  });
  let out = '';
  let err = '';
  p.stdout.setEncoding('utf8').on('data', (s: string) => (out += s));
  p.stderr.setEncoding('utf8').on('data', (s: string) => (err += s));
  return new Promise((resolve, reject) =>
    p.on('close', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`child exited ${code}: ${err}`)))),
  );
}

describe('postgresToolStore', () => {
  it('where is the URL without its password, with the scope and scope id; bad scope ids are invalid_option', async () => {
    const pool = new pg.Pool({ connectionString: 'postgres://forge:s3cret-pw@db.example:5433/tools?sslpassword=other-secret' });
    onTestFinished(() => pool.end());
    const store = postgresToolStore(pool, { scope: 'session', scopeId: 'a#b' });
    expect(store.where).toBe('postgres://forge:***@db.example:5433/tools?sslpassword=***#session/a%23b');
    expect(postgresToolStore(pool, { scope: 'user' }).where).toBe('postgres://forge:***@db.example:5433/tools?sslpassword=***#user');
    expect(() => postgresToolStore(pool, { scope: 'task' })).toThrow(expect.objectContaining({ code: 'invalid_option' }));
    expect(() => postgresToolStore(pool, { scope: 'session', scopeId: '../x' })).toThrow(
      expect.objectContaining({ code: 'invalid_option' }),
    );
    expect(() => postgresToolStore(pool, { scope: 'global' as 'user' })).toThrow(expect.objectContaining({ code: 'invalid_option' }));
  });

  it('an unreachable server: root_unusable naming the store, never its password', async () => {
    const pool = new pg.Pool({
      connectionString: `postgres://forge:hunter2-pw@/nowhere?host=${encodeURIComponent('/nonexistent-forge-socket')}`,
      max: 1,
    });
    pool.on('error', () => {});
    onTestFinished(() => pool.end());
    const store = postgresToolStore(pool, { scope: 'project' });
    for (const p of [store.read('a'), store.put('a', () => ({ value: 1 })), store.watch(() => {})]) {
      const err = await p.then(
        () => undefined,
        (e: Error & { code?: string }) => e,
      );
      expect(err).toMatchObject({ code: 'root_unusable' });
      expect(err?.message).toContain('postgres://forge:***@/nowhere');
      expect(err?.message).not.toContain('hunter2-pw');
    }
  });

  it('a database not migrated: reads are empty, a write says to run the migrations', async () => {
    const url = await server.database();
    const pool = new pg.Pool({ connectionString: url });
    onTestFinished(() => pool.end());
    const store = postgresToolStore(pool, { scope: 'project' });
    const seen: string[] = [];
    await store.loadAll(
      (t) => seen.push(t.name),
      (f) => seen.push(f.path),
    );
    expect(seen).toEqual([]);
    expect(await store.read('a')).toEqual({ status: 'missing' });
    expect(await store.versions('a')).toEqual([]);
    expect(await store.collisions('a')).toEqual({ cases: [], wires: [] });
    await expect(store.put('a', (_c, n) => ({ write: tool('a', 'x', n), value: 1 }))).rejects.toMatchObject({
      code: 'root_unusable',
      message: expect.stringContaining('not migrated: run the @forge/postgres migrations (registry migration 10)'),
    });
  });

  it('keeps the tool as the exact JSON text given, one row per version, the live one flagged', async () => {
    const d = await db();
    const store = postgresToolStore(d.pool, { scope: 'user' });
    const given = { ...tool('exact.one'), scope: 'project' as const };
    await write(store, given);
    await write(store, tool('exact.one', 'second'));
    const rows = (await d.pool.query('SELECT scope, scope_id, name, version, live, tool, lock_key FROM forge_tools ORDER BY version')).rows;
    expect(rows).toEqual([
      {
        scope: 'user',
        scope_id: '',
        name: 'exact.one',
        version: 1,
        live: false,
        tool: JSON.stringify({ ...given, version: 1 }),
        lock_key: 'exact__one',
      },
      {
        scope: 'user',
        scope_id: '',
        name: 'exact.one',
        version: 2,
        live: true,
        tool: JSON.stringify({ ...tool('exact.one', 'second'), version: 2 }),
        lock_key: 'exact__one',
      },
    ]);
    // Read back with the store's scope.
    expect(await store.read('exact.one')).toEqual({ status: 'ok', tool: { ...tool('exact.one', 'second'), version: 2, scope: 'user' } });
  });

  it('bad rows are bad with a reason, never a throw: not JSON, not a tool, another name or version, a name outside the grammar', async () => {
    const d = await db();
    const store = postgresToolStore(d.pool, { scope: 'project' });
    await write(store, tool('fine'));
    const insert = (name: string, version: number, text: string) =>
      d.pool.query("INSERT INTO forge_tools (scope, name, version, live, tool) VALUES ('project', $1, $2, true, $3)", [
        name,
        version,
        text,
      ]);
    await insert('torn', 1, '{"name": "torn", "desc');
    await insert('not.tool', 1, '{"hello": 1}');
    await insert('other.name', 1, JSON.stringify(tool('fine')));
    await insert('wrong.version', 3, JSON.stringify(tool('wrong.version', undefined, 2)));
    await insert('../escape', 1, JSON.stringify(tool('fine')));
    const reasons: Record<string, string> = {};
    const loaded: string[] = [];
    await store.loadAll(
      (t) => loaded.push(t.name),
      (f) => {
        reasons[f.path.slice(f.path.lastIndexOf('/') + 1)] = f.reason;
      },
    );
    expect(loaded).toEqual(['fine']);
    expect(Object.keys(reasons).sort()).toEqual(['escape', 'not.tool', 'other.name', 'torn', 'wrong.version']);
    expect(reasons.torn).toMatch(/^not valid JSON/);
    expect(reasons['not.tool']).toMatch(/^not a valid tool spec/);
    expect(reasons['other.name']).toMatch(/"other\.name".*"fine"/);
    expect(reasons['wrong.version']).toBe('the record of version 3 holds version 2');
    expect(reasons.escape).toMatch(/^record name "\.\.\/escape" is not a tool name/);
    for (const n of ['torn', 'not.tool', 'other.name', 'wrong.version', '../escape'])
      expect(await store.read(n)).toMatchObject({ status: 'bad', failure: { reason: expect.any(String) } });
    // A bad live row is replaced like any other, at a version above its row's.
    expect(await write(store, tool('wrong.version', 'repaired'))).toBe(4);
    expect((await store.versions('wrong.version')).map((v) => [v.version, v.current, v.reason ?? 'ok'])).toEqual([
      [3, false, 'the record of version 3 holds version 2'],
      [4, true, 'ok'],
    ]);
  });

  it('decide: its own error comes back as it is and rolls back; a write of another version or name is refused; the lock is free after', async () => {
    const d = await db();
    const store = postgresToolStore(d.pool, { scope: 'project' });
    const mine = new Error('decide said no');
    await expect(store.put('t.x', () => Promise.reject(mine))).rejects.toBe(mine);
    await expect(store.put('t.x', (_c, next) => ({ write: tool('t.x', 'v', next + 1), value: 1 }))).rejects.toMatchObject({
      code: 'invalid_option',
    });
    await expect(store.put('t.x', (_c, next) => ({ write: tool('t.y', 'v', next), value: 1 }))).rejects.toMatchObject({
      code: 'invalid_option',
    });
    const boom = new Error('check said no');
    await write(store, tool('t.x'));
    await expect(
      store.remove('t.x', () => {
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect((await d.pool.query('SELECT count(*)::int AS n FROM forge_tools')).rows[0].n).toBe(1);
    expect(await write(store, tool('t.x', 'again'))).toBe(2);
  });

  it('a name locked by a live writer for longer than lockTimeoutMs: lock_timeout; colliding names share the lock, others do not', async () => {
    const d = await db();
    const holder = postgresToolStore(d.pool, { scope: 'project' });
    const impatient = postgresToolStore(d.pool, { scope: 'project', lockTimeoutMs: 300 });
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let inside!: () => void;
    const entered = new Promise<void>((r) => (inside = r));
    const holding = holder.put('Code.Tool', async () => {
      inside();
      await held;
      return { value: 'held' };
    });
    await entered;
    for (const n of ['Code.Tool', 'code.tool', 'code__tool'])
      await expect(impatient.put(n, () => ({ value: 1 }))).rejects.toMatchObject({
        code: 'lock_timeout',
        message: expect.stringContaining('#project'),
      });
    // Another name, and the same name in another scope id, are not held up.
    expect(await impatient.put('code.other', () => ({ value: 'free' }))).toBe('free');
    const elsewhere = postgresToolStore(d.pool, { scope: 'session', scopeId: 's-2', lockTimeoutMs: 300 });
    expect(await elsewhere.put('Code.Tool', () => ({ value: 'free' }))).toBe('free');
    release();
    expect(await holding).toBe('held');
    expect(await impatient.put('code.tool', () => ({ value: 'now' }))).toBe('now');
  });

  it('loadAll reads in pages of one snapshot: 1100 tools of mixed case and punctuation in a database with an ICU collation, each once', async () => {
    const admin = new pg.Client({ connectionString: server.url });
    await admin.connect();
    await admin.query(`CREATE DATABASE icu_names LOCALE_PROVIDER icu ICU_LOCALE 'en-US' TEMPLATE template0`);
    await admin.end();
    const pool = new pg.Pool({ connectionString: server.url.replace('/postgres?', '/icu_names?') });
    onTestFinished(() => pool.end());
    await migrateRegistry(pool);
    const names = Array.from({ length: 1100 }, (_, i) => [`a_b${i}`, `aB${i}`, `A.c${i}`, `a-d${i}`][i % 4] as string);
    const text = names.map((n) => JSON.stringify(tool(n)));
    await pool.query(
      "INSERT INTO forge_tools (scope, name, version, live, tool) SELECT 'project', n, 1, true, t FROM unnest($1::text[], $2::text[]) AS x(n, t)",
      [names, text],
    );
    const store = postgresToolStore(pool, { scope: 'project' });
    const loaded: string[] = [];
    await store.loadAll(
      (t) => loaded.push(t.name),
      (f) => loaded.push(`bad ${f.path}`),
    );
    expect(loaded).toHaveLength(1100);
    expect([...loaded].sort()).toEqual([...names].sort());
  });

  it('session and task stores of different ids are apart', async () => {
    const d = await db();
    const a = postgresToolStore(d.pool, { scope: 'session', scopeId: 's-1' });
    const b = postgresToolStore(d.pool, { scope: 'session', scopeId: 's-2' });
    await write(a, tool('only.a'));
    expect(await b.read('only.a')).toEqual({ status: 'missing' });
    expect(await b.collisions('ONLY.a')).toEqual({ cases: [], wires: [] });
    expect(await a.collisions('ONLY.a')).toEqual({ cases: ['only.a'], wires: [] });
    expect(await write(b, tool('only.a'))).toBe(1);
  });
});

describe('postgresToolStore watch', () => {
  it("sees another process's write and remove; not another scope id's", async () => {
    const d = await db();
    const store = postgresToolStore(d.pool, { scope: 'project' });
    const seen: string[][] = [];
    const w = await store.watch((n) => seen.push(n), { debounceMs: 10 });
    onTestFinished(() => w.close());
    await postgresToolStore(d.pool, { scope: 'project', scopeId: 'other-project' }).put('other.id', (_c, n) => ({
      write: tool('other.id', 'x', n),
      value: 1,
    }));
    expect(await runChild(d.url, { op: 'create', name: 'from.child', tool: tool('from.child') })).toMatchObject({ won: true });
    await until(seen, 'from.child');
    expect(await runChild(d.url, { op: 'remove', name: 'from.child' })).toBe('ok');
    const before = seen.length;
    await until(seen, 'from.child', before);
    expect(seen.flat()).not.toContain('other.id');
  });

  it('a write committed without its NOTIFY (its writer killed after the commit) is found by the sweep', async () => {
    const d = await db();
    const store = postgresToolStore(d.pool, { scope: 'project', sweepMs: 100 });
    const seen: string[][] = [];
    const w = await store.watch((n) => seen.push(n), { debounceMs: 10 });
    onTestFinished(() => w.close());
    // What a writer killed between COMMIT and pg_notify leaves: the row, and no notification.
    await d.pool.query("INSERT INTO forge_tools (scope, name, version, live, tool) VALUES ('project', 'silent.one', 1, true, $1)", [
      JSON.stringify(tool('silent.one')),
    ]);
    await until(seen, 'silent.one');
    // A remove done the same way (live taken away) too.
    const before = seen.length;
    await d.pool.query("UPDATE forge_tools SET live = false, changed_xid = pg_current_xact_id() WHERE name = 'silent.one'");
    await until(seen, 'silent.one', before);
  });

  it('after its connection is killed: reports the error, reconnects, reports every name held or ever held, and hears new writes', async () => {
    const d = await db();
    const store = postgresToolStore(d.pool, { scope: 'project', sweepMs: 60_000 });
    await write(store, tool('held.one'));
    await write(store, tool('gone.one'));
    await store.remove('gone.one');
    const seen: string[][] = [];
    const errors: unknown[] = [];
    const w = await store.watch((n) => seen.push(n), { debounceMs: 10, onError: (e) => errors.push(e) });
    onTestFinished(() => w.close());
    // Every other connection to the database, the watcher's among them (as a server restart would).
    const killed = await d.pool.query(
      'SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
    );
    expect(killed.rows.length).toBeGreaterThan(0);
    await until(seen, 'held.one');
    expect(seen.find((b) => b.includes('held.one'))).toEqual(['gone.one', 'held.one']);
    expect(errors[0]).toMatchObject({ code: 'root_unusable', message: expect.stringContaining('#project') });
    await write(postgresToolStore(d.pool, { scope: 'project' }), tool('after.gap'));
    await until(seen, 'after.gap');
    await w.close();
    const n = seen.length;
    await write(store, tool('after.close'));
    // Lets time pass: a closed watcher must report nothing, and nothing is the absence of an event;
    // 200 ms is well past what a NOTIFY and the 10 ms debounce took above.
    await new Promise((r) => setTimeout(r, 200));
    expect(seen.length).toBe(n);
  });

  it('50 session scopes watched over a pool of 3: one listening connection for all, each hears its own scope only, the last close gives it back', async () => {
    const d = await db();
    const pool = new pg.Pool({ connectionString: d.url, max: 3 });
    pool.on('error', () => {});
    onTestFinished(() => pool.end());
    const listening = async () =>
      (
        await d.pool.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN forge_tools'",
        )
      ).rows[0]?.n ?? -1;
    const seen: string[][][] = [];
    const watchers: { close(): Promise<void> }[] = [];
    for (let i = 0; i < 50; i++) {
      const batches: string[][] = [];
      seen.push(batches);
      const store = postgresToolStore(pool, { scope: 'session', scopeId: `s-${i}`, sweepMs: 200 });
      watchers.push(await store.watch((n) => batches.push(n), { debounceMs: 10 }));
    }
    onTestFinished(async () => {
      for (const w of watchers) await w.close();
    });
    expect(await listening()).toBe(1);
    // The pool still has connections to give: a query answers at once.
    expect((await pool.query<{ one: number }>('SELECT 1 AS one')).rows[0]?.one).toBe(1);
    const session7 = postgresToolStore(d.pool, { scope: 'session', scopeId: 's-7' });
    await session7.put('only.seven', (_c, n) => ({ write: { ...storedTool('only.seven', undefined, 'session', n) }, value: n }));
    await until(seen[7] as string[][], 'only.seven');
    // What a writer killed before its NOTIFY leaves, in another session: found by the one sweep.
    await d.pool.query(
      "INSERT INTO forge_tools (scope, scope_id, name, version, live, tool) VALUES ('session', 's-31', 'silent.one', 1, true, $1)",
      [JSON.stringify(storedTool('silent.one', undefined, 'session', 1))],
    );
    await until(seen[31] as string[][], 'silent.one');
    expect(seen.flatMap((b, i) => (i === 7 || i === 31 ? [] : b.flat()))).toEqual([]);
    for (const w of watchers) await w.close();
    await waitFor('the listening connection to be given back after the last watcher closed', async () => (await listening()) === 0, {
      timeoutMs: 15_000,
      intervalMs: 50,
    });
  });
});

describe('createRegistry over two postgres stores (project + user)', () => {
  it('create, resolve, shadow, promote, versions, setState, and a second registry watching sees them', async () => {
    const d = await db();
    const builtins = ['forge_tool'];
    const stores = () => ({
      project: postgresToolStore(d.pool, { scope: 'project', builtins }),
      user: postgresToolStore(d.pool, { scope: 'user', builtins }),
    });
    const reg = createRegistry({ stores: stores(), builtins, projectDir: '/work/project' });
    await reg.load();
    const other = createRegistry({ stores: stores(), builtins, projectDir: '/work/project' });
    await other.load();
    const changes: unknown[] = [];
    await other.watch((c) => changes.push(c), { debounceMs: 10 });
    onTestFinished(() => other.close());

    expect(await reg.create(toolSpec('csv.count', 'project v1'), { scope: 'project', createdBy: BY })).toMatchObject({
      ok: true,
      tool: { version: 1 },
    });
    expect(await reg.create(toolSpec('csv.count', 'user v1'), { scope: 'user', createdBy: BY })).toMatchObject({ ok: true });
    expect(reg.resolve('csv.count')).toMatchObject({ scope: 'project', shadows: ['user'] });
    expect(await reg.create(toolSpec('csv__count'), { scope: 'project', createdBy: BY })).toMatchObject({ ok: false, kind: 'name_taken' });
    // The user tool came from elsewhere: promote refuses without force, replaces with it.
    expect(await reg.promote('csv.count')).toMatchObject({ ok: false, kind: 'promote_conflict' });
    expect(await reg.promote('csv.count', { force: true })).toMatchObject({
      ok: true,
      outcome: 'replaced',
      tool: { version: 2, scope: 'user', origin: { project: '/work/project' } },
    });
    expect(await reg.promote('csv.count')).toMatchObject({ ok: true, outcome: 'unchanged' });
    expect(await reg.setState('csv.count', 'retired', { scope: 'project' })).toMatchObject({
      ok: true,
      tool: { version: 2, state: 'retired' },
    });
    expect(reg.resolve('csv.count')).toMatchObject({ scope: 'user', shadows: [], tool: { description: 'project v1' } });
    expect(await reg.setState('csv.count', 'active', { scope: 'project', from: ['pending'] })).toMatchObject({
      ok: false,
      kind: 'state_conflict',
    });
    expect((await reg.versions('csv.count', { scope: 'user' })).map((v) => [v.version, v.current, v.tool?.description])).toEqual([
      [1, false, 'user v1'],
      [2, true, 'project v1'],
    ]);
    expect((await reg.versions('csv.count', { scope: 'project' })).map((v) => [v.version, v.current, v.tool?.state])).toEqual([
      [1, false, 'active'],
      [2, true, 'retired'],
    ]);
    // The second registry followed through LISTEN/NOTIFY.
    await waitFor(
      () => `the second registry to resolve csv.count to the user scope (it resolves ${JSON.stringify(other.resolve('csv.count'))})`,
      () => other.resolve('csv.count')?.scope === 'user',
      { timeoutMs: 15_000 },
    );
    expect(other.resolve('csv.count')).toMatchObject({ scope: 'user', tool: { version: 2, origin: { project: '/work/project' } } });
    expect(changes.length).toBeGreaterThan(0);
  });
});
