import { existsSync } from 'node:fs';
import { withDirLock } from '@forge/audit-chain';
import {
  createRegistry,
  type DamagedTool,
  type Registry,
  type ResolvedTool,
  type Scope,
  scopeRoots,
  type ToolStore,
} from '@forge/registry';
import { type ForgeOptions, META_TOOLS } from './api.js';
import type { Ctx } from './caller.js';
import type { ForgePaths } from './paths.js';
import type { ToolLookup } from './ports.js';
import { WireClaims } from './wireNames.js';

/**
 * Session and task registries kept open at once. Each holds memory and, when watched, a watch (a
 * directory watch, or a share of the database's one listening connection): the bound keeps a
 * process that serves sessions it never hears end (a worker) from growing without end.
 */
const MAX_SCOPE_REGISTRIES = 256;

/** What the tool lookup is built from. */
export interface ToolLookupSetup {
  options: ForgeOptions;
  paths: ForgePaths;
  now: () => number;
  /** The runtime names a spec may use (asked at each validation). */
  runtimeNames: () => readonly string[];
  /** Registry events (`registry.load_failed`), for the audit log. */
  onEvent: (e: { type: string }) => void;
  /** Another process changed tools in a watched scope. */
  onChange: (scopes: Scope[], names: string[]) => void;
  /** A session ended: its other state (breakers) is forgotten too. */
  onRelease: (session: string) => void;
}

/**
 * The registries of every scope (user and project at once, session and task ones on first use),
 * loaded and, with `options.watch`, watched; and what a name resolves to through them.
 */
export async function createToolLookup(s: ToolLookupSetup): Promise<ToolLookup> {
  const { options, paths } = s;
  const watchErrors = (err: unknown) => process.emitWarning(`forge: registry watcher: ${(err as Error).message}`);
  const onScopeChange = (changes: { scope: Scope; names: string[] }[]) => {
    const names = [...new Set(changes.flatMap((c) => c.names))];
    if (names.length > 0) s.onChange([...new Set(changes.map((c) => c.scope))], names);
  };
  const registryOf = (roots: Partial<Record<Scope, string>>, stores: Partial<Record<Scope, ToolStore>>) =>
    createRegistry({
      roots,
      stores,
      builtins: META_TOOLS,
      runtimes: s.runtimeNames,
      onEvent: s.onEvent,
      now: () => new Date(s.now()),
      // forge's one cross-process lock: a writer that died is taken over at once (not after 10 s).
      lock: (path, fn) => withDirLock(path, fn, { timeoutMs: 20_000 }),
    });
  const base = registryOf(scopeRoots({ forgeHome: paths.home, project: paths.project }), storesFor(options, ['user', 'project']));
  await base.load();
  if (options.watch) await base.watch(onScopeChange, { onError: watchErrors });
  const scoped = new Map<string, Promise<Registry>>();

  /**
   * A session or task scope registry, created and loaded on first use, most recently used last.
   * Past {@link MAX_SCOPE_REGISTRIES} the least recently used is closed (a worker serves calls of
   * sessions it never hears end), and made again if it is needed again.
   */
  const scopeRegistry = (scope: 'session' | 'task', session: string, task?: string): Promise<Registry> => {
    const ids = `${scope}\0${session}\0${scope === 'task' ? (task ?? '') : ''}`;
    let r = scoped.get(ids);
    if (r) {
      scoped.delete(ids);
      scoped.set(ids, r);
      return r;
    }
    const dir = scopeRoots({ forgeHome: paths.home, project: paths.project, session, ...(task ? { task } : {}) })[scope] as string;
    r = (async () => {
      const stores = storesFor(options, [scope], { session, ...(task ? { task } : {}) });
      const reg = registryOf({ [scope]: dir }, stores);
      await reg.load();
      // Watching would create the directory: a session that forged nothing leaves none behind.
      if (options.watch && (stores[scope] || existsSync(dir))) await reg.watch(onScopeChange, { onError: watchErrors });
      return reg;
    })();
    scoped.set(ids, r);
    // A registry that failed to load is not kept: the next use tries again.
    r.catch(() => {
      if (scoped.get(ids) === r) scoped.delete(ids);
    });
    for (const [k, old] of scoped) {
      if (scoped.size <= MAX_SCOPE_REGISTRIES) break;
      scoped.delete(k);
      void old.then((reg) => reg.close()).catch((err: unknown) => watchErrors(err));
    }
    return r;
  };

  const layers = async (ctx: Ctx): Promise<Registry[]> => {
    const out: Registry[] = [];
    if (ctx.task) out.push(await scopeRegistry('task', ctx.session, ctx.task));
    out.push(await scopeRegistry('session', ctx.session));
    out.push(base);
    return out;
  };
  // A worker asked for a tool its watcher has not reported yet; a caller during a reload waits for it.
  let reloading: Promise<void> | undefined;
  const reloadTools = (ctx: Ctx): Promise<void> => {
    reloading ??= (async () => {
      try {
        for (const r of await layers(ctx)) await r.load();
      } finally {
        reloading = undefined;
      }
    })();
    return reloading;
  };

  return {
    base,
    scoped,
    layers,
    reloadTools,
    resolveIn,
    damagedIn,
    async registryFor(scope, ctx) {
      if (scope === 'session') return scopeRegistry('session', ctx.session);
      if (scope === 'task') {
        if (!ctx.task) throw new Error('no task');
        return scopeRegistry('task', ctx.session, ctx.task);
      }
      return base;
    },
    async releaseSession(session) {
      const gone: Promise<Registry>[] = [];
      for (const [k, r] of scoped) {
        if (k.startsWith(`session\0${session}\0`) || k.startsWith(`task\0${session}\0`)) {
          scoped.delete(k);
          gone.push(r);
        }
      }
      s.onRelease(session);
      for (const r of gone) await r.then((reg) => reg.close()).catch((err: unknown) => watchErrors(err));
    },
    verified: new WeakSet(),
    wireClaims: new WireClaims(),
    sources: options.sources ?? [],
  };
}

/** The stores `ForgeOptions.toolStores` gives for `scopes` (none: their directories). */
function storesFor(options: ForgeOptions, scopes: Scope[], ids: { session?: string; task?: string } = {}) {
  const out: Partial<Record<Scope, ToolStore>> = {};
  for (const s of scopes) {
    const store = options.toolStores?.(s, ids);
    if (store) out[s] = store;
  }
  return out;
}

/**
 * The tool `name` (a forge name) resolves to in `regs`, most specific first, with every scope it
 * hides; undefined when none does, or when a damaged record comes first (see {@link damagedIn}).
 */
function resolveIn(regs: Registry[], name: string): ResolvedTool | undefined {
  let found: ResolvedTool | undefined;
  const shadows: Scope[] = [];
  for (const r of regs) {
    const hit = r.resolve(name);
    // A damaged record hides what is below it (fail closed), in its own registry and in the next.
    if (!found && !hit && r.damaged(name)) return undefined;
    if (!hit) continue;
    if (!found) found = { ...hit, shadows: [] };
    else shadows.push(hit.scope);
    shadows.push(...hit.shadows.filter((s) => s !== found?.scope));
  }
  return found ? { ...found, shadows } : undefined;
}

/**
 * The damaged record `name` (a forge name) resolves to in `regs`: the first layer that holds the
 * name holds a damaged record of it, in a scope no usable tool of that name comes before.
 */
function damagedIn(regs: Registry[], name: string): DamagedTool | undefined {
  for (const r of regs) {
    if (r.resolve(name)) return undefined;
    const d = r.damaged(name);
    if (d) return d;
  }
  return undefined;
}
