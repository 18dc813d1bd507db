import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { kill9, runStoreChild, type StoreChildOpen, startStoreChild, startTogether } from './children.js';
import { tempDir } from './temp.js';

/** An envelope as the runner caches it (structurally the runner's `Envelope`). */
export interface CachedEnvelope {
  ok: boolean;
  data?: unknown;
  error?: { kind: string; message: string };
  meta: Record<string, unknown>;
}

/** A cache entry (structurally the runner's `CacheEntry`). */
export interface CachedEntry {
  envelope: CachedEnvelope;
  seed_run: string;
  created_at: number;
}

/** The store under test (structurally `CacheStore` of @forge/runner; see its contract there). */
export interface CacheStoreUnderTest {
  readonly kind: string;
  readonly where: string;
  get(key: string): Promise<CachedEntry | undefined>;
  // biome-ignore lint/suspicious/noExplicitAny: the runner's Envelope, structurally
  set(key: string, envelope: any, seedRun: string): Promise<void>;
  delete(key: string): Promise<void>;
  stats(): Promise<{ entries: number; bytes: number }>;
}

/** Limits of a cache (the runner's `CacheLimits`). */
export interface CacheLimitsUnderTest {
  maxEntries: number;
  maxBytes: number;
  maxAgeMs: number;
}

/** One test's storage, fresh and empty, as an implementation gives it to {@link describeCacheStore}. */
export interface CacheStoreHarness {
  /** A store over this storage (each call a new store object, as a new process would open it). */
  open(options?: { limits?: Partial<CacheLimitsUnderTest>; now?: () => number }): Promise<CacheStoreUnderTest>;
  /** How a child process opens a store over the same storage (default limits). */
  child: StoreChildOpen;
  /** Damages the stored entry of `key` as a torn or foreign write would (whatever the store can hold). */
  corrupt(key: string): Promise<void>;
  /** Releases everything `open` opened and removes the storage. */
  cleanup(): Promise<void>;
}

/** A cache key made from `s` (64 hex digits). */
export function keyOf(s: string): string {
  return createHash('sha256').update(s).digest('hex');
}

const env = (data: unknown, meta: Record<string, unknown> = {}): CachedEnvelope => ({
  ok: true,
  data,
  meta: { run_id: 'lz0000a-0f3a9c1e0001', cache: 'miss', duration_ms: 3, ...meta },
});

/** What the topics of the suite share. */
interface CacheSuite {
  /** Fresh, empty storage for the current test, removed after it. */
  fresh(): Promise<CacheStoreHarness>;
}

/**
 * The result cache conformance suite: every implementation of the runner's `CacheStore` runs it
 * (the file store in packages/conformance/test, PostgreSQL in packages/postgres/test). Behaviour
 * (get/set/delete/stats, limits by entries, bytes and age, LRU order), storage shared by stores
 * opened later and by other processes, many processes writing at once, kill -9 of a writer in
 * the middle of its writes (no torn entry), and bad input (malformed keys, damaged entries).
 */
export function describeCacheStore(label: string, factory: () => Promise<CacheStoreHarness>): void {
  const suite: CacheSuite = {
    async fresh() {
      const h = await factory();
      onTestFinished(() => h.cleanup());
      return h;
    },
  };
  describe(`CacheStore conformance: ${label}`, () => {
    cacheStoreBehaviour(suite);
    cacheStoreLimits(suite);
    cacheStoreStorage(suite);
    cacheStoreAcrossProcesses(suite);
  });
}

