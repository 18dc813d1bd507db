import { type FSWatcher, readdirSync, statSync, watch } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { RegistryError } from './errors.js';
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
 *
 * A scope directory that does not exist yet is not created (watching must leave no state in a
 * project that has none): the nearest directory above it that exists is watched instead, one
 * level at a time, until it appears; then the tool files already in it are reported as changed.
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
  for (const t of targets) byRoot.set(t.root, t.scope);
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

  const watchers: RootWatch[] = [];
  for (const [root, scope] of byRoot) {
    try {
      watchers.push(watchRoot(root, (file) => onName(scope, file), onError));
    } catch (err) {
      for (const other of watchers) other.close();
      throw new RegistryError('root_unusable', `cannot watch ${root}: ${(err as Error).message}`, { cause: err });
    }
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

interface RootWatch {
  close(): void;
}

/**
 * Calls `onFile` with the name of each entry created, written, renamed or removed in `root`. While
 * `root` is missing, watches the nearest existing directory above it for the next missing one;
 * once `root` exists, reports every entry already in it (written before the watch could see them).
 * Throws when the first directory cannot be watched; later failures go to `onError`.
 */
function watchRoot(root: string, onFile: (file: string) => void, onError: (error: unknown) => void): RootWatch {
  let current: FSWatcher | undefined;
  let closed = false;
  let waited = false;
  const failed = (dir: string) => (err: Error) =>
    onError(new RegistryError('root_unusable', `watching ${dir} failed: ${err.message}`, { cause: err }));

  const attach = (): void => {
    for (;;) {
      if (closed) return;
      let dir = root;
      let next: string | undefined;
      while (!isDir(dir)) {
        const up = dirname(dir);
        if (up === dir) throw new Error(`no directory above ${root} exists`);
        next = basename(dir);
        dir = up;
      }
      current?.close();
      if (next === undefined) {
        current = watch(root, { encoding: 'utf8' }, (_event, file) => {
          if (file) onFile(file);
        });
        current.on('error', failed(root));
        if (waited) for (const f of readdirSync(root)) onFile(f);
        return;
      }
      waited = true;
      const wanted = next;
      current = watch(dir, { encoding: 'utf8' }, (_event, file) => {
        if (file !== wanted || closed || !isDir(join(dir, wanted))) return;
        try {
          attach();
        } catch (err) {
          failed(root)(err as Error);
        }
      });
      current.on('error', failed(dir));
      // It may have appeared between the look and the watch: look again.
      if (!isDir(join(dir, wanted))) return;
    }
  };

  attach();
  return {
    close() {
      closed = true;
      current?.close();
    },
  };
}

function isDir(p: string): boolean {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
}
