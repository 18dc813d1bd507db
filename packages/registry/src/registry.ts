import { basename, dirname } from 'node:path';
import { watchStores } from './changeFeed.js';
import { RegistryError } from './errors.js';
import { fileToolStore } from './fileToolStore.js';
import { validationFailure } from './json-schema.js';
import { toolNameProblem, wireKey, wireName, wireNameOfValid } from './name.js';
import { configuredScopes, type ScopeRoots } from './scopes.js';
import { DEFAULT_RUNTIMES, type SpecOk, validateSpec } from './spec.js';
import type { Collisions, Decision, ReadResult, StoreFailure, StoreWatcher, ToolStore, ToolVersion } from './toolStore.js';
import {
  type CreatedBy,
  type DamagedTool,
  type Failure,
  type RegistryEvent,
  SCOPES,
  type Scope,
  type StoredTool,
  TOOL_STATES,
  type ToolState,
  type ValidationFailure,
} from './types.js';
import type { ScopeChange, WatchOptions } from './watch.js';
import { markWireConflicts, wireTaken } from './wire.js';

/** Options of `createRegistry`. */
export interface RegistryOptions {
  /**
   * The scope directories (see `scopeRoots`): a file store (`fileToolStore`) for each scope that
   * `stores` does not give. Only configured scopes (here or in `stores`) are read and written.
   */
  roots?: ScopeRoots;
  /**
   * The store of a scope, instead of its directory in `roots` (a database, say; see `ToolStore`).
   * Open each with the same built-in names as `builtins`. They stay the caller's: `close()` stops
   * watching them but does not close them.
   */
  stores?: Partial<Record<Scope, ToolStore>>;
  /**
   * The project directory stamped as a promoted tool's `origin.project`. Default: derived from
   * `roots.project` (`<project>/.forge/tools` → `<project>`).
   */
  projectDir?: string;
  /** Built-in tool names (`forge_tool`, `forge_call`, …): never forged, never loaded from disk. */
  builtins?: Iterable<string>;
  /** Runtime names a spec may use (default `python3`, `node`, `bash`, `sh`). */
  runtimes?: readonly string[];
  /** Receives `registry.load_failed` events (plain data for an audit log). */
  onEvent?: (event: RegistryEvent) => void;
  /** The clock for `created_at` (default `() => new Date()`). */
  now?: () => Date;
}

/** What `load()` found. */
export interface LoadReport {
  /** Tools loaded per configured scope. */
  loaded: Partial<Record<Scope, number>>;
  /** Files (records) skipped (each also sent as a `registry.load_failed` event). */
  failed: Array<StoreFailure & { scope: Scope }>;
}

/** A tool as lookup sees it: the winning scope and the scopes it hides. */
export interface ResolvedTool {
  tool: StoredTool;
  scope: Scope;
  /** Less specific scopes that hold the same name, most specific first. Frozen when empty. */
  shadows: readonly Scope[];
  /** The name MCP clients see: `wireName(tool.name)`, matching `^[a-zA-Z0-9_-]{1,64}$`. */
  wireName: string;
}

/** One row of `list()`. */
export interface ListedTool extends ResolvedTool {
  /** In a per-scope listing: the more specific scope that hides this tool, if any. */
  shadowedBy?: Scope;
  /**
   * In an effective listing: other listed tools with the same `wireName` (possible only for
   * tools written before wire names were checked, or by processes racing in different scopes).
   * A row that carries it is not served under its wire name (see `markWireConflicts`); callers
   * reach it by its forge name.
   */
  wireConflict?: readonly string[];
}

/**
 * Decides, under the name's lock, whether the caller may replace or remove `existing`: the live
 * tool, or `undefined` for a file that cannot be read (so nobody can say who wrote it). A returned
 * failure becomes the result and nothing is written. The registry knows no personas: the caller
 * brings the rule (forge's runner: the tool's creator, its namespace, or an operator).
 */
export type OwnerCheck = (existing: StoredTool | undefined) => Failure<string> | undefined;

/** Options of `Registry.create`. */
export interface CreateOptions {
  scope: Scope;
  createdBy: CreatedBy;
  /** Replace an existing tool of that name in that scope (its version is kept, see `versions`). */
  overwrite?: boolean;
  /** Asked before `overwrite` replaces a tool (see {@link OwnerCheck}). */
  authorize?: OwnerCheck;
}

/** A written tool and, for a replace, what it replaced. */
export interface WriteOk {
  ok: true;
  tool: StoredTool;
  previous?: { version: number; digest: string };
}

/** What `Registry.create` returns (a refusal of `authorize` as it gave it). */
export type CreateResult = WriteOk | ValidationFailure | Failure<'name_taken' | 'name_forbidden'> | Failure<string>;
/**
 * What `Registry.remove` returns: the removed version (still recoverable), the damaged record that
 * was removed (kept in the history all the same), or a refusal of `authorize`.
 */
export type RemoveResult =
  | { ok: true; removed: StoredTool; damaged?: undefined }
  | { ok: true; damaged: DamagedTool; removed?: undefined }
  | Failure<'unknown_tool'>
  | Failure<string>;
