import type { ListedTool, ResolvedTool } from './contract.js';
import { wireKey, wireName, wireNameOfValid } from './name.js';
import type { DamagedTool, Scope, StoredTool } from './types.js';
import { markWireConflicts } from './wire.js';

const EMPTY: readonly ListedTool[] = Object.freeze([]);
/** The shared `shadows` of a tool that hides nothing (most of them): one array, not thousands. */
const NO_SCOPES: readonly Scope[] = Object.freeze([]);

/**
 * What the registry holds in memory: every scope's tools and damaged records, and the index that
 * answers lookups in O(1) (the winning scope of each name, the damaged records that hide names,
 * names by their case fold and by their wire name). Lookups read only this; the stores are read by
 * `load`, a write and the watcher, which put what they read here.
 */
export class ToolMemory {
  readonly #scopes: readonly Scope[];
  readonly #tables = new Map<Scope, Map<string, StoredTool>>();
  /** Damaged records by scope and name (see `DamagedTool`): at most one per name and scope, beside no tool. */
  readonly #broken = new Map<Scope, Map<string, DamagedTool>>();
  readonly #index = new Map<string, ResolvedTool>();
  /** Name → the damaged record it resolves to (see `damaged`); `#index` keeps the tools it hides, for the name checks. */
  readonly #hidden = new Map<string, DamagedTool>();
  /** Lower-cased name → the names in `#index` that fold to it (almost always one). */
  readonly #folded = new Map<string, Set<string>>();
  /** Lower-cased wire name → the names in `#index` that have it (almost always one). */
  readonly #wired = new Map<string, Set<string>>();
  /** How many entries of `#wired` hold more than one name (a listing then needs `markWireConflicts`). */
  #twinned = 0;
  #listCache = new Map<Scope | 'all', readonly ListedTool[]>();
  /** Per `scope\0name`: how many writes of this registry have updated memory (see `ownWrites`). */
  readonly #ownWrites = new Map<string, number>();

  /** Empty memory for `scopes` (most specific first). */
  constructor(scopes: readonly Scope[]) {
    this.#scopes = scopes;
    for (const s of scopes) {
      this.#tables.set(s, new Map());
      this.#broken.set(s, new Map());
    }
  }

  /** Replaces what one scope holds; the index follows at `reindexAll`. */
  replaceScope(scope: Scope, tools: Map<string, StoredTool>, damaged: Map<string, DamagedTool>): void {
    this.#tables.set(scope, tools);
    this.#broken.set(scope, damaged);
  }

