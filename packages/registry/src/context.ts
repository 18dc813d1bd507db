import type { NameClaims } from './claims.js';
import type { ToolMemory } from './memory.js';
import type { ScopeStores } from './scopeStores.js';
import type { RegistryEvent } from './types.js';

/**
 * What a registry is made of, built once by `createRegistry`. Each step takes the few parts it
 * uses (a `Pick` of this), so its signature says what it touches.
 */
export interface RegistryContext {
  readonly stores: ScopeStores;
  readonly memory: ToolMemory;
  readonly claims: NameClaims;
  /** Built-in tool names: never forged, never loaded. */
  readonly builtins: ReadonlySet<string>;
  /** Runtime names a spec may use (asked at each validation). */
  readonly runtimes: () => readonly string[];
  /** The clock for `created_at`. */
  readonly now: () => Date;
  /** Receives `registry.load_failed` events. */
  readonly onEvent: (event: RegistryEvent) => void;
  /** Stamped as a promoted tool's `origin.project` (undefined: the source store's `where`). */
  readonly projectDir: string | undefined;
}