/** What `Registry.setState` returns (a refusal of `authorize` as it gave it). */
export type SetStateResult = WriteOk | Failure<'unknown_tool' | 'tool_damaged' | 'state_conflict' | 'validation_failed'> | Failure<string>;
/** What `Registry.recover` returns. */
export type RecoverResult = WriteOk | Failure<'unknown_tool' | 'name_forbidden' | 'name_taken'>;

/** What a promote did. */
export type PromoteOutcome =
  /** No user tool of that name existed. */
  | 'created'
  /** The user tool came from this project: it was updated (the old version is kept). */
  | 'updated'
  /** The user tool has the same digest: nothing was written. */
  | 'unchanged'
  /** `force` replaced a user tool from elsewhere (the old version is kept). */
  | 'replaced';

/** What `Registry.promote` returns (a refusal of `authorize` as it gave it). */
export type PromoteResult =
  | (WriteOk & { outcome: PromoteOutcome })
  | Failure<'unknown_tool' | 'tool_damaged' | 'promote_conflict'>
  | Failure<string>;

/** Options of `Registry.promote`. */
export interface PromoteOptions {
  /** Replace a user tool of the same name with a different digest from elsewhere. */
  force?: boolean;
  /** The scope to promote from (default `project`). */
  from?: Exclude<Scope, 'user'>;
  /** Stamped as `created_by` of the user version (default: the source tool's). */
  createdBy?: CreatedBy;
  /**
   * Asked for the source tool before anything is written, and for the user tool a promote would
   * replace (`updated` or `replaced`; see {@link OwnerCheck}).
   */
  authorize?: OwnerCheck;
}

/**
 * A layered tool registry over one store per scope (a directory, or any `ToolStore`). Lookups are
 * in memory (call `load()` first); writes go to the store atomically under a per-name
 * cross-process lock and update memory.
 * Expected outcomes are results (`{ ok: false, kind, message }`); a `RegistryError` is thrown
 * only for an unusable directory, a lock held too long, or a scope that is not configured.
 */