/** get, set, delete and stats. */
function cacheStoreBehaviour({ fresh }: CacheSuite): void {
  it('a key never set is a miss; a set entry reads back with its seed run and time', async () => {
    const h = await fresh();
    const store = await h.open({ now: () => 1_700_000_000_000 });
    expect(await store.get(keyOf('a'))).toBeUndefined();
    await store.set(keyOf('a'), env({ n: 1, text: 'é ✓ \u0000' }), 'lz0000a-0f3a9c1e0002');
    expect(await store.get(keyOf('a'))).toEqual({
      envelope: env({ n: 1, text: 'é ✓ \u0000' }),
      seed_run: 'lz0000a-0f3a9c1e0002',
      created_at: 1_700_000_000_000,
    });
    expect(typeof store.kind).toBe('string');
    expect(typeof store.where).toBe('string');
  });

  it('set replaces what a key held, delete removes it, stats count entries and bytes', async () => {
    const h = await fresh();
    const store = await h.open();
    expect(await store.stats()).toEqual({ entries: 0, bytes: 0 });
    await store.set(keyOf('a'), env({ v: 1 }), 's1');
    await store.set(keyOf('b'), env({ v: 2 }), 's2');
    const two = await store.stats();
    expect(two.entries).toBe(2);
    expect(two.bytes).toBeGreaterThan(0);
    await store.set(keyOf('a'), env({ v: 3, more: 'x'.repeat(100) }), 's3');
    expect((await store.get(keyOf('a')))?.envelope.data).toEqual({ v: 3, more: 'x'.repeat(100) });
    expect((await store.get(keyOf('a')))?.seed_run).toBe('s3');
    const replaced = await store.stats();
    expect(replaced.entries).toBe(2);
    expect(replaced.bytes).toBeGreaterThan(two.bytes + 90);
    await store.delete(keyOf('a'));
    await store.delete(keyOf('never-set'));
    expect(await store.get(keyOf('a'))).toBeUndefined();
    expect((await store.get(keyOf('b')))?.seed_run).toBe('s2');
    expect((await store.stats()).entries).toBe(1);
  });
}

/** What is never stored, and what goes past maxEntries, maxBytes and maxAgeMs. */
function cacheStoreLimits({ fresh }: CacheSuite): void {
  it('a failed envelope, and one larger than maxBytes, are not stored', async () => {
    const h = await fresh();
    const store = await h.open({ limits: { maxBytes: 2000 } });
    await store.set(keyOf('f'), { ok: false, error: { kind: 'internal', message: 'no' }, meta: {} }, 's');
    await store.set(keyOf('big'), env({ pad: 'x'.repeat(5000) }), 's');
    expect(await store.get(keyOf('f'))).toBeUndefined();
    expect(await store.get(keyOf('big'))).toBeUndefined();
    expect((await store.stats()).entries).toBe(0);
  });

  it('past maxEntries the least recently used entry goes (a read is a use)', async () => {
    const h = await fresh();
    const store = await h.open({ limits: { maxEntries: 3 } });
    for (const k of ['a', 'b', 'c']) await store.set(keyOf(k), env({ k }), `s-${k}`);
    expect(await store.get(keyOf('a'))).toBeDefined(); // b is now the least recently used
    await store.set(keyOf('d'), env({ k: 'd' }), 's-d');
    expect(await store.get(keyOf('b'))).toBeUndefined();
    for (const k of ['a', 'c', 'd']) expect((await store.get(keyOf(k)))?.seed_run).toBe(`s-${k}`);
    expect((await store.stats()).entries).toBe(3);
  });

  it('past maxBytes the least recently used entries go', async () => {
    const h = await fresh();
    const probe = await h.open();
    await probe.set(keyOf('probe'), env({ k: 'a', pad: 'x'.repeat(300) }), 's-a');
    const one = (await probe.stats()).bytes;
    await probe.delete(keyOf('probe'));
    const store = await h.open({ limits: { maxBytes: one * 3 + one / 2 } });
    for (const k of ['a', 'b', 'c', 'd']) await store.set(keyOf(k), env({ k, pad: 'x'.repeat(300) }), `s-${k}`);
    expect(await store.get(keyOf('a'))).toBeUndefined();
    for (const k of ['b', 'c', 'd']) expect(await store.get(keyOf(k))).toBeDefined();
    const s = await store.stats();
    expect(s.entries).toBe(3);
    expect(s.bytes).toBeLessThanOrEqual(one * 3 + one / 2);
  });

  it('an entry older than maxAgeMs is a miss, and is removed', async () => {
    const h = await fresh();
    let t = 1_000_000;
    const store = await h.open({ limits: { maxAgeMs: 60_000 }, now: () => t });
    await store.set(keyOf('old'), env({ k: 'old' }), 's');
    t += 59_000;
    expect(await store.get(keyOf('old'))).toBeDefined();
    t += 2_000;
    expect(await store.get(keyOf('old'))).toBeUndefined();
    expect((await store.stats()).entries).toBe(0);
  });
}

