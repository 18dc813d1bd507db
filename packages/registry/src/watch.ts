import { type FSWatcher, watch } from 'node:fs';
import { RegistryError } from './errors.js';
import { ensureDir } from './fs-atomic.js';
import type { Scope } from './types.js';

/** Names that changed in one scope (added, replaced or removed), sorted. */
export interface ScopeChange {
  scope: Scope;
  names: string[];
}

/** Options of `Registry.watch`. */
export interface WatchOptions {
  /** Quiet time before a batch of file events is applied (default 50 ms). */
  debounceMs?: number;
  /** Longest a busy directory may delay a batch (default 500 ms). */
  maxWaitMs?: number;
  /**
   * Receives watcher errors after start (inotify limits, a removed directory) and anything
   * `onChange` throws. Default: ignored, so a watcher problem never crashes the process.
   */
  onError?: (error: unknown) => void;
}

/** A running watcher. */
export interface Watcher {
  close(): Promise<void>;
}

/**
 * Watches the tool files (`<root>/<name>.json`, depth 0; dot-files such as `.versions`, `.locks`
 * and temp files are ignored) and calls `flush` with the names touched per scope, debounced.
 *
 * One inotify watch per directory (`fs.watch` on the root) reports every entry created, written,
 * renamed over or removed, by name: a scope of a thousand tools costs what an empty one does.
 * (A watcher per file, as general-purpose watchers set up, took ~150 ms and a thousand inotify
 * watches for a thousand tools.)
 */
export async function startWatcher(
  targets: Array<{ scope: Scope; root: string }>,
  flush: (pending: Map<Scope, Set<string>>) => void,
  options: WatchOptions = {},
): Promise<Watcher> {
  const debounceMs = options.debounceMs ?? 50;
  const maxWaitMs = options.maxWaitMs ?? 500;
  const onError = options.onError ?? (() => {});
  const byRoot = new Map<string, Scope>();
  for (const t of targets) {
    try {
      // A directory that does not exist yet cannot be watched; tools may appear there later.
      await ensureDir(t.root);
    } catch (err) {
      throw new RegistryError('root_unusable', `cannot create tool directory ${t.root} to watch it: ${(err as Error).message}`, {
        cause: err,
      });
    }
    byRoot.set(t.root, t.scope);
  }
  let pending = new Map<Scope, Set<string>>();
  let timer: NodeJS.Timeout | undefined;
  let firstAt = 0;
  let closed = false;

  const run = () => {
    timer = undefined;
    const batch = pending;
    pending = new Map();
    if (closed || batch.size === 0) return;
    try {
      flush(batch);
    } catch (err) {
      onError(err);
    }
  };

  const onName = (scope: Scope, file: string) => {
    if (file.startsWith('.') || !file.endsWith('.json')) return;
    let names = pending.get(scope);
    if (!names) pending.set(scope, (names = new Set()));
    names.add(file.slice(0, -'.json'.length));
    const t = Date.now();
    if (!timer) firstAt = t;
    else clearTimeout(timer);
    timer = setTimeout(run, Math.max(0, Math.min(debounceMs, firstAt + maxWaitMs - t)));
  };

  const watchers: FSWatcher[] = [];
  for (const [root, scope] of byRoot) {
    let w: FSWatcher;
    try {
      w = watch(root, { encoding: 'utf8' }, (_event, file) => {
        if (file) onName(scope, file);
      });
    } catch (err) {
      for (const other of watchers) other.close();
      throw new RegistryError('root_unusable', `cannot watch ${root}: ${(err as Error).message}`, { cause: err });
    }
    w.on('error', (err) => onError(new RegistryError('root_unusable', `watching ${root} failed: ${err.message}`, { cause: err })));
    watchers.push(w);
  }

  return {
    async close() {
      if (closed) return;
      closed = true;
      if (timer) clearTimeout(timer);
      timer = undefined;
      pending = new Map();
      for (const w of watchers) w.close();
    },
  };
}
