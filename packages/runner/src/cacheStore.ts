import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { Envelope } from './envelope.js';

/** Limits of a result cache: every store keeps all three. */
export interface CacheLimits {
  /** Entries kept (least recently used evicted first). */
  maxEntries: number;
  /** Bytes of stored entries kept (an entry's bytes: its JSON text); a larger single entry is not stored. */
  maxBytes: number;
  /** Age past which an entry is a miss (and removed). */
  maxAgeMs: number;
}

/** The defaults: 2000 entries, 64 MiB, 7 days. */
export const DEFAULT_CACHE_LIMITS: Readonly<CacheLimits> = { maxEntries: 2000, maxBytes: 64 << 20, maxAgeMs: 7 * 24 * 3600_000 };

/** A cached ok result and the run that produced it. */
export interface CacheEntry {
  envelope: Envelope;
  /** The run whose result this is. */
  seed_run: string;
  created_at: number;
}

/**
 * Where the results of deterministic calls are kept (one per forge home, or one shared by many
 * front-ends). Keys are {@link cacheKey}s: 64 lowercase hex digits.
 *
 * The contract, kept by every implementation (the conformance suite `describeCacheStore` checks it):
 * - `get` answers the entry stored under `key`, or undefined: a miss for a key never set, deleted,
 *   evicted, older than `maxAgeMs` (removed then), unreadable or damaged (removed then), or not a
 *   cache key at all. It never throws for what the store holds; a store that cannot be reached rejects.
 * - `set` stores an ok envelope (a failed one is ignored, as is one larger than `maxBytes`) with the
 *   run that produced it, replacing what the key held; a reader sees the old entry or the whole new
 *   one, never part of one, even when the writer is killed mid-write. Then entries past
 *   `maxEntries` or `maxBytes` are evicted, least recently used (read or written) first.
 * - `delete` removes the key's entry (nothing when there is none).
 * - `set` and `delete` throw a `TypeError` for a key that is not a cache key.
 * - Many processes may use one storage at once; each write is whole. Single flight (concurrent
 *   identical calls run once) is the runner's, in each process, above the store.
 */
export interface CacheStore {
  /** `file`, `postgres`, …: for `forge doctor` and messages. */
  readonly kind: string;
  /** Where it keeps entries (a directory; a database URL without its password). */
  readonly where: string;
  get(key: string): Promise<CacheEntry | undefined>;
  set(key: string, envelope: Envelope, seedRun: string): Promise<void>;
  delete(key: string): Promise<void>;
  /** Entries and bytes held now. */
  stats(): Promise<{ entries: number; bytes: number }>;
}

/** The exact form of a cache key. */
export const CACHE_KEY_PATTERN = /^[0-9a-f]{64}$/;

/** Throws the `TypeError` of a key that is not a cache key (for implementations of {@link CacheStore}). */
export function assertCacheKey(key: unknown): asserts key is string {
  if (typeof key !== 'string' || !CACHE_KEY_PATTERN.test(key))
    throw new TypeError(
      `cache key ${JSON.stringify(typeof key === 'string' ? key.slice(0, 80) : key)} is not a cache key (64 lowercase hex digits, from cacheKey())`,
    );
}

/** Whether `v` is a cache entry as stores keep it (an ok envelope, a seed run, a time). */
export function isCacheEntry(v: unknown): v is CacheEntry {
  if (!v || typeof v !== 'object') return false;
  const e = v as Partial<CacheEntry>;
  return (
    !!e.envelope &&
    typeof e.envelope === 'object' &&
    e.envelope.ok === true &&
    typeof e.envelope.meta === 'object' &&
    typeof e.seed_run === 'string' &&
    typeof e.created_at === 'number'
  );
}

interface Slot {
  bytes: number;
  created: number;
  entry?: CacheEntry; // kept in memory once read or written
}