  /** Rebuilds the whole index from what the scopes hold (after `replaceScope` of each). */
  reindexAll(): void {
    this.#index.clear();
    this.#hidden.clear();
    this.#folded.clear();
    this.#wired.clear();
    this.#twinned = 0;
    const names = new Set<string>();
    for (const t of this.#tables.values()) for (const n of t.keys()) names.add(n);
    for (const d of this.#broken.values()) for (const n of d.keys()) names.add(n);
    for (const n of names) this.#reindex(n);
    this.#listCache = new Map();
  }

  /**
   * Puts (or deletes) a tool and the damaged record of one name (at most one of the two is
   * given); returns true when the effective content changed, or a damaged record came or went.
   */
  set(scope: Scope, name: string, tool: StoredTool | undefined, damage?: DamagedTool): boolean {
    const table = this.#tables.get(scope);
    const damagedHere = this.#broken.get(scope);
    if (!table || !damagedHere) return false;
    const before = table.get(name);
    const wasDamaged = damagedHere.has(name);
    if (tool) table.set(name, tool);
    else table.delete(name);
    if (damage) damagedHere.set(name, damage);
    else damagedHere.delete(name);
    this.#reindex(name);
    this.#listCache = new Map();
    if (wasDamaged !== (damage !== undefined)) return true;
    if (!before || !tool) return before !== tool;
    return before.version !== tool.version || before.digest !== tool.digest || before.created_at !== tool.created_at;
  }

  /** `set` after a write of this registry, counted (see `ownWrites`). */
  setOwn(scope: Scope, name: string, tool: StoredTool | undefined): void {
    const key = `${scope}\0${name}`;
    this.#ownWrites.set(key, (this.#ownWrites.get(key) ?? 0) + 1);
    this.set(scope, name, tool);
  }

  /** How many writes of this registry have updated `name` in `scope`: a re-read that saw it change raced one. */
  ownWrites(scope: Scope, name: string): number | undefined {
    return this.#ownWrites.get(`${scope}\0${name}`);
  }

  /** See `Registry.resolve`. */
  resolve(name: string): ResolvedTool | undefined {
    return this.#hidden.has(name) ? undefined : this.#index.get(name);
  }

  /** See `Registry.damaged`. */
  damaged(name: string): DamagedTool | undefined {
    return this.#hidden.get(name);
  }

  /** See `Registry.listDamaged`. */
  listDamaged(scope?: Scope): readonly DamagedTool[] {
    const out: DamagedTool[] = [];
    for (const s of scope === undefined ? this.#scopes : this.#scopes.filter((x) => x === scope))
      for (const d of this.#broken.get(s)?.values() ?? []) out.push(d);
    // Stable: most specific scope first among records of one name.
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** A tool of any scope whose name folds like `name` but is not `name`. */
  caseVariant(name: string): ResolvedTool | undefined {
    const names = this.#folded.get(name.toLowerCase());
    if (!names) return undefined;
    for (const n of names) if (n !== name) return this.#index.get(n);
    return undefined;
  }

  /** A tool of any scope with `name`'s wire key whose name does not fold like `name`. */
  wireVariant(name: string): ResolvedTool | undefined {
    const names = this.#wired.get(wireKey(name));
    if (!names) return undefined;
    const lower = name.toLowerCase();
    for (const n of names) if (n.toLowerCase() !== lower) return this.#index.get(n);
    return undefined;
  }

  /** See `Registry.byWireName`. */
  byWireName(wire: string): readonly ResolvedTool[] {
    const names = this.#wired.get(wire.toLowerCase());
    if (!names) return EMPTY;
    const out: ResolvedTool[] = [];
    for (const n of names) {
      const r = this.#index.get(n);
      if (r && r.wireName === wire && !this.#hidden.has(n)) out.push(r);
    }
    return out.length === 0 ? EMPTY : out.sort((a, b) => (a.tool.name < b.tool.name ? -1 : 1));
  }

  /** See `Registry.list`. */
  list(scope?: Scope): readonly ListedTool[] {
    const key = scope ?? 'all';
    const cached = this.#listCache.get(key);
    if (cached) return cached;
    let rows: ListedTool[];
    if (scope === undefined) rows = this.#effectiveRows();
    else {
      const table = this.#tables.get(scope);
      if (!table) return EMPTY;
      rows = this.#scopeRows(scope, table);
    }
    rows.sort((a, b) => (a.tool.name < b.tool.name ? -1 : a.tool.name > b.tool.name ? 1 : 0));
    const frozen = Object.freeze(rows);
    this.#listCache.set(key, frozen);
    return frozen;
  }

  /** What `resolve` returns for each name, wire conflicts marked. */
  #effectiveRows(): ListedTool[] {
    const all = [...this.#index.values()];
    const visible = this.#hidden.size === 0 ? all : all.filter((r) => !this.#hidden.has(r.tool.name));
    return this.#twinned > 0 ? markWireConflicts(visible) : visible;
  }

  /** Every active tool of one scope, each hidden one marked with the scope that hides it. */
  #scopeRows(scope: Scope, table: Map<string, StoredTool>): ListedTool[] {
    const rows: ListedTool[] = [];
    const at = this.#scopes.indexOf(scope);
    for (const [name, tool] of table) {
      if (tool.state !== 'active') continue;
      const r = this.#index.get(name);
      const row: ListedTool = {
        tool,
        scope,
        shadows: this.#scopes.slice(at + 1).filter((s) => this.#tables.get(s)?.get(name)?.state === 'active'),
        wireName: r?.wireName ?? wireName(name),
      };
      // Only a more specific damaged record can hide an active tool.
      const damage = this.#hidden.get(name);
      if (damage) row.shadowedBy = damage.scope;
      else if (r && r.scope !== scope) row.shadowedBy = r.scope;
      rows.push(row);
    }
    return rows;
  }

  /** Recomputes the index entry of one name from the tables. */
  #reindex(name: string): void {
    const wire = wireNameOfValid(name);
    let winner: ResolvedTool | undefined;
    for (const s of this.#scopes) {
      const t = this.#tables.get(s)?.get(name);
      // Only active tools are seen: a retired (or not yet approved) version neither resolves nor shadows.
      if (t?.state !== 'active') continue;
      if (!winner) winner = { tool: t, scope: s, shadows: NO_SCOPES, wireName: wire };
      else winner.shadows = [...winner.shadows, s];
    }
    const damage = this.#damagedAbove(name);
    if (damage) this.#hidden.set(name, damage);
    else this.#hidden.delete(name);
    if (winner) this.#add(name, winner, wire);
    else this.#drop(name, wire);
  }

  #add(name: string, winner: ResolvedTool, wire: string): void {
    this.#index.set(name, winner);
    const key = name.toLowerCase();
    let names = this.#folded.get(key);
    if (!names) this.#folded.set(key, (names = new Set()));
    names.add(name);
    const wkey = wire.toLowerCase();
    let same = this.#wired.get(wkey);
    if (!same) this.#wired.set(wkey, (same = new Set()));
    if (same.size === 1 && !same.has(name)) this.#twinned++;
    same.add(name);
  }

  #drop(name: string, wire: string): void {
    this.#index.delete(name);
    const key = name.toLowerCase();
    const names = this.#folded.get(key);
    names?.delete(name);
    if (names?.size === 0) this.#folded.delete(key);
    const wkey = wire.toLowerCase();
    const same = this.#wired.get(wkey);
    if (same?.delete(name) && same.size === 1) this.#twinned--;
    if (same?.size === 0) this.#wired.delete(wkey);
  }

  /** The damaged record of `name` in a scope more specific than any active tool of that name. */
  #damagedAbove(name: string): DamagedTool | undefined {
    for (const s of this.#scopes) {
      if (this.#tables.get(s)?.get(name)?.state === 'active') return undefined;
      const d = this.#broken.get(s)?.get(name);
      if (d) return d;
    }
    return undefined;
  }
}