export interface Registry {
  /** The scope directories as configured (`{}` for a registry over `stores` only). */
  readonly roots: Readonly<ScopeRoots>;
  /**
   * Reads every configured scope from disk, replacing what is in memory. A file that is not
   * valid JSON, not a valid stored spec, named unlike its spec, a built-in name, or not a
   * regular file is skipped with a `registry.load_failed` event; the others load. One stored
   * under a tool name (not a built-in) is kept as damaged (see `damaged`). Compiles no schema
   * and computes no digest.
   */
  load(): Promise<LoadReport>;
  /** `validateSpec` with this registry's runtimes, plus `name_forbidden` for a built-in name. */
  validate(spec: unknown): SpecOk | ValidationFailure | Failure<'name_forbidden'>;
  /**
   * Validates and writes a tool into `scope`, stamped with `version` (1, or one more than any
   * version of that name ever kept in the scope), `digest`, `created_at`, `created_by`,
   * `scope` and `state: "active"`. Stamps in `spec` are ignored. Without `overwrite`, an
   * existing name is `name_taken` (a create can never clobber, even across processes); with it,
   * the previous version stays recoverable. A name that differs only by case from a tool in
   * any scope of this registry (`CODE.tool` beside `code.tool`) is `name_taken` too, naming
   * that tool; only the same name with `overwrite` replaces. So is a name whose wire name
   * (see `wireName`), compared regardless of case, is that of another tool in any scope, of a
   * file in the target directory, of a tool being written by this registry right now, or of a
   * built-in (`a__b` beside `a.b`); the message names both tools and the wire name.
   */
  create(spec: unknown, options: CreateOptions): Promise<CreateResult>;
  /**
   * Removes `name` from `scope`; the removed version stays recoverable (`versions`, `recover`).
   * `authorize` is asked first, under the name's lock (with `undefined` for a damaged record: it
   * no longer says who wrote it). A damaged record is removed too, and kept in the history.
   */
  remove(name: string, options: { scope: Scope; authorize?: OwnerCheck }): Promise<RemoveResult>;
  /**
   * The tool `name` resolves to, most specific scope first, or undefined (also for a built-in
   * name: the caller serves those, and for a name a damaged record hides: see `damaged`). O(1).
   */
  resolve(name: string): ResolvedTool | undefined;
  /**
   * The damaged record `name` resolves to: one in a scope more specific than every usable active
   * tool of that name, or undefined. It hides those tools (fail closed: a file that cannot be read
   * might have been a newer version, or a retired one): `resolve` and `list` leave them out, and
   * the caller refuses the name with `tool_damaged` until the record is removed or replaced. O(1).
   */
  damaged(name: string): DamagedTool | undefined;
  /** Every damaged record (of `scope`, or of every scope), by name, most specific scope first. */
  listDamaged(options?: { scope?: Scope }): readonly DamagedTool[];
  /**
   * A tool whose name differs from `name` only by case (`code.tool` for `CODE.tool`), most
   * specific scope first, or undefined; never `name` itself. O(1).
   */
  caseVariantOf(name: string): ResolvedTool | undefined;
  /**
   * A tool whose wire name equals `name`'s regardless of case but whose name is neither `name`
   * nor a case variant of it (`a__b` for `a.b`), most specific scope first, or undefined. O(1).
   */
  wireVariantOf(name: string): ResolvedTool | undefined;
  /**
   * The effective tools whose wire name is exactly `wire`, sorted by name: almost always none or
   * one (see `ListedTool.wireConflict` for how two can exist). Not for a built-in. O(1).
   */
  byWireName(wire: string): readonly ResolvedTool[];
  /**
   * Tools sorted by name: the effective ones (what `resolve` returns for each name), or with
   * `scope` every tool of that scope, hidden ones marked `shadowedBy` (a damaged record's scope
   * too). Damaged records are not tools: see `listDamaged`. The array is shared and frozen until
   * the next change.
   */
  list(options?: { scope?: Scope }): readonly ListedTool[];
  /** True for a built-in name. */
  isBuiltin(name: string): boolean;
  /**
   * Copies a project tool (or `from` another scope) to the user scope, stamped with
   * `origin: {project, digest}`. Same digest as the user tool: `unchanged`, nothing written. A
   * user tool promoted earlier from this same project: `updated`. A different tool from
   * elsewhere: `promote_conflict` unless `force` (the old one stays recoverable). A user tool
   * whose name differs only by case is `promote_conflict`, `force` or not, and so is a new user
   * tool whose wire name is that of another tool (see `create`).
   */
  promote(name: string, options?: PromoteOptions): Promise<PromoteResult>;
  /** Every kept version of `name` in `scope` (replaced and removed ones, then the live one). */
  versions(name: string, options: { scope: Scope }): Promise<ToolVersion[]>;
  /**
   * Stamps `state` on the live version of `name` in `scope` (the toolsmith retires a tool this
   * way): a new version with the same content and digest, the old one kept in the history. Only
   * `active` tools resolve and list. `from` and `digest` make it a compare-and-set: the write
   * happens only when the live version is in one of those states and has that digest
   * (`state_conflict` otherwise).
   */
  setState(
    name: string,
    state: ToolState,
    options: { scope: Scope; from?: readonly ToolState[]; digest?: string; authorize?: OwnerCheck },
  ): Promise<SetStateResult>;
  /**
   * Makes a kept version of `name` live again in `scope`, as a new version (the current one, if
   * any, is kept in turn). `unknown_tool` when that version was never kept; `name_taken` when
   * the name is not live there and another tool has taken its wire name since (see `create`).
   */
  recover(name: string, version: number, options: { scope: Scope; createdBy?: CreatedBy }): Promise<RecoverResult>;
  /**
   * Watches every scope's store (`ToolStore.watch`; a file store creates no missing directory but
   * waits for it) and refreshes memory when another process writes a tool; `onChange` gets the
   * names whose effective content changed, per scope, debounced. Writes made through this registry update memory at once and are not
   * reported again. Resolves when the watcher is ready. One watcher per registry. What
   * `onChange` throws goes to `options.onError`.
   */
  watch(onChange: (changes: ScopeChange[]) => void, options?: WatchOptions): Promise<void>;
  /** Stops watching; pending changes are dropped. Idempotent. Lookups keep working. */
  close(): Promise<void>;
}

const EMPTY: readonly ListedTool[] = Object.freeze([]);
/** The shared `shadows` of a tool that hides nothing (most of them): one array, not thousands. */
const NO_SCOPES: readonly Scope[] = Object.freeze([]);

/**
 * Creates a registry over `options.stores` and file stores for the other scopes of
 * `options.roots`. Touches no file until `load`, a write or `watch`. Throws `invalid_option` for a
 * store whose `scope` is not the scope it is given for.
 */
