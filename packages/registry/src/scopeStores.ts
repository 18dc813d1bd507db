import type { PathLock } from './contract.js';
import { RegistryError } from './errors.js';
import { fileToolStore } from './fileToolStore.js';
import { configuredScopes, type ScopeRoots } from './scopes.js';
import type { ToolStore } from './toolStore.js';
import { SCOPES, type Scope } from './types.js';

/** The store of each configured scope: a given one, or a file store over the scope's directory. */
export class ScopeStores {
  /** The configured scopes, most specific first. */
  readonly scopes: readonly Scope[];
  readonly #stores = new Map<Scope, ToolStore>();

  /** Throws `invalid_option` for a given store whose `scope` is not the scope it is given for. */
  constructor(roots: ScopeRoots, given: Partial<Record<Scope, ToolStore>>, builtins: ReadonlySet<string>, lock?: PathLock) {
    this.scopes = SCOPES.filter((s) => given[s] !== undefined || configuredScopes(roots).includes(s));
    for (const s of this.scopes) {
      const store = given[s];
      const root = roots[s];
      if (store) {
        if (store.scope !== s) {
          throw new RegistryError('invalid_option', `the store given for the ${s} scope keeps the ${store.scope} scope (${store.where})`);
        }
        this.#stores.set(s, store);
      } else if (root) this.#stores.set(s, fileToolStore(s, root, builtins, lock ? { lock } : {}));
    }
  }

  /** The store of `scope`; throws `invalid_option` for a scope that is not configured. */
  of(scope: Scope): ToolStore {
    const d = this.#stores.get(scope);
    if (!d) {
      throw new RegistryError(
        'invalid_option',
        `scope "${scope}" has no directory in this registry; configured: ${this.scopes.join(', ')}`,
      );
    }
    return d;
  }
}
