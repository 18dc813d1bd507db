import type { RegistryContext } from './context.js';
import type { LoadReport } from './contract.js';
import { damagedOf } from './failures.js';
import { toolNameProblem } from './name.js';
import type { StoreFailure } from './toolStore.js';
import type { DamagedTool, RegistryEvent, Scope, StoredTool } from './types.js';

/** What reading the stores into memory uses. */
export type LoadContext = Pick<RegistryContext, 'stores' | 'memory' | 'builtins' | 'onEvent'>;

/** Sends the `registry.load_failed` event of a record that could not be used. */
export function reportFailure(onEvent: (event: RegistryEvent) => void, scope: Scope, f: StoreFailure): void {
  onEvent({ type: 'registry.load_failed', scope, path: f.path, reason: f.reason });
}

/** Whether a record stored under `name` is kept as damaged when unusable: a tool name, never a built-in. */
function keepsDamage(builtins: ReadonlySet<string>, name: string | undefined): name is string {
  return name !== undefined && toolNameProblem(name) === undefined && !builtins.has(name);
}

/** See `Registry.load`: reads every configured scope, replacing what memory holds. */
export async function loadScopes(ctx: LoadContext): Promise<LoadReport> {
  const report: LoadReport = { loaded: {}, failed: [] };
  for (const s of ctx.stores.scopes) {
    const fresh = new Map<string, StoredTool>();
    const damaged = new Map<string, DamagedTool>();
    await ctx.stores.of(s).loadAll(
      (t) => fresh.set(t.name, t),
      (f) => {
        report.failed.push({ ...f, scope: s });
        reportFailure(ctx.onEvent, s, f);
        if (keepsDamage(ctx.builtins, f.name)) damaged.set(f.name, damagedOf(s, f.name, f));
      },
    );
    ctx.memory.replaceScope(s, fresh, damaged);
    report.loaded[s] = fresh.size;
  }
  ctx.memory.reindexAll();
  return report;
}

/**
 * Re-reads one name of one scope from its store (for the watcher); true when memory changed.
 * A write of this registry that lands while the read is under way is newer than what the read
 * may have seen: read again rather than put the older record back. `live()` false (the watcher
 * was closed meanwhile): change nothing.
 */
export async function refreshName(ctx: LoadContext, scope: Scope, name: string, live: () => boolean = () => true): Promise<boolean> {
  const store = ctx.stores.of(scope);
  for (let attempt = 1; ; attempt++) {
    const before = ctx.memory.ownWrites(scope, name);
    const r = await store.read(name);
    if (!live()) return false;
    if (ctx.memory.ownWrites(scope, name) !== before && attempt < 5) continue;
    if (r.status === 'bad') reportFailure(ctx.onEvent, scope, r.failure);
    // A name outside the grammar is a file dropped in by hand: reported, never a tool.
    if (toolNameProblem(name)) return false;
    const damage = r.status === 'bad' && keepsDamage(ctx.builtins, name) ? damagedOf(scope, name, r.failure) : undefined;
    return ctx.memory.set(scope, name, r.status === 'ok' ? r.tool : undefined, damage);
  }
}