export function createRegistry(options: RegistryOptions): Registry {
  const builtins = new Set(options.builtins ?? []);
  const runtimes = options.runtimes ?? DEFAULT_RUNTIMES;
  const now = options.now ?? (() => new Date());
  const onEvent = options.onEvent ?? (() => {});
  const roots = Object.freeze({ ...options.roots });
  const given = options.stores ?? {};
  const scopes = SCOPES.filter((s) => given[s] !== undefined || configuredScopes(roots).includes(s));
  const projectDir =
    options.projectDir ??
    (roots.project && basename(roots.project) === 'tools' && basename(dirname(roots.project)) === '.forge'
      ? dirname(dirname(roots.project))
      : roots.project);

  const stores = new Map<Scope, ToolStore>();
  const tables = new Map<Scope, Map<string, StoredTool>>();
  /** Damaged records by scope and name (see `DamagedTool`): at most one per name and scope, beside no tool. */
  const broken = new Map<Scope, Map<string, DamagedTool>>();
  for (const s of scopes) {
    const store = given[s];
    const root = roots[s];
    if (store) {
      if (store.scope !== s) {
        throw new RegistryError('invalid_option', `the store given for the ${s} scope keeps the ${store.scope} scope (${store.where})`);
      }
      stores.set(s, store);
    } else if (root) stores.set(s, fileToolStore(s, root, builtins));
    tables.set(s, new Map());
    broken.set(s, new Map());
  }
  const index = new Map<string, ResolvedTool>();
  /** Name → the damaged record it resolves to (see `damaged`); `index` keeps the tools it hides, for the name checks. */
  const hidden = new Map<string, DamagedTool>();
  /** Lower-cased name → the names in `index` that fold to it (almost always one). */
  const folded = new Map<string, Set<string>>();
  /** Lower-cased wire name → the names in `index` that have it (almost always one). */
  const wired = new Map<string, Set<string>>();
  /** How many entries of `wired` hold more than one name (a listing then needs `markWireConflicts`). */
  let twinned = 0;
  /** Built-ins by their lower-cased wire name (each is its own wire name). */
  const builtinWires = new Map<string, string>();
  for (const b of builtins) if (toolNameProblem(b) === undefined) builtinWires.set(wireKey(b), b);
  /**
   * Writes decided but not yet in memory, by wire key: the locks are per scope directory, so two
   * scopes' writes of `a.b` and `a__b` would not see each other without this.
   */
  const inFlight = new Map<string, { name: string; scope: Scope }[]>();
  let listCache = new Map<Scope | 'all', readonly ListedTool[]>();
  /** Set while `watch` starts (so a second call is refused at once) and while it runs. */
  let watching: object | undefined;
  let watcher: StoreWatcher | undefined;
  /** Per `scope\0name`: how many writes of this registry have updated memory (see `refresh`). */
  const ownWrites = new Map<string, number>();

  function dirOf(scope: Scope): ToolStore {
    const d = stores.get(scope);
    if (!d) {
      throw new RegistryError('invalid_option', `scope "${scope}" has no directory in this registry; configured: ${scopes.join(', ')}`);
    }
    return d;
  }

  /** Recomputes the index entry of one name from the tables. */
  function reindex(name: string): void {
    const wire = wireNameOfValid(name);
    let winner: ResolvedTool | undefined;
    for (const s of scopes) {
      const t = tables.get(s)?.get(name);
      // Only active tools are seen: a retired (or not yet approved) version neither resolves nor shadows.
      if (t?.state !== 'active') continue;
      if (!winner) winner = { tool: t, scope: s, shadows: NO_SCOPES, wireName: wire };
      else winner.shadows = [...winner.shadows, s];
    }
    const damage = damagedAbove(name);
    if (damage) hidden.set(name, damage);
    else hidden.delete(name);
    const key = name.toLowerCase();
    const wkey = wire.toLowerCase();
    if (winner) {
      index.set(name, winner);
      let names = folded.get(key);
      if (!names) folded.set(key, (names = new Set()));
      names.add(name);
      let same = wired.get(wkey);
      if (!same) wired.set(wkey, (same = new Set()));
      if (same.size === 1 && !same.has(name)) twinned++;
      same.add(name);
    } else {
      index.delete(name);
      const names = folded.get(key);
      names?.delete(name);
      if (names?.size === 0) folded.delete(key);
      const same = wired.get(wkey);
      if (same?.delete(name) && same.size === 1) twinned--;
      if (same?.size === 0) wired.delete(wkey);
    }
  }

  /** The damaged record of `name` in a scope more specific than any active tool of that name. */
  function damagedAbove(name: string): DamagedTool | undefined {
    for (const s of scopes) {
      if (tables.get(s)?.get(name)?.state === 'active') return undefined;
      const d = broken.get(s)?.get(name);
      if (d) return d;
    }
    return undefined;
  }

  /** Whether a record stored under `name` is kept as damaged when unusable: a tool name, never a built-in. */
  function keepsDamage(name: string | undefined): name is string {
    return name !== undefined && toolNameProblem(name) === undefined && !builtins.has(name);
  }

  /** A tool of any scope whose name folds like `name` but is not `name`. */
  function caseVariant(name: string): ResolvedTool | undefined {
    const names = folded.get(name.toLowerCase());
    if (!names) return undefined;
    for (const n of names) if (n !== name) return index.get(n);
    return undefined;
  }

  /** A tool of any scope with `name`'s wire key whose name does not fold like `name`. */
  function wireVariant(name: string): ResolvedTool | undefined {
    const names = wired.get(wireKey(name));
    if (!names) return undefined;
    const lower = name.toLowerCase();
    for (const n of names) if (n.toLowerCase() !== lower) return index.get(n);
    return undefined;
  }

  /**
   * Why writing `name` into `dir` would give two tools one wire name, or undefined. Asked under
   * the name's lock (which colliding names share within a scope): a built-in, a record in the
   * store now (`collisions`, read under the lock), a tool in memory, a write of this registry in flight.
   */
  async function wireClash(
    name: string,
    dir: ToolStore,
    collisions: () => Promise<Collisions>,
    kind: 'name_taken' | 'promote_conflict',
  ): Promise<Failure<string> | undefined> {
    const key = wireKey(name);
    const builtin = builtinWires.get(key);
    if (builtin !== undefined && builtin !== name) return wireTaken(kind, name, builtin, 'built-in');
    const onDisk = (await collisions()).wires[0];
    if (onDisk !== undefined) return wireTaken(kind, name, onDisk, `${dir.scope} scope`);
    const seen = wireVariant(name);
    if (seen) return wireTaken(kind, name, seen.tool.name, `${seen.scope} scope`);
    // A case variant in flight too: its own check reads memory, which does not have it yet.
    const racing = inFlight.get(key)?.find((w) => w.name !== name);
    if (racing) return wireTaken(kind, name, racing.name, `${racing.scope} scope, being written now`);
    return undefined;
  }

  /** Runs a locked write of `name` into `scope`, visible to `wireClash` until memory has it. */
  async function claimed<R>(name: string, scope: Scope, write: (claim: () => void) => Promise<R>): Promise<R> {
    const key = wireKey(name);
    const entry = { name, scope };
    let held = false;
    try {
      return await write(() => {
        if (held) return; // a put that decides again (a foreign file appeared) claims once
        held = true;
        const list = inFlight.get(key);
        if (list) list.push(entry);
        else inFlight.set(key, [entry]);
      });
    } finally {
      if (held) {
        const list = inFlight.get(key) ?? [];
        list.splice(list.indexOf(entry), 1);
        if (list.length === 0) inFlight.delete(key);
      }
    }
  }

  function caseTaken(name: string, other: string, where: Scope): Failure<'name_taken'> {
    return {
      ok: false,
      kind: 'name_taken',
      message: `tool "${name}" differs only by case from the existing tool "${other}" (${where} scope), and names are compared regardless of case; choose another name, or forge "${other}" with overwrite to replace that tool`,
    };
  }

  /**
   * Puts (or deletes) a tool and the damaged record of one name in memory (at most one of the two
   * is given); returns true when the effective content changed, or a damaged record came or went.
   */
  function setTool(scope: Scope, name: string, tool: StoredTool | undefined, damage?: DamagedTool): boolean {
    const table = tables.get(scope);
    const damagedHere = broken.get(scope);
    if (!table || !damagedHere) return false;
    const before = table.get(name);
    const wasDamaged = damagedHere.has(name);
    if (tool) table.set(name, tool);
    else table.delete(name);
    if (damage) damagedHere.set(name, damage);
    else damagedHere.delete(name);
    reindex(name);
    listCache = new Map();
    if (wasDamaged !== (damage !== undefined)) return true;
    if (!before || !tool) return before !== tool;
    return before.version !== tool.version || before.digest !== tool.digest || before.created_at !== tool.created_at;
  }

  function emitFailure(scope: Scope, f: StoreFailure): void {
    onEvent({ type: 'registry.load_failed', scope, path: f.path, reason: f.reason });
  }

  /** Memory of `name` in `scope` after a write of this registry. */
  function setOwn(scope: Scope, name: string, tool: StoredTool | undefined): void {
    const key = `${scope}\0${name}`;
    ownWrites.set(key, (ownWrites.get(key) ?? 0) + 1);
    setTool(scope, name, tool);
  }

  /**
   * Re-reads one name of one scope from its store (for the watcher); true when memory changed.
   * A write of this registry that lands while the read is under way is newer than what the read
   * may have seen: read again rather than put the older record back. `live()` false (the watcher
   * was closed meanwhile): change nothing.
   */
  async function refresh(scope: Scope, name: string, live: () => boolean = () => true): Promise<boolean> {
    const dir = dirOf(scope);
    const key = `${scope}\0${name}`;
    for (let attempt = 1; ; attempt++) {
      const before = ownWrites.get(key);
      const r = await dir.read(name);
      if (!live()) return false;
      if (ownWrites.get(key) !== before && attempt < 5) continue;
      if (r.status === 'bad') emitFailure(scope, r.failure);
      // A name outside the grammar is a file dropped in by hand: reported, never a tool.
      if (toolNameProblem(name)) return false;
      const damage = r.status === 'bad' && keepsDamage(name) ? damagedOf(scope, name, r.failure) : undefined;
      return setTool(scope, name, r.status === 'ok' ? r.tool : undefined, damage);
    }
  }

  function stamp(spec: object, digest: string, version: number, scope: Scope, createdBy: CreatedBy): StoredTool {
    return {
      ...(spec as StoredTool),
      version,
      digest,
      created_at: now().toISOString(),
      created_by: { persona: createdBy.persona, session: createdBy.session },
      scope,
      state: 'active',
    };
  }

  function forbidden(name: string): Failure<'name_forbidden'> {
    return { ok: false, kind: 'name_forbidden', message: `"${name}" is a built-in tool name and cannot be forged; choose another name` };
  }

  function damagedOf(scope: Scope, name: string, f: StoreFailure): DamagedTool {
    return { name, scope, path: f.path, reason: f.reason };
  }

  function damagedFailure(d: DamagedTool): Failure<'tool_damaged'> {
    return {
      ok: false,
      kind: 'tool_damaged',
      message: `tool "${d.name}" in the ${d.scope} scope is damaged and cannot be used: ${d.path}: ${d.reason}; remove it and forge it again, or restore the record from a copy`,
    };
  }

  function unknownTool(name: string, where: string): Failure<'unknown_tool'> {
    return { ok: false, kind: 'unknown_tool', message: `no tool "${name}" in ${where}; list the tools to see what exists` };
  }

  /** Names reach file paths: anything outside the grammar (`../x`, `a/b`) names no tool. */
  function badName(name: string): Failure<'unknown_tool'> | undefined {
    const problem = toolNameProblem(name);
    if (!problem) return undefined;
    return { ok: false, kind: 'unknown_tool', message: `${JSON.stringify(name)} is not a tool name: it ${problem}` };
  }

  const registry: Registry = {
    roots,

    async load() {
      const report: LoadReport = { loaded: {}, failed: [] };
      for (const s of scopes) {
        const fresh = new Map<string, StoredTool>();
        const damaged = new Map<string, DamagedTool>();
        await dirOf(s).loadAll(
          (t) => fresh.set(t.name, t),
          (f) => {
            report.failed.push({ ...f, scope: s });
            emitFailure(s, f);
            if (keepsDamage(f.name)) damaged.set(f.name, damagedOf(s, f.name, f));
          },
        );
        tables.set(s, fresh);
        broken.set(s, damaged);
        report.loaded[s] = fresh.size;
      }
      index.clear();
      hidden.clear();
      folded.clear();
      wired.clear();
      twinned = 0;
      const names = new Set<string>();
      for (const t of tables.values()) for (const n of t.keys()) names.add(n);
      for (const d of broken.values()) for (const n of d.keys()) names.add(n);
      for (const n of names) reindex(n);
      listCache = new Map();
      return report;
    },

    validate(spec) {
      const r = validateSpec(spec, { runtimes });
      if (r.ok && builtins.has(r.spec.name)) return forbidden(r.spec.name);
      return r;
    },

    async create(spec, opts) {
      const dir = dirOf(opts.scope);
      // Work on a JSON copy: what is validated, digested, kept in memory and written is the same
      // data, and a caller that later mutates its object changes nothing here.
      let copy: unknown;
      try {
        copy = JSON.parse(JSON.stringify(spec));
      } catch (err) {
        return validationFailure([{ path: '', message: `must be plain JSON data (${(err as Error).message})` }]);
      }
      const v = registry.validate(copy);
      if (!v.ok) return v;
      const name = v.spec.name;
      const result = await claimed(name, opts.scope, (claim) =>
        dir
          .put<CreateResult>(name, async (current, next, collisions): Promise<Decision<CreateResult>> => {
            // Only the very name, replaced on purpose, may stand beside a case variant or a wire
            // twin (one that existed before names were compared this way).
            if (current.status === 'missing' || !opts.overwrite) {
              const onDisk = (await collisions()).cases[0];
              if (onDisk !== undefined) return { value: caseTaken(name, onDisk, opts.scope) };
              const seen = caseVariant(name);
              if (seen) return { value: caseTaken(name, seen.tool.name, seen.scope) };
              const clash = await wireClash(name, dir, collisions, 'name_taken');
              if (clash) return { value: clash };
            }
            if (current.status !== 'missing' && !opts.overwrite) {
              const what = current.status === 'ok' ? `version ${current.tool.version}` : `a damaged record: ${current.failure.reason}`;
              return {
                value: {
                  ok: false,
                  kind: 'name_taken',
                  message: `tool "${name}" already exists in the ${opts.scope} scope (${what}); choose another name or pass overwrite to replace it`,
                },
              };
            }
            if (current.status !== 'missing' && opts.authorize) {
              const refused = opts.authorize(current.status === 'ok' ? current.tool : undefined);
              if (refused) return { value: refused };
            }
            const tool = stamp(v.spec, v.digest, next, opts.scope, opts.createdBy);
            const previous = current.status === 'ok' ? { version: current.tool.version, digest: current.tool.digest } : undefined;
            claim();
            return { write: tool, value: previous ? { ok: true, tool, previous } : { ok: true, tool } };
          })
          .then((r) => {
            if (r.ok) setOwn(opts.scope, name, r.tool);
            return r;
          }),
      );
      return result;
    },

    async remove(name, opts) {
      const dir = dirOf(opts.scope);
      const invalid = badName(name);
      if (invalid) return invalid;
      const r = await dir.remove(
        name,
        opts.authorize && ((current) => opts.authorize?.(current.status === 'ok' ? current.tool : undefined)),
      );
      if (r.status === 'refused') {
        // Nothing was removed: memory keeps what the file holds.
        await refresh(opts.scope, name);
        return r.failure;
      }
      setOwn(opts.scope, name, undefined);
      if (r.status === 'missing') return unknownTool(name, `the ${opts.scope} scope`);
      // The damaged record was removed (and kept in the history like any).
      if (r.status === 'bad') return { ok: true, damaged: damagedOf(opts.scope, name, r.failure) };
      return { ok: true, removed: r.tool };
    },

    resolve(name) {
      return hidden.has(name) ? undefined : index.get(name);
    },

    damaged(name) {
      return hidden.get(name);
    },

    listDamaged(opts = {}) {
      const out: DamagedTool[] = [];
      for (const s of opts.scope === undefined ? scopes : scopes.filter((x) => x === opts.scope))
        for (const d of broken.get(s)?.values() ?? []) out.push(d);
      // Stable: most specific scope first among records of one name.
      return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    },

    caseVariantOf(name) {
      return caseVariant(name);
    },

    wireVariantOf(name) {
      return toolNameProblem(name) === undefined ? wireVariant(name) : undefined;
    },

    byWireName(wire) {
      const names = wired.get(wire.toLowerCase());
      if (!names) return EMPTY;
      const out: ResolvedTool[] = [];
      for (const n of names) {
        const r = index.get(n);
        if (r && r.wireName === wire && !hidden.has(n)) out.push(r);
      }
      return out.length === 0 ? EMPTY : out.sort((a, b) => (a.tool.name < b.tool.name ? -1 : 1));
    },

    list(opts = {}) {
      const key = opts.scope ?? 'all';
      const cached = listCache.get(key);
      if (cached) return cached;
      let rows: ListedTool[];
      if (opts.scope === undefined) {
        const visible = hidden.size === 0 ? [...index.values()] : [...index.values()].filter((r) => !hidden.has(r.tool.name));
        rows = twinned > 0 ? markWireConflicts(visible) : visible;
      } else {
        const scope = opts.scope;
        const table = tables.get(scope);
        if (!table) return EMPTY;
        rows = [];
        for (const [name, tool] of table) {
          if (tool.state !== 'active') continue;
          const r = index.get(name);
          const at = scopes.indexOf(scope);
          const row: ListedTool = {
            tool,
            scope,
            shadows: scopes.slice(at + 1).filter((s) => tables.get(s)?.get(name)?.state === 'active'),
            wireName: r?.wireName ?? wireName(name),
          };
          // Only a more specific damaged record can hide an active tool.
          const damage = hidden.get(name);
          if (damage) row.shadowedBy = damage.scope;
          else if (r && r.scope !== scope) row.shadowedBy = r.scope;
          rows.push(row);
        }
      }
      rows.sort((a, b) => (a.tool.name < b.tool.name ? -1 : a.tool.name > b.tool.name ? 1 : 0));
      const frozen = Object.freeze(rows);
      listCache.set(key, frozen);
      return frozen;
    },

    isBuiltin(name) {
      return builtins.has(name);
    },

    async promote(name, opts = {}) {
      const from = opts.from ?? 'project';
      const user = dirOf('user');
      const invalid = badName(name);
      if (invalid) return invalid;
      const source = await dirOf(from).read(name);
      if (source.status === 'bad') {
        emitFailure(from, source.failure);
        return damagedFailure(damagedOf(from, name, source.failure));
      }
      if (source.status !== 'ok') return unknownTool(name, `the ${from} scope`);
      const src = source.tool;
      const mayPromote = opts.authorize?.(src);
      if (mayPromote) return mayPromote;
      const project = projectDir ?? dirOf(from).where;
      const result = await claimed(name, 'user', (claim) =>
        user
          .put<PromoteResult>(name, async (current, next, collisions): Promise<Decision<PromoteResult>> => {
            let outcome: PromoteOutcome = 'created';
            if (current.status === 'missing') {
              const variant = (await collisions()).cases[0];
              if (variant !== undefined) {
                return {
                  value: {
                    ok: false,
                    kind: 'promote_conflict',
                    message: `the user scope already has "${variant}", which differs from "${name}" only by case, and names are compared regardless of case; rename the tool before promoting it`,
                  },
                };
              }
              const clash = await wireClash(name, user, collisions, 'promote_conflict');
              if (clash) return { value: clash };
            }
            if (current.status === 'ok') {
              const cur = current.tool;
              if (cur.digest === src.digest) return { value: { ok: true, outcome: 'unchanged', tool: cur } };
              if (cur.origin?.project === project) outcome = 'updated';
              else if (opts.force) outcome = 'replaced';
              else {
                const whence = cur.origin ? `promoted from ${cur.origin.project}` : 'forged in the user scope';
                return {
                  value: {
                    ok: false,
                    kind: 'promote_conflict',
                    message: `the user scope already has a different "${name}" (version ${cur.version}, ${cur.digest}, ${whence}); rename the tool or pass force to replace it (the old version stays recoverable)`,
                  },
                };
              }
            } else if (current.status === 'bad') {
              if (!opts.force) {
                return {
                  value: {
                    ok: false,
                    kind: 'promote_conflict',
                    message: `the user scope holds an unreadable file for "${name}" (${current.failure.reason}); pass force to replace it (it is kept in the version history)`,
                  },
                };
              }
              outcome = 'replaced';
            }
            if (current.status !== 'missing' && opts.authorize) {
              const refused = opts.authorize(current.status === 'ok' ? current.tool : undefined);
              if (refused) return { value: refused };
            }
            const tool: StoredTool = {
              ...stamp(src, src.digest, next, 'user', opts.createdBy ?? src.created_by),
              origin: { project, digest: src.digest },
            };
            const value: PromoteResult = { ok: true, outcome, tool };
            if (current.status === 'ok') value.previous = { version: current.tool.version, digest: current.tool.digest };
            claim();
            return { write: tool, value };
          })
          .then((r) => {
            if (r.ok) setOwn('user', name, r.tool);
            return r;
          }),
      );
      return result;
    },

    async setState(name, toState, opts) {
      const dir = dirOf(opts.scope);
      const invalid = badName(name);
      if (invalid) return invalid;
      if (!(TOOL_STATES as readonly string[]).includes(toState))
        return { ok: false, kind: 'validation_failed', message: `state "${toState}" is not one of ${TOOL_STATES.join(', ')}` };
      const result = await dir
        .put<SetStateResult>(name, (current, next): Decision<SetStateResult> => {
          if (current.status === 'missing') return { value: unknownTool(name, `the ${opts.scope} scope`) };
          if (current.status === 'bad') return { value: damagedFailure(damagedOf(opts.scope, name, current.failure)) };
          const cur = current.tool;
          if (opts.from && !opts.from.includes(cur.state))
            return {
              value: {
                ok: false,
                kind: 'state_conflict',
                message: `tool "${name}" (${opts.scope} scope, version ${cur.version}) is ${cur.state}, not ${opts.from.join(' or ')}; nothing was changed`,
              },
            };
          if (opts.digest && cur.digest !== opts.digest)
            return {
              value: {
                ok: false,
                kind: 'state_conflict',
                message: `tool "${name}" (${opts.scope} scope) is now version ${cur.version} (${cur.digest}), not ${opts.digest}; nothing was changed`,
              },
            };
          const refused = opts.authorize?.(cur);
          if (refused) return { value: refused };
          // The content and its digest stay; the state is a stamp, and the change is a version of its own.
          const tool: StoredTool = { ...cur, version: next, created_at: now().toISOString(), state: toState };
          return { write: tool, value: { ok: true, tool, previous: { version: cur.version, digest: cur.digest } } };
        })
        .then((r) => {
          if (r.ok) setOwn(opts.scope, name, r.tool);
          return r;
        });
      return result;
    },

    async versions(name, opts) {
      const dir = dirOf(opts.scope);
      return toolNameProblem(name) ? [] : dir.versions(name);
    },

    async recover(name, version, opts) {
      const dir = dirOf(opts.scope);
      const invalid = badName(name);
      if (invalid) return invalid;
      const kept = (await dir.versions(name)).find((v) => !v.current && v.version === version && v.tool);
      if (!kept?.tool) return unknownTool(name, `the version history of the ${opts.scope} scope at version ${version}`);
      const old = kept.tool;
      if (builtins.has(name)) return forbidden(name);
      const result = await claimed(name, opts.scope, (claim) =>
        dir
          .put<RecoverResult>(name, async (current: ReadResult, next, collisions): Promise<Decision<RecoverResult>> => {
            if (current.status === 'missing') {
              const clash = await wireClash(name, dir, collisions, 'name_taken');
              if (clash) return { value: clash as Failure<'name_taken'> };
            }
            // A recovered promoted tool keeps its origin: it still came from there.
            const tool = stamp(old, old.digest, next, opts.scope, opts.createdBy ?? old.created_by);
            const value: WriteOk = { ok: true, tool };
            if (current.status === 'ok') value.previous = { version: current.tool.version, digest: current.tool.digest };
            claim();
            return { write: tool, value };
          })
          .then((r) => {
            if (r.ok) setOwn(opts.scope, name, r.tool);
            return r;
          }),
      );
      return result;
    },

    async watch(onChange, watchOptions) {
      if (watching) throw new RegistryError('invalid_option', 'this registry is already watching; call close() first');
      const claim = {};
      watching = claim;
      try {
        const w = await watchStores(
          scopes.map((s) => dirOf(s)),
          async (pending, live) => {
            const changes: ScopeChange[] = [];
            for (const [scope, names] of pending) {
              const changed: string[] = [];
              for (const n of names) if (await refresh(scope, n, live)) changed.push(n);
              if (changed.length > 0) changes.push({ scope, names: changed.sort() });
            }
            return changes;
          },
          onChange,
          watchOptions,
        );
        if (watching === claim) watcher = w;
        else await w.close();
      } catch (err) {
        if (watching === claim) watching = undefined;
        throw err;
      }
    },

    async close() {
      const w = watcher;
      watcher = undefined;
      watching = undefined;
      await w?.close();
    },
  };
  return registry;
}
