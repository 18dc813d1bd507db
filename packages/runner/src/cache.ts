import { createHash } from 'node:crypto';
import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { Envelope } from './envelope.js';

export interface CacheLimits {
  /** Entries kept (least recently used evicted first). */
  maxEntries: number;
  /** Bytes of stored entries kept. */
  maxBytes: number;
  /** Age past which an entry is a miss (and removed). */
  maxAgeMs: number;
}

export const DEFAULT_CACHE_LIMITS: Readonly<CacheLimits> = { maxEntries: 2000, maxBytes: 64 << 20, maxAgeMs: 7 * 24 * 3600_000 };

/** A cached ok result and the run that produced it. */
export interface CacheEntry {
  envelope: Envelope;
  /** The run whose result this is. */
  seed_run: string;
  created_at: number;
}

interface Slot {
  bytes: number;
  created: number;
  entry?: CacheEntry; // kept in memory once read or written
}

/**
 * The cache key of a deterministic call: the spec digest (impl, schemas, runtime), the resolved
 * runtime's version, and the digest of the canonical input (`sha256:` over its keys-sorted JSON).
 * Secrets are never part of it (tools that use secrets are not cached).
 */
export function cacheKey(specDigest: string, runtimeVersion: string, inputDigest: string): string {
  return createHash('sha256').update(`${specDigest}\n${runtimeVersion}\n${inputDigest}`).digest('hex');
}

/**
 * Results of deterministic tools, on disk under one directory (a file per entry, written
 * atomically, mode 0600) with an in-memory index in LRU order, so a hit is a map lookup. Bounded
 * by entries, bytes and age. Concurrent identical calls run once ({@link ResultCache.once}).
 */
export class ResultCache {
  readonly #dir: string;
  readonly #limits: CacheLimits;
  readonly #now: () => number;
  readonly #slots = new Map<string, Slot>(); // insertion order = least recently used first
  readonly #flights = new Map<string, Promise<unknown>>();
  #bytes = 0;

  constructor(dir: string, limits: Partial<CacheLimits> = {}, now: () => number = Date.now) {
    this.#dir = dir;
    this.#limits = { ...DEFAULT_CACHE_LIMITS, ...limits };
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

  /** The entry for `key`, or undefined (a miss; expired and unreadable entries are removed). */
  get(key: string): CacheEntry | undefined {
    const slot = this.#slots.get(key);
    if (!slot) return undefined;
    if (this.#now() - slot.created > this.#limits.maxAgeMs) {
      this.#drop(key);
      return undefined;
    }
    if (!slot.entry) {
      try {
        const entry = JSON.parse(readFileSync(join(this.#dir, `${key}.json`), 'utf8')) as CacheEntry;
        if (!entry || typeof entry !== 'object' || entry.envelope?.ok !== true || typeof entry.seed_run !== 'string')
          throw new Error('bad entry');
        slot.entry = entry;
      } catch {
        this.#drop(key);
        return undefined;
      }
    }
    // Most recently used last.
    this.#slots.delete(key);
    this.#slots.set(key, slot);
    return slot.entry;
  }

  /** Stores an ok result. */
  set(key: string, envelope: Envelope, seedRun: string): void {
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

  /**
   * Runs `fn` once for concurrent callers of the same key: the first caller runs it, the others
   * wait for its result (or its error).
   */
  once<T>(key: string, fn: () => Promise<T>): { shared: boolean; result: Promise<T> } {
    const running = this.#flights.get(key) as Promise<T> | undefined;
    if (running) return { shared: true, result: running };
    const p = fn().finally(() => this.#flights.delete(key));
    this.#flights.set(key, p);
    return { shared: false, result: p };
  }

  /** Entries and bytes held. */
  stats(): { entries: number; bytes: number } {
    return { entries: this.#slots.size, bytes: this.#bytes };
  }

  #evict(): void {
    for (const [key] of this.#slots) {
      if (this.#slots.size <= this.#limits.maxEntries && this.#bytes <= this.#limits.maxBytes) break;
      this.#drop(key);
    }
  }

  #drop(key: string): void {
    const slot = this.#slots.get(key);
    if (!slot) return;
    this.#slots.delete(key);
    this.#bytes -= slot.bytes;
    rmSync(join(this.#dir, `${key}.json`), { force: true });
  }
}
