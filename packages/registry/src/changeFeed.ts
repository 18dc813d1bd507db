import type { StoreWatcher, ToolStore } from './toolStore.js';
import type { Scope } from './types.js';
import type { ScopeChange, WatchOptions } from './watch.js';

/**
 * Re-reads the reported names and says which changed what the registry serves. `live()` turns
 * false once the feed is closed: nothing may change after that.
 */
export type ApplyChanges = (pending: Map<Scope, Set<string>>, live: () => boolean) => Promise<ScopeChange[]>;

/**
 * Watches every store and hands the names they report to `apply`, one batch at a time (a batch's
 * re-reads finish before the next starts, so an older read never overwrites a newer one), then the
 * changes to `onChange`. Reports of several stores that arrive together (one debounce elapsed for
 * all) make one batch. What `apply` or `onChange` throws goes to `options.onError`. Throws what a
 * store's `watch` throws, after stopping those already started.
 */
export async function watchStores(
  stores: readonly ToolStore[],
  apply: ApplyChanges,
  onChange: (changes: ScopeChange[]) => void,
  options: WatchOptions = {},
): Promise<StoreWatcher> {
  const onError = options.onError ?? (() => {});
  let pending = new Map<Scope, Set<string>>();
  let draining = false;
  let live = true;

  const drain = async () => {
    try {
      while (live && pending.size > 0) {
        const batch = pending;
        pending = new Map();
        let changes: ScopeChange[];
        try {
          changes = await apply(batch, () => live);
        } catch (err) {
          onError(err);
          continue;
        }
        if (!live || changes.length === 0) continue;
        try {
          onChange(changes);
        } catch (err) {
          onError(err);
        }
      }
    } finally {
      draining = false;
    }
  };

  const report = (scope: Scope) => (names: string[]) => {
    if (!live) return;
    let set = pending.get(scope);
    if (!set) pending.set(scope, (set = new Set()));
    for (const n of names) set.add(n);
    if (draining) return;
    draining = true;
    // After the timers of this turn: the other stores' batches of the same moment join this one.
    setImmediate(() => void drain());
  };

  const watchers: StoreWatcher[] = [];
  try {
    for (const store of stores) watchers.push(await store.watch(report(store.scope), options));
  } catch (err) {
    await Promise.all(watchers.map((w) => w.close().catch(() => {})));
    throw err;
  }
  return {
    async close() {
      if (!live) return;
      live = false;
      pending = new Map();
      await Promise.all(watchers.map((w) => w.close()));
    },
  };
}
