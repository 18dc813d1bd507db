import { createHash } from 'node:crypto';
import type { CacheEntry, CacheStore } from './cacheStore.js';
import type { Envelope } from './envelope.js';

export { type CacheEntry, type CacheLimits, type CacheStore, DEFAULT_CACHE_LIMITS, fileCacheStore } from './cacheStore.js';

/**
 * The cache key of a deterministic call: the spec digest (impl, schemas, runtime), the resolved
 * runtime's version, the digest of the canonical input (`sha256:` over its keys-sorted JSON), and
 * the caller's authority ({@link callAuthority}): an answer computed under one grant is never
 * served to a caller with another. Secrets are never part of it (tools that use secrets are not
 * cached).
 */
export function cacheKey(specDigest: string, runtimeVersion: string, inputDigest: string, authority: string): string {
  return createHash('sha256').update(`${specDigest}\n${runtimeVersion}\n${inputDigest}\n${authority}`).digest('hex');
}

/**
 * The result cache as the call pipeline uses it: a {@link CacheStore} (files by default, one
 * database for many front-ends) and, above it in this process, single flight: concurrent identical
 * calls run once ({@link ResultCache.once}). A store that fails is a miss on read and a warning on
 * write: the call is answered either way, never from a store that could not be read.
 */
export class ResultCache {
  readonly store: CacheStore;
  readonly #flights = new Map<string, Promise<unknown>>();

  constructor(store: CacheStore) {
    this.store = store;
  }

  /** The entry for `key`, or undefined (a miss, or a store that could not answer). */
  get(key: string): Promise<CacheEntry | undefined> {
    return this.store.get(key).catch((err: unknown) => {
      process.emitWarning(
        `forge: the ${this.store.kind} result cache at ${this.store.where} could not be read (a miss): ${(err as Error).message}`,
      );
      return undefined;
    });
  }

  /** Stores an ok result; settles once stored (never rejects: a failed write is a warning). */
  set(key: string, envelope: Envelope, seedRun: string): Promise<void> {
    let p: Promise<void>;
    try {
      p = this.store.set(key, envelope, seedRun);
    } catch (err) {
      p = Promise.reject(err);
    }
    return p.catch((err: unknown) => {
      process.emitWarning(
        `forge: the ${this.store.kind} result cache at ${this.store.where} did not store a result: ${(err as Error).message}`,
      );
    });
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
}