/**
 * The file implementation of {@link CacheStore}: one directory, a file `<key>.json` per entry
 * (written atomically: temp file, fsync, rename; mode 0600), with an in-memory index in LRU order
 * built when it opens, so a hit is a map lookup. A process sees the entries on disk when it opened
 * and those it writes itself (another process's later writes are misses until it reopens). Leftover
 * temporary files of a write cut short are removed when it opens.
 */
export function fileCacheStore(dir: string, limits: Partial<CacheLimits> = {}, now: () => number = Date.now): CacheStore {
  const store = new FileCacheStore(dir, { ...DEFAULT_CACHE_LIMITS, ...limits }, now);
  return {
    kind: 'file',
    where: dir,
    // The index answers at once: a hit costs no I/O once its entry is in memory.
    get: async (key) => store.get(key),
    set: async (key, envelope, seedRun) => store.set(key, envelope, seedRun),
    delete: async (key) => {
      assertCacheKey(key);
      store.drop(key);
    },
    stats: async () => store.stats(),
  };
}

class FileCacheStore {
  readonly #dir: string;
  readonly #limits: CacheLimits;
  readonly #now: () => number;
  readonly #slots = new Map<string, Slot>(); // insertion order = least recently used first
  #bytes = 0;

  constructor(dir: string, limits: CacheLimits, now: () => number) {
    this.#dir = dir;
    this.#limits = limits;
    this.#now = now;
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const found: [string, number, number][] = [];
    for (const name of readdirSync(dir)) {
      if (!/^[0-9a-f]{64}\.json$/.test(name)) {
        if (name.includes('.tmp-')) rmSync(join(dir, name), { force: true }); // a write cut short
        continue;
      }
      try {
        const st = statSync(join(dir, name));
        found.push([name.slice(0, 64), st.size, st.mtimeMs]);
      } catch {
        // removed meanwhile by another process
      }
    }
    found.sort((a, b) => a[2] - b[2]);
    for (const [key, bytes, created] of found) {
      this.#slots.set(key, { bytes, created });
      this.#bytes += bytes;
    }
    this.#evict();
  }

  get(key: string): CacheEntry | undefined {
    const slot = this.#slots.get(key);
    if (!slot) return undefined;
    if (this.#now() - slot.created > this.#limits.maxAgeMs) {
      this.drop(key);
      return undefined;
    }
    if (!slot.entry) {
      try {
        const entry: unknown = JSON.parse(readFileSync(join(this.#dir, `${key}.json`), 'utf8'));
        if (!isCacheEntry(entry)) throw new Error('bad entry');
        slot.entry = entry;
      } catch {
        this.drop(key);
        return undefined;
      }
    }
    // Most recently used last.
    this.#slots.delete(key);
    this.#slots.set(key, slot);
    return slot.entry;
  }

  set(key: string, envelope: Envelope, seedRun: string): void {
    assertCacheKey(key);
    if (!envelope.ok) return;
    const entry: CacheEntry = { envelope, seed_run: seedRun, created_at: this.#now() };
    const text = JSON.stringify(entry);
    const bytes = Buffer.byteLength(text);
    if (bytes > this.#limits.maxBytes) return;
    const file = join(this.#dir, `${key}.json`);
    const tmp = `${file}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`;
    const fd = openSync(tmp, 'wx', 0o600);
    try {
      writeSync(fd, text);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, file);
    const old = this.#slots.get(key);
    if (old) {
      this.#bytes -= old.bytes;
      this.#slots.delete(key);
    }
    this.#slots.set(key, { bytes, created: entry.created_at, entry });
    this.#bytes += bytes;
    this.#evict();
  }

  stats(): { entries: number; bytes: number } {
    return { entries: this.#slots.size, bytes: this.#bytes };
  }

  #evict(): void {
    for (const [key] of this.#slots) {
      if (this.#slots.size <= this.#limits.maxEntries && this.#bytes <= this.#limits.maxBytes) break;
      this.drop(key);
    }
  }

  drop(key: string): void {
    const slot = this.#slots.get(key);
    this.#slots.delete(key);
    if (slot) this.#bytes -= slot.bytes;
    rmSync(join(this.#dir, `${key}.json`), { force: true });
  }
}
