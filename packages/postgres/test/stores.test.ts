import { hostname } from 'node:os';
import { createRegistry } from '@forge/registry';
import { describe, expect, it, onTestFinished } from 'vitest';
import { openPostgresStores, PostgresStoreError } from '../src/index.js';
import { poolOn, usePostgres } from './helpers.js';

const pg = usePostgres();

/** The stores on a fresh database, closed when the test finishes. */
async function stores(o: Parameters<typeof openPostgresStores>[1] = {}) {
  const url = await pg.server().database();
  const s = await openPostgresStores(url, o);
  onTestFinished(() => s.close());
  return { url, s };
}

describe('openPostgresStores', () => {
  it('migrates a fresh database and reports it reachable, migrated, with the clock skew and an empty queue', async () => {
    const { s } = await stores();
    const c = await s.check();
    expect(c).toMatchObject({ reachable: true, migrations: { pending: [], unknown: [] }, queue: { pending: 0, claimed: 0 } });
    expect(c.migrations?.current).toBe(c.migrations?.latest);
    expect(c.server).toMatch(/^\d+\.\d+/);
    // One host, one clock: the skew is what a round trip can hide, not minutes.
    expect(Math.abs(c.clockSkewMs ?? Number.NaN)).toBeLessThan(5_000);
    expect(s.where).toMatch(/^postgres:\/\/forge@/);
    expect(s.queue.where).toBe(`${s.where}#forge_calls`);
  });

  it('a second open of the same database applies nothing and shares the audit log and the queue', async () => {
    const { url, s } = await stores();
    await s.audit.append('test.first', { n: 1 });
    await s.queue.publish({ id: 'j1', payload: { n: 1 } });
    const t = await openPostgresStores(url);
    onTestFinished(() => t.close());
    expect((await t.audit.head()).seq).toBe(1);
    expect((await t.queue.stats()).pending).toBe(1);
    expect(await t.queue.claim('w-1')).toMatchObject({ id: 'j1', payload: { n: 1 } });
  });

  it('tool stores per scope, sessions and tasks apart', async () => {
    const { s } = await stores({ builtins: ['forge_tool'] });
    const a = s.toolStore('session', { session: 's1' });
    const b = s.toolStore('session', { session: 's2' });
    const t = s.toolStore('task', { session: 's1', task: 't1' });
    expect([a.scope, b.scope, t.scope]).toEqual(['session', 'session', 'task']);
    const reg = createRegistry({ stores: { session: a }, builtins: ['forge_tool'] });
    const spec = { name: 'x.y', description: 'a test tool', runtime: 'python3', input_schema: { type: 'object' }, impl: 'print(1)\n' };
    expect(await reg.create(spec, { scope: 'session', createdBy: { persona: 'p', session: 's1' } })).toMatchObject({ ok: true });
    expect(await a.read('x.y')).toMatchObject({ status: 'ok', tool: { name: 'x.y', scope: 'session', version: 1 } });
    expect(await b.read('x.y')).toEqual({ status: 'missing' });
    expect(await t.read('x.y')).toEqual({ status: 'missing' });
    expect(await s.toolStore('task', { session: 's1', task: 't2' }).read('x.y')).toEqual({ status: 'missing' });
    // A record under a built-in name is never a tool.
    expect(await a.read('forge_tool')).toEqual({ status: 'missing' });
  });

  it('presence: a beat is listed alive by the server clock, a leave removes it, a stale one is gone', async () => {
    const { s } = await stores();
    await s.presence.beat({
      name: 'fe-1',
      kind: 'front-end',
      host: hostname(),
      pid: process.pid,
      startedAt: Date.now(),
      facts: { workers: 2 },
    });
    await s.presence.beat({ name: 'w-9', kind: 'worker', host: 'elsewhere', pid: 1, startedAt: Date.now() });
    const listed = await s.presence.list();
    expect(listed.map((m) => [m.name, m.kind, m.alive])).toEqual([
      ['fe-1', 'front-end', true],
      ['w-9', 'worker', true],
    ]);
    expect(listed[0]?.facts).toEqual({ workers: 2 });
    // A pid of this host that is not running is gone at once; silence past staleMs is gone anywhere.
    await s.presence.beat({ name: 'w-dead', kind: 'worker', host: hostname(), pid: 2 ** 22 + 7, startedAt: Date.now() });
    expect((await s.presence.list()).find((m) => m.name === 'w-dead')?.alive).toBe(false);
    expect((await s.presence.list({ staleMs: 0 })).every((m) => !m.alive)).toBe(true);
    await s.presence.leave('fe-1');
    expect((await s.presence.list()).map((m) => m.name)).toEqual(['w-9', 'w-dead']);
    await expect(s.presence.beat({ name: '../x', kind: 'worker', host: 'h', pid: 1, startedAt: 0 })).rejects.toThrow(/is not 1 to 100/);
  });

  it('a server that refuses the connection: connect_failed, naming the database without its password', async () => {
    const url = `postgres://forge:s3cret-pw@localhost/postgres?host=${encodeURIComponent('/nonexistent-forge-socket-dir')}`;
    const err = await openPostgresStores(url).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PostgresStoreError);
    expect((err as PostgresStoreError).code).toBe('connect_failed');
    expect((err as Error).message).not.toContain('s3cret-pw');
    expect((err as Error).message).toContain('postgres://forge:***@');
  });

  it('a database migrated by a newer forge is refused, saying so', async () => {
    const url = await pg.server().database();
    const pool = poolOn(url);
    const first = await openPostgresStores(url);
    await first.close();
    await pool.query("INSERT INTO forge_migrations (version, name) VALUES (9999, 'from a newer forge')");
    const err = await openPostgresStores(url).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/9999/);
  });
});
