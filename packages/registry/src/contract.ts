/**
 * The registry's contract: the `Registry` interface, its options and the results its methods
 * return. Types only, so that every module of the implementation can name them without importing
 * another.
 */
import type { ScopeRoots } from './scopes.js';
import type { SpecOk } from './spec.js';
import type { StoreFailure, ToolStore, ToolVersion } from './toolStore.js';
import type { CreatedBy, DamagedTool, Failure, RegistryEvent, Scope, StoredTool, ToolState, ValidationFailure } from './types.js';
import type { ScopeChange, WatchOptions } from './watch.js';

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
  /**
   * Runtime names a spec may use (default `python3`, `node`, `bash`, `sh`), or a function asked
   * at each validation (for names found only when the first tool is forged).
   */
  runtimes?: readonly string[] | (() => readonly string[]);
  /** Receives `registry.load_failed` events (plain data for an audit log). */
  onEvent?: (event: RegistryEvent) => void;
  /** The clock for `created_at` (default `() => new Date()`). */
  now?: () => Date;
  /**
   * The cross-process lock the file stores take around each write of a name (see `PathLock`).
   * Default: proper-lockfile, which takes over a dead holder's lock once it is 10 s stale; forge's
   * runner passes its own owner-aware lock, which takes over a dead holder's at once.
   */
  lock?: PathLock;
}

/**
 * A cross-process lock: runs `fn` holding the lock at `path` (a lock file or directory of that
 * name, in a directory that exists) and releases it however `fn` ends. A lock waited on too long
 * rejects with an error whose `code` is `lock_timeout`; any other rejection means the lock could
 * not be made.
 */
export type PathLock = <T>(path: string, fn: () => Promise<T>) => Promise<T>;

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