/** The storage itself: read by stores opened later; malformed keys refused, damaged entries dropped. */
function cacheStoreStorage({ fresh }: CacheSuite): void {
  it('a store opened later over the same storage reads what an earlier one wrote', async () => {
    const h = await fresh();
    const a = await h.open();
    for (let i = 0; i < 20; i++) await a.set(keyOf(`k${i}`), env({ i }), `s${i}`);
    const b = await h.open();
    for (let i = 0; i < 20; i++) expect((await b.get(keyOf(`k${i}`)))?.envelope.data).toEqual({ i });
    expect((await b.stats()).entries).toBe(20);
  });

  it('bad input: a malformed key is a miss to get and a TypeError to set and delete; a damaged entry is a miss and goes', async () => {
    const h = await fresh();
    const store = await h.open();
    for (const bad of ['', 'abc', keyOf('x').toUpperCase(), `${keyOf('x')}0`, '../../etc/passwd', `${keyOf('x').slice(0, 63)}/`]) {
      expect(await store.get(bad)).toBeUndefined();
      await expect(store.set(bad, env({}), 's')).rejects.toThrow(TypeError);
      await expect(store.delete(bad)).rejects.toThrow(/not a cache key/);
    }
    await store.set(keyOf('damaged'), env({ k: 1 }), 's');
    await h.corrupt(keyOf('damaged'));
    const later = await h.open();
    expect(await later.get(keyOf('damaged'))).toBeUndefined();
    expect((await later.stats()).entries).toBe(0);
  });
}

/** Writer processes at once, and writers killed -9 in the middle of their writes. */
function cacheStoreAcrossProcesses({ fresh }: CacheSuite): void {
  it('4 processes setting 40 entries each at once: every entry is there, whole', async () => {
    const h = await fresh();
    const barrier = tempDir('forge-conf-cache-');
    onTestFinished(() => barrier.remove());
    const go = join(barrier.path, 'go');
    const keys = (p: number) => Array.from({ length: 40 }, (_, i) => keyOf(`p${p}-${i}`));
    const runs = [0, 1, 2, 3].map((p) => runStoreChild(h.child, { op: 'cacheSetMany', keys: keys(p), pad: 2000, go }));
    await startTogether(go, 4);
    await Promise.all(runs);
    const store = await h.open();
    for (let p = 0; p < 4; p++)
      for (const key of keys(p)) {
        const e = await store.get(key);
        expect(e?.envelope.data).toEqual({ key, pad: 'x'.repeat(2000) });
        expect(e?.seed_run).toBe(`seed-${key.slice(0, 8)}`);
      }
    expect((await store.stats()).entries).toBe(160);
  });

  for (const after of [0, 3, 25]) {
    it(`kill -9 of a writer ${after} entries into its writes: what it wrote reads whole, nothing torn`, async () => {
      const h = await fresh();
      const keys = Array.from({ length: 8 }, (_, i) => keyOf(`crash-${i}`));
      const c = startStoreChild(h.child, { op: 'cacheSetForever', keys, pad: 200_000 });
      await c.linesAtLeast(after);
      await kill9(c);
      const written = new Set(c.lines.map((l) => l.set as string));
      const store = await h.open();
      let found = 0;
      for (const key of keys) {
        const e = await store.get(key);
        if (written.has(key)) expect(e).toBeDefined();
        if (e) {
          found++;
          expect(e.envelope.data).toEqual({ key, pad: 'x'.repeat(200_000) });
        }
      }
      expect(found).toBeGreaterThanOrEqual(written.size);
      // The storage stays usable: a write after the crash reads back.
      await store.set(keys[0] as string, env({ after: true }), 'after');
      expect((await (await h.open()).get(keys[0] as string))?.seed_run).toBe('after');
    }, 60_000);
  }
}
