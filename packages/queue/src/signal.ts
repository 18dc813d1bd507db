import { type FSWatcher, watch } from 'node:fs';

/**
 * A change signal on some directories: fs.watch (inotify) where it works, and a slow safety
 * re-scan in case an event is missed (or inotify is out of watches). Waiters sleep; nothing polls
 * quickly.
 */
export class ChangeSignal {
  private readonly watchers: FSWatcher[] = [];
  private readonly waiters = new Set<(name: string | null) => void>();
  private closed = false;
  /** Counts changes seen: a waiter passes the count it saw so that a change in between is not missed. */
  version = 0;

  constructor(dirs: string[]) {
    for (const dir of dirs) {
      try {
        const w = watch(dir, { persistent: false }, (_event, name) => this.fire(name ? String(name) : null));
        w.on('error', () => w.close());
        this.watchers.push(w);
      } catch {
        // No inotify watch available: the safety re-scan of every waiter still wakes it.
      }
    }
  }

  /** Wakes every waiter (also used in-process right after our own changes). */
  fire(name: string | null): void {
    this.version++;
    const ws = [...this.waiters];
    this.waiters.clear();
    for (const w of ws) w(name);
  }

  /**
   * Resolves on the next change (its file name, or null when unknown), after `ms` (null), or when
   * `signal` aborts (null); at once when a change came after the `since` version.
   */
  wait(ms: number, signal?: AbortSignal, since?: number): Promise<string | null> {
    if (this.closed || signal?.aborted || (since !== undefined && since !== this.version)) return Promise.resolve(null);
    return new Promise((resolve) => {
      const done = (name: string | null) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.waiters.delete(done);
        resolve(name);
      };
      const onAbort = () => done(null);
      const timer = setTimeout(() => done(null), ms);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.add(done);
    });
  }

  /** Stops watching and releases every waiter. */
  close(): void {
    this.closed = true;
    for (const w of this.watchers) w.close();
    this.fire(null);
  }
}
