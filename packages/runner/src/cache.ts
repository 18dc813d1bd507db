import { createHash } from 'node:crypto';
import { outputDigest, withoutReceipt } from './auditData.js';
import { AuditedRuns, type AuditSource, type RecordedAnswer } from './auditedRuns.js';
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

/** A stored entry whose answer is not what the audit log recorded for its seed run. */
export interface CacheMismatch {
  key: string;
  seed_run: string;
  /**
   * What differed: the log records no cacheable answer of the seed run (`not_recorded`), recorded
   * it under another key (`key_differs`: the entry was moved), or recorded another answer
   * (`output_differs`: the entry was edited).
   */
  reason: 'not_recorded' | 'key_differs' | 'output_differs';
  /** The digest of the answer the entry holds. */
  output_digest: string;
  /** What the log recorded of the seed run's answer, when it recorded one. */
  recorded?: RecordedAnswer;
}

/** Whether `entry`, read under `key`, holds the answer `recorded` says its seed run gave under that key. */
export function checkCacheEntry(key: string, entry: CacheEntry, recorded: RecordedAnswer | undefined): CacheMismatch | undefined {
  const found = { key, seed_run: entry.seed_run, output_digest: outputDigest(entry.envelope) };
  if (!recorded) return { ...found, reason: 'not_recorded' };
  if (recorded.cache_key !== key) return { ...found, reason: 'key_differs', recorded };
  if (recorded.output_digest !== found.output_digest) return { ...found, reason: 'output_differs', recorded };
  return undefined;
}

/** What a user reads of a mismatch: which entry, what differed, and what became of it. */
export function mismatchMessage(m: CacheMismatch, tool: string, store: Pick<CacheStore, 'kind' | 'where'>): string {
  const seed = `its seed run ${m.seed_run}`;
  const why =
    m.reason === 'not_recorded'
      ? `the audit log records no cacheable answer of ${seed}`
      : m.reason === 'key_differs'
        ? `the audit log recorded ${seed} under another key (${m.recorded?.cache_key.slice(0, 12)}…)`
        : `its answer (${m.output_digest}) is not the one the audit log recorded for ${seed} (${m.recorded?.output_digest})`;
  return `the ${store.kind} result cache at ${store.where} held an answer of "${tool}" (key ${m.key.slice(0, 12)}…) that the audit log does not back: ${why}; it was removed and the call runs again (if nobody edited the cache, check who can write to it)`;
}

/**
 * The result cache as the call pipeline uses it: a {@link CacheStore} (files by default, one
 * database for many front-ends), checked against the audit log at every hit, and, above it in
 * this process, single flight: concurrent identical calls run once ({@link ResultCache.once}). A
 * store that fails is a miss on read and a warning on write: the call is answered either way,
 * never from a store that could not be read.
 */
export class ResultCache {
  readonly store: CacheStore;
  readonly #flights = new Map<string, Promise<unknown>>();
  /** What the log recorded of cached answers: made at the first lookup, over the engine's log. */
  #recorded: AuditedRuns | undefined;
  /**
   * Entries already checked, as the store handed them out: a store that keeps what it read in
   * memory (the file store) hands out the same object at every hit, and only what it reads from
   * its storage can differ from what the log recorded; so the digest is taken once per read
   * (the value: the key it was checked under).
   */
  readonly #checked = new WeakMap<CacheEntry, string>();

  constructor(store: CacheStore) {
    this.store = store;
  }

  /**
   * The entry for `key` when the audit log backs it: the `forge.called` entry of its seed run
   * recorded this key and the digest of this very answer, so an entry edited in the store (to any
   * other answer, under any other key, naming any other run) is never served. One the log does not
   * back is removed from the store and given as `mismatch`, for the caller to report; undefined is
   * a plain miss (no entry, a store that could not answer, a log that could not be read: a
   * warning). `log` is the engine's, the same at every call: it is read from the first lookup on.
   */
  async lookup(key: string, log: AuditSource): Promise<{ entry: CacheEntry } | { mismatch: CacheMismatch } | undefined> {
    const entry = await this.get(key);
    if (!entry) return undefined;
    if (this.#checked.get(entry) === key) return { entry };
    this.#recorded ??= new AuditedRuns(log);
    let recorded: RecordedAnswer | undefined;
    try {
      recorded = await this.#recorded.find(entry.seed_run);
    } catch (err) {
      process.emitWarning(
        `forge: the audit log ${log.log.path} could not be read to check the cached answer under key ${key.slice(0, 12)}… (a miss): ${(err as Error).message}`,
      );
      return undefined;
    }
    const mismatch = checkCacheEntry(key, entry, recorded);
    if (!mismatch) {
      this.#checked.set(entry, key);
      return { entry };
    }
    await this.store.delete(key).catch((err: unknown) => {
      process.emitWarning(
        `forge: the ${this.store.kind} result cache at ${this.store.where} could not remove the entry under key ${key.slice(0, 12)}…: ${(err as Error).message}`,
      );
    });
    return { mismatch };
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

  /**
   * Stores an ok result; settles once stored (never rejects: a failed write is a warning).
   * `recorded` is what this engine's entry of the seed run recorded, durable by now.
   */
  set(key: string, envelope: Envelope, seedRun: string, recorded?: RecordedAnswer): Promise<void> {
    if (recorded) this.#recorded?.note(seedRun, recorded);
    let p: Promise<void>;
    try {
      p = this.store.set(key, withoutReceipt(envelope), seedRun);
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
