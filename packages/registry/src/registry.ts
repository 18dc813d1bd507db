import { basename, dirname } from 'node:path';
import { watchStores } from './changeFeed.js';
import { NameClaims } from './claims.js';
import type { RegistryContext } from './context.js';
import type {
  CreateOptions,
  CreateResult,
  ListedTool,
  LoadReport,
  OwnerCheck,
  PromoteOptions,
  PromoteResult,
  RecoverResult,
  Registry,
  RegistryOptions,
  RemoveResult,
  ResolvedTool,
  SetStateResult,
} from './contract.js';
import { RegistryError } from './errors.js';
import { loadScopes, refreshName } from './loading.js';
import { ToolMemory } from './memory.js';
import { toolNameProblem } from './name.js';
import { promoteTool } from './promote.js';
import { ScopeStores } from './scopeStores.js';
import type { ScopeRoots } from './scopes.js';
import { DEFAULT_RUNTIMES, type SpecOk } from './spec.js';
import type { StoreWatcher, ToolVersion } from './toolStore.js';
import type { CreatedBy, DamagedTool, Failure, Scope, ToolState, ValidationFailure } from './types.js';
import type { ScopeChange, WatchOptions } from './watch.js';
import { createTool, recoverTool, removeTool, setToolState, toolVersions, validateTool } from './writes.js';

/**
 * Creates a registry over `options.stores` and file stores for the other scopes of
 * `options.roots`. Touches no file until `load`, a write or `watch`. Throws `invalid_option` for a
 * store whose `scope` is not the scope it is given for.
 */
export function createRegistry(options: RegistryOptions): Registry {
  const builtins = new Set(options.builtins ?? []);
  const roots = Object.freeze({ ...options.roots });
  const stores = new ScopeStores(roots, options.stores ?? {}, builtins, options.lock);
  const memory = new ToolMemory(stores.scopes);
  const runtimes = options.runtimes ?? DEFAULT_RUNTIMES;
  const context: RegistryContext = {
    stores,
    memory,
    claims: new NameClaims(builtins, memory),
    builtins,
    runtimes: typeof runtimes === 'function' ? runtimes : () => runtimes,
    now: options.now ?? (() => new Date()),
    onEvent: options.onEvent ?? (() => {}),
    projectDir: options.projectDir ?? projectOf(roots),
  };
  return new LayeredRegistry(roots, context);
}

/** The project directory of a project scope at `<project>/.forge/tools`, else that scope's directory. */
function projectOf(roots: ScopeRoots): string | undefined {
  return roots.project && basename(roots.project) === 'tools' && basename(dirname(roots.project)) === '.forge'
    ? dirname(dirname(roots.project))
    : roots.project;
}

/** The `Registry` over one context: lookups read memory, writes and promote go to their modules. */
class LayeredRegistry implements Registry {
  readonly roots: Readonly<ScopeRoots>;
  readonly #ctx: RegistryContext;
  /** Set while `watch` starts (so a second call is refused at once) and while it runs. */
  #watching: object | undefined;
  #watcher: StoreWatcher | undefined;

  constructor(roots: Readonly<ScopeRoots>, ctx: RegistryContext) {
    this.roots = roots;
    this.#ctx = ctx;
  }

  load(): Promise<LoadReport> {
    return loadScopes(this.#ctx);
  }

  validate(spec: unknown): SpecOk | ValidationFailure | Failure<'name_forbidden'> {
    return validateTool(this.#ctx, spec);
  }

  create(spec: unknown, options: CreateOptions): Promise<CreateResult> {
    return createTool(this.#ctx, spec, options);
  }

  remove(name: string, options: { scope: Scope; authorize?: OwnerCheck }): Promise<RemoveResult> {
    return removeTool(this.#ctx, name, options);
  }

  resolve(name: string): ResolvedTool | undefined {
    return this.#ctx.memory.resolve(name);
  }

  damaged(name: string): DamagedTool | undefined {
    return this.#ctx.memory.damaged(name);
  }

  listDamaged(options: { scope?: Scope } = {}): readonly DamagedTool[] {
    return this.#ctx.memory.listDamaged(options.scope);
  }

  caseVariantOf(name: string): ResolvedTool | undefined {
    return this.#ctx.memory.caseVariant(name);
  }

  wireVariantOf(name: string): ResolvedTool | undefined {
    return toolNameProblem(name) === undefined ? this.#ctx.memory.wireVariant(name) : undefined;
  }

  byWireName(wire: string): readonly ResolvedTool[] {
    return this.#ctx.memory.byWireName(wire);
  }

  list(options: { scope?: Scope } = {}): readonly ListedTool[] {
    return this.#ctx.memory.list(options.scope);
  }

  isBuiltin(name: string): boolean {
    return this.#ctx.builtins.has(name);
  }

  promote(name: string, options?: PromoteOptions): Promise<PromoteResult> {
    return promoteTool(this.#ctx, name, options);
  }

  versions(name: string, options: { scope: Scope }): Promise<ToolVersion[]> {
    return toolVersions(this.#ctx, name, options);
  }

  setState(
    name: string,
    state: ToolState,
    options: { scope: Scope; from?: readonly ToolState[]; digest?: string; authorize?: OwnerCheck },
  ): Promise<SetStateResult> {
    return setToolState(this.#ctx, name, state, options);
  }

  recover(name: string, version: number, options: { scope: Scope; createdBy?: CreatedBy }): Promise<RecoverResult> {
    return recoverTool(this.#ctx, name, version, options);
  }

  async watch(onChange: (changes: ScopeChange[]) => void, watchOptions?: WatchOptions): Promise<void> {
    if (this.#watching) throw new RegistryError('invalid_option', 'this registry is already watching; call close() first');
    const claim = {};
    this.#watching = claim;
    const { stores } = this.#ctx;
    try {
      const w = await watchStores(
        stores.scopes.map((s) => stores.of(s)),
        async (pending, live) => {
          const changes: ScopeChange[] = [];
          for (const [scope, names] of pending) {
            const changed: string[] = [];
            for (const n of names) if (await refreshName(this.#ctx, scope, n, live)) changed.push(n);
            if (changed.length > 0) changes.push({ scope, names: changed.sort() });
          }
          return changes;
        },
        onChange,
        watchOptions,
      );
      if (this.#watching === claim) this.#watcher = w;
      else await w.close();
    } catch (err) {
      if (this.#watching === claim) this.#watching = undefined;
      throw err;
    }
  }

  async close(): Promise<void> {
    const w = this.#watcher;
    this.#watcher = undefined;
    this.#watching = undefined;
    await w?.close();
  }
}
