import type { Scope, StoredTool } from './types.js';

/**
 * A stored record that could not be used, and why. `path` says where it is: a file path for the
 * file store, a locator such as `postgres://db.example/forge#project/csv.count` (never with a
 * password) for others.
 */
export interface StoreFailure {
  path: string;
  reason: string;
  /**
   * The name the record is stored under, when the store knows it (the file store: the file name
   * without `.json`). The registry keeps a record under a tool name as damaged (`DamagedTool`):
   * listed, refused and removable, never dropped in silence. Leave it out when there is none.
   */
  name?: string;
}

/** The file store's name for a {@link StoreFailure} (a tool file that could not be used). */
export type FileFailure = StoreFailure;

/**
 * What reading one name gave: the live tool, nothing, or a record that exists but cannot be used
 * (not valid JSON, not a valid stored tool, stored under another name, a built-in name, not a
 * regular file). `bad` is a value, never a throw: one broken record must not hide the others.
 */
export type ReadResult = { status: 'ok'; tool: StoredTool } | { status: 'missing' } | { status: 'bad'; failure: StoreFailure };

/** One recoverable version of a tool (see `Registry.versions`). */
export interface ToolVersion {
  version: number;
  /** True for the live version; false for a replaced or removed one (in the file store, a file under `.versions/`). */
  current: boolean;
  /** Where the version is kept (see {@link StoreFailure}'s `path`). */
  path: string;
  /** The stored tool, or undefined when the record is unreadable (`reason` says why). */
  tool?: StoredTool;
  reason?: string;
}

/** What a locked write decided: the tool to write (if any) and the value `put` returns. */
export interface Decision<R> {
  write?: StoredTool;
  value: R;
}

/**
 * Live names of one store that would collide with a name: `cases` differ from it only by case
 * (`CODE.tool` for `code.tool`); `wires` are other names with the same wire name regardless of
 * case (`a__b` for `a.b`; see `wireName`), case variants excluded. Both sorted; never the name itself.
 */
export interface Collisions {
  cases: string[];
  wires: string[];
}

/**
 * Decides a write of one name while the store holds its lock. `current` is the live record,
 * `nextVersion` the version number the written tool must carry, and `collisions()` reads the
 * store's {@link Collisions} of the name under that same lock (through the lock's own connection
 * or handle: a store with a connection pool must not need a second connection for it).
 */
export type Decide<R> = (
  current: ReadResult,
  nextVersion: number,
  collisions: () => Promise<Collisions>,
) => Decision<R> | Promise<Decision<R>>;

/** Options of {@link ToolStore.watch}. */
export interface StoreWatchOptions {
  /** Quiet time before a batch of changes is reported (a hint; the file store's default is 50 ms). */
  debounceMs?: number;
  /** Longest a busy store may delay a batch (a hint; the file store's default is 500 ms). */
  maxWaitMs?: number;
  /**
   * Receives problems after start (an inotify limit, a removed directory, a lost connection) and
   * anything `onChange` throws. Default: ignored. A store never throws them into the process.
   */
  onError?: (error: unknown) => void;
}

/** A running change feed; `close()` stops it (idempotent, resolves once nothing more is reported). */
export interface StoreWatcher {
  close(): Promise<void>;
}

/**
 * Where the tools of ONE scope are kept. `createRegistry` keeps its in-memory index, shadowing,
 * case and wire-name checks, promote, states and history over any implementation of this; the
 * file store (`fileToolStore`, one JSON file per tool) is the first, a database the next. Every
 * implementation runs the conformance suite `describeToolStore` (packages/conformance).
 *
 * The contract every implementation keeps:
 * - **Names.** Every method that takes a name accepts only names of the tool grammar
 *   (`toolNameProblem`): `put`, `remove` and `collisions` throw a `RegistryError`
 *   `invalid_option` for any other string, `versions` returns `[]`, and `read` returns `missing` (or `bad`, when a record
 *   under such a name exists, put there by hand: the file store reports `1bad.json`). Nothing a
 *   name holds ever reaches outside the store (`../x`).
 * - **Records.** A tool is stored as the caller gave it and read back equal (JSON data), with
 *   `scope` set to the store's scope (the store is the truth). A record that cannot be used is
 *   `bad` with a reason, never a throw and never a crash; built-in names (given when the store is
 *   opened) are `bad` too: a store cannot shadow a built-in.
 * - **Atomicity.** `put` is a compare-and-decide: `decide` runs while the name AND every name
 *   that could collide with it (same lower-cased name, same lower-cased wire name: one lock per
 *   `wireLockKey`) is locked against every process using the same store; what it returns is
 *   written before the lock is released, or nothing is. A reader sees the old record or the new
 *   one, never a mix; a process killed at any point leaves one of the two, and the name writable
 *   again (a lock of a dead holder is taken over, in bounded time).
 * - **Versions.** `nextVersion` is one more than the highest version of the name ever stored in
 *   the scope (live, replaced or removed): numbers are never reused, also after a remove. A
 *   replace or remove keeps the previous live record in the history first, so `versions` lists
 *   every acknowledged write.
 * - **Errors.** Expected outcomes are values; a store that cannot be used throws a
 *   `RegistryError` (`root_unusable` naming `where` and what to do; `lock_timeout` for a lock
 *   held too long by a live holder).
 * - **Change notification.** `watch` reports names that other processes (or other store objects
 *   over the same storage) added, replaced or removed, once it has resolved, batched. It may
 *   report a name that did not change and names this object wrote (the registry re-reads each
 *   name and compares); it must not miss one. After a gap it cannot account for (a reconnect), it
 *   reports every name it holds or has held.
 */
export interface ToolStore {
  /** The scope whose tools this store keeps. */
  readonly scope: Scope;
  /** Where the tools are, for messages: a directory, or a URL without its password. */
  readonly where: string;
  /**
   * Reads every live tool: `onTool` for each usable one, `onFailure` for each record that is not
   * (see {@link ReadResult}). An empty or not-yet-created store is empty, not an error; creates nothing.
   */
  loadAll(onTool: (tool: StoredTool) => void, onFailure: (failure: StoreFailure) => void): Promise<void>;
  /** The live record of `name`, read from storage now (another process may have written it). */
  read(name: string): Promise<ReadResult>;
  /** The live names colliding with `name` (see {@link Collisions}), read from storage now. */
  collisions(name: string): Promise<Collisions>;
  /**
   * Decides and writes `name` atomically under its lock (see the contract above). Returns what
   * `decide` returned as `value`. `decide` may be asked again within one `put` (the file store
   * does when a file appears that a writer without the lock put there); what it returns must not
   * depend on being asked once.
   */
  put<R>(name: string, decide: Decide<R>): Promise<R>;
  /**
   * Removes the live record of `name` under its lock, keeping it in the history. `check` sees it
   * first; a failure it returns is passed back as `refused` and nothing is removed. Returns what
   * was there (`missing`: nothing was).
   */
  remove<F>(name: string, check?: (current: ReadResult) => F | undefined): Promise<ReadResult | { status: 'refused'; failure: F }>;
  /** Every version of `name` kept in this scope, oldest first, the live one (if any) last. */
  versions(name: string): Promise<ToolVersion[]>;
  /**
   * Starts reporting changed names (sorted, deduplicated per batch) to `onChange`; resolves once
   * a change made after that is sure to be reported. Creates nothing (a file store over a
   * directory that does not exist yet waits for it).
   */
  watch(onChange: (names: string[]) => void, options?: StoreWatchOptions): Promise<StoreWatcher>;
}
