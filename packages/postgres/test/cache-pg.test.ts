import { describeCacheStore, keyOf } from '@forge/conformance/cache';
import type { Envelope } from '@forge/runner';
import { describe, expect, it } from 'vitest';
import { postgresCacheStore } from '../src/index.js';
import { codeOf, poolOn, usePostgres } from './helpers.js';

const pg = usePostgres();
const OPENER = new URL('./cache-runs-child-stores.mjs', import.meta.url).pathname;

describeCacheStore('postgres (postgresCacheStore)', async () => {
  const { url, pool } = await pg.database();
  return {
    open: async (o = {}) => postgresCacheStore(pool, { ...(o.limits ? { limits: o.limits } : {}), ...(o.now ? { now: o.now } : {}) }),
    child: { module: OPENER, export: 'openPgCacheStore', args: [url] },
    corrupt: async (key) => {
      await pool.query(`UPDATE forge_cache SET entry = '{"envelope": {"ok": tr' WHERE key = $1`, [key]);
    },
    cleanup: async () => {},
  };
});

const env = (data: unknown): Envelope => ({ ok: true, data, meta: { cache: 'miss' } });

describe('postgresCacheStore on a real server', () => {
  it('two front-ends over one database see each other’s entries at once, and share the LRU order', async () => {
    const { pool } = await pg.database();
    const a = postgresCacheStore(pool, { limits: { maxEntries: 2 } });
    const b = postgresCacheStore(pool, { limits: { maxEntries: 2 } });
    await a.set(keyOf('1'), env(1), 's1');
    expect((await b.get(keyOf('1')))?.seed_run).toBe('s1');
    await b.set(keyOf('2'), env(2), 's2');
    expect(await a.get(keyOf('1'))).toBeDefined(); // 2 is now the least recently used, by a's read
    await b.set(keyOf('3'), env(3), 's3');
    expect(await a.get(keyOf('2'))).toBeUndefined();
    expect((await a.get(keyOf('1')))?.seed_run).toBe('s1');
    expect((await b.stats()).entries).toBe(2);
  });

  it('keeps the entry text as the file store writes it', async () => {
    const { pool } = await pg.database();
    const store = postgresCacheStore(pool, { now: () => 42 });
    await store.set(keyOf('t'), env({ x: 'é' }), 'seed');
    const r = await pool.query('SELECT entry, bytes FROM forge_cache');
    expect(r.rows).toEqual([
      { entry: JSON.stringify({ envelope: env({ x: 'é' }), seed_run: 'seed', created_at: 42 }), bytes: Buffer.byteLength(r.rows[0].entry) },
    ]);
  });

  it('an unmigrated database is not_migrated, and no message holds the password', async () => {
    const url = await pg.server().database();
    const pool = poolOn(url);
    const store = postgresCacheStore(pool, { where: 'postgres://forge:s3cret-pw@db.example/forge' });
    expect(store.where).toBe('postgres://forge:***@db.example/forge');
    expect(await codeOf(store.get(keyOf('x')))).toBe('not_migrated');
    const err = await store.set(keyOf('x'), env(1), 's').catch((e: Error) => e);
    expect((err as Error).message).toMatch(/not migrated; run migrate\(\)/);
    expect((err as Error).message).not.toContain('s3cret-pw');
    expect(() => postgresCacheStore(pool, { limits: { maxEntries: -1 } })).toThrow(/limits.maxEntries must be a non-negative integer/);
  });
});
