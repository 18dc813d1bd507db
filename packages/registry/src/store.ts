import { type Dirent, readdirSync, statSync, unlinkSync } from 'node:fs';
import { link, readdir, readFile, stat, unlink } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join, sep } from 'node:path';
import type lockfileType from 'proper-lockfile';
import type { PathLock } from './contract.js';
import { RegistryError } from './errors.js';
import { ensureDir, linkNew, readTextSync, replaceWith, syncDir, writeTemp } from './fs-atomic.js';
import { toolNameProblem, wireKey, wireLockKey } from './name.js';
import { storedToolProblem } from './spec.js';
import type { Collisions, Decide, FileFailure, ReadResult, ToolVersion } from './toolStore.js';
import type { Scope, StoredTool } from './types.js';

// proper-lockfile (with graceful-fs) is loaded by the first write: reading never locks.
const require = createRequire(import.meta.url);
let lockfileModule: typeof lockfileType | undefined;
function lockfile(): typeof lockfileType {
  lockfileModule ??= require('proper-lockfile') as typeof lockfileType;
  return lockfileModule;
}

export type { Decision, FileFailure, ReadResult, ToolVersion } from './toolStore.js';

const VERSIONS_DIR = '.versions';
const LOCKS_DIR = '.locks';
const HISTORY_FILE = /^(\d+)(?:~\d+)?\.json$/;

function errno(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code;
}

function unusable(root: string, err: unknown): RegistryError {
  return new RegistryError(
    'root_unusable',
    `tool directory ${root} is not usable: ${(err as Error).message}; check that it is a directory this user can read and write`,
    { cause: err },
  );
}

/** A `bad` read of the file `fileName` at `path`, naming the name it is stored under. */
function badFile(path: string, fileName: string, reason: string): ReadResult {
  const name = fileName.endsWith('.json') ? fileName.slice(0, -5) : fileName;
  return { status: 'bad', failure: { path, reason, name } };
}

/**
 * Parses a tool file's text and checks it fast (shape and stamps, no schema compile, no digest).
 * The tool's `scope` is set to the directory's: the directory is the truth.
 */
export function parseToolFile(text: string, path: string, fileName: string, scope: Scope, builtins: ReadonlySet<string>): ReadResult {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return badFile(path, fileName, `not valid JSON: ${(err as Error).message}`);
  }
  const problem = storedToolProblem(value);
  if (problem) return badFile(path, fileName, problem);
  const tool = value as StoredTool;
  if (fileName !== `${tool.name}.json`) {
    return badFile(path, fileName, `file name ${JSON.stringify(fileName)} does not match the spec name ${JSON.stringify(tool.name)}`);
  }
  if (builtins.has(tool.name)) return badFile(path, fileName, `${JSON.stringify(tool.name)} is a built-in name; a file cannot shadow it`);
  tool.scope = scope;
  return { status: 'ok', tool };
}

/**
 * The tools of one scope, one file per tool in one directory:
 * `<root>/<name>.json` (live), `<root>/.versions/<name>/<version>.json` (replaced and removed
 * versions), `<root>/.locks/<key>.lock` (held while a name is written; see `withLock`). Every write of a name
 * happens under its cross-process lock, publishes with link(2) or rename(2) after fsync, and
 * fsyncs the directory.
 */
export class ScopeDir {
  constructor(
    readonly scope: Scope,
    readonly root: string,
    private readonly builtins: ReadonlySet<string>,
    private readonly lock?: PathLock,
  ) {}

  /** The live file of `name`. Throws for a name outside the grammar: it would leave the root. */
  pathOf(name: string): string {
    const problem = toolNameProblem(name);
    if (problem) throw new RegistryError('invalid_option', `${JSON.stringify(name)} is not a tool name: it ${problem}`);
    return join(this.root, `${name}.json`);
  }

  /**
   * Reads every `*.json` file of the root synchronously (a cold load of 10 000 small files is
   * several times faster with sync reads than through the thread pool), yielding to the event
   * loop every 1000 files so a server is not held for the whole load.
   */
  async loadAll(onTool: (tool: StoredTool) => void, onFailure: (f: FileFailure) => void): Promise<void> {
    let entries: Dirent[];
    try {
      entries = readdirSync(this.root, { withFileTypes: true });
    } catch (err) {
      if (errno(err) === 'ENOENT') return;
      throw unusable(this.root, err);
    }
    let n = 0;
    for (const e of entries) {
      if (e.name.startsWith(TMP_PREFIX)) {
        sweepTemp(`${this.root}${sep}${e.name}`);
        continue;
      }
      if (e.name.startsWith('.') || !e.name.endsWith('.json')) continue;
      // Plain concatenation: path.join normalizes every time, measurable over 10 000 files.
      const path = `${this.root}${sep}${e.name}`;
      if (!e.isFile()) {
        const kind = e.isDirectory() ? 'a directory' : e.isSymbolicLink() ? 'a symbolic link' : 'a special file';
        onFailure({ path, reason: `not a regular file (${kind})`, name: e.name.slice(0, -5) });
        continue;
      }
      const r = this.readFile(path, e.name);
      if (r.status === 'ok') onTool(r.tool);
      else if (r.status === 'bad') onFailure(r.failure);
      if (++n % 1000 === 0) await new Promise((resolve) => setImmediate(resolve));
    }
  }

  private readFile(path: string, fileName: string): ReadResult {
    let text: string;
    try {
      text = readTextSync(path);
    } catch (err) {
      if (errno(err) === 'ENOENT') return { status: 'missing' };
      if (errno(err) === 'EISDIR') return badFile(path, fileName, 'not a regular file (a directory)');
      return badFile(path, fileName, `unreadable: ${(err as Error).message}`);
    }
    return parseToolFile(text, path, fileName, this.scope, this.builtins);
  }

  /** Reads the live file of `name`. */
  read(name: string): ReadResult {
    return this.readFile(this.pathOf(name), `${name}.json`);
  }

  /**
   * Live tool files whose name differs from `name` only by case (`CODE.tool` for `code.tool`),
   * read from the directory itself: another process may have written one since the last load.
   */
  caseVariants(name: string): string[] {
    return this.collisions(name).cases;
  }

  /**
   * Live tool files, read from the directory itself, that would collide with `name`: `cases`
   * differ from it only by case; `wires` are other names with the same wire name regardless of
   * case (`a__b` for `a.b`; see `wireName`). One directory read for both.
   */
  collisions(name: string): Collisions {
    const cases: string[] = [];
    const wires: string[] = [];
    let files: string[];
    try {
      files = readdirSync(this.root);
    } catch (err) {
      if (errno(err) === 'ENOENT') return { cases, wires };
      throw unusable(this.root, err);
    }
    const lower = name.toLowerCase();
    const want = `${lower}.json`;
    const key = wireKey(name);
    for (const f of files) {
      if (f.startsWith('.') || !f.endsWith('.json') || f === `${name}.json`) continue;
      const other = f.slice(0, -5);
      if (f.length === want.length && f.toLowerCase() === want) cases.push(other);
      else if (collidesWith(other, key)) wires.push(other);
    }
    return { cases: cases.sort(), wires: wires.sort() };
  }

  private async ensureRoot(): Promise<void> {
    try {
      await ensureDir(this.root);
      await ensureDir(join(this.root, LOCKS_DIR));
      await ensureDir(join(this.root, VERSIONS_DIR));
    } catch (err) {
      throw unusable(this.root, err);
    }
  }

  /**
   * Runs `fn` holding the cross-process lock of `name`. Names that could collide share one lock
   * (`.locks/<wireLockKey(name)>.lock`): names that differ only by case, and names with the same
   * wire name (`a.b`, `a__b`). Two processes forging `CODE.tool` and `code.tool`, or `a.b` and
   * `a__b`, at once are serialized and the second sees the first's file (and on a
   * case-insensitive file system, where case variants are one file, the lock is one lock too).
   */
  private async withLock<T>(name: string, fn: () => Promise<T>): Promise<T> {
    await this.ensureRoot();
    const lockPath = join(this.root, LOCKS_DIR, `${wireLockKey(name)}.lock`);
    if (this.lock) return this.withGivenLock(this.lock, lockPath, name, fn);
    let release: () => Promise<void>;
    try {
      release = await lockfile().lock(this.pathOf(name), {
        realpath: false,
        lockfilePath: lockPath,
        stale: 10_000,
        retries: { retries: 400, factor: 1.2, minTimeout: 2, maxTimeout: 50, randomize: true },
        // A compromised lock means this process stalled past the stale time while writing.
        // The write itself still cannot clobber a create (link) and the history link is taken
        // before any replace, so nothing acknowledged is lost; do not crash the process.
        onCompromised: () => {},
      });
    } catch (err) {
      if (errno(err) === 'ELOCKED') {
        throw new RegistryError('lock_timeout', `tool "${name}" in ${this.root} is being written by another process for too long; retry`, {
          cause: err,
        });
      }
      throw unusable(this.root, err);
    }
    try {
      return await this.written(name, fn);
    } finally {
      await release().catch(() => {});
    }
  }

  /** `withLock` with the registry's `lock` option (forge's owner-aware lock). */
  private async withGivenLock<T>(lock: PathLock, lockPath: string, name: string, fn: () => Promise<T>): Promise<T> {
    let locked = false;
    try {
      return await lock(lockPath, () => {
        locked = true;
        return this.written(name, fn);
      });
    } catch (err) {
      if (locked || err instanceof RegistryError) throw err;
      if ((err as { code?: unknown }).code === 'lock_timeout') {
        throw new RegistryError(
          'lock_timeout',
          `tool "${name}" in ${this.root} is being written by another process: ${(err as Error).message}`,
          {
            cause: err,
          },
        );
      }
      throw unusable(this.root, err);
    }
  }

  /** Runs the write `fn` (holding the name's lock); a failure that is not a RegistryError is `root_unusable`. */
  private async written<T>(name: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof RegistryError) throw err;
      throw new RegistryError(
        'root_unusable',
        `writing tool "${name}" in ${this.root} failed: ${(err as Error).message}; check the directory's permissions, free space, and that ${name}.json is a regular file`,
        { cause: err },
      );
    }
  }

  private historyDir(name: string): string {
    return join(this.root, VERSIONS_DIR, name);
  }

  /** Highest version number in the history of `name`, 0 when none. */
  private async maxHistoryVersion(name: string): Promise<number> {
    let files: string[];
    try {
      files = await readdir(this.historyDir(name));
    } catch (err) {
      if (errno(err) === 'ENOENT') return 0;
      throw err;
    }
    let max = 0;
    for (const f of files) {
      const m = HISTORY_FILE.exec(f);
      if (m) max = Math.max(max, Number(m[1]));
    }
    return max;
  }

  /**
   * Keeps the live file of `name` (version `version`, or unreadable) in the history by hard
   * link, before it is replaced or removed.
   */
  private async keepLive(name: string, version: number | undefined): Promise<void> {
    const dir = this.historyDir(name);
    await ensureDir(dir);
    const live = this.pathOf(name);
    const base = version === undefined ? `0~${Date.now()}.json` : `${version}.json`;
    try {
      await link(live, join(dir, base));
    } catch (err) {
      if (errno(err) !== 'EEXIST') throw err;
      // Already kept (a crash after this link, before the replace) or a hand-edited file that
      // reuses a version number: keep both.
      const [a, b] = await Promise.all([stat(live), stat(join(dir, base))]);
      if (a.ino !== b.ino || a.dev !== b.dev) await link(live, join(dir, `${version ?? 0}~${Date.now()}.json`));
    }
    await syncDir(dir);
  }

  /**
   * Decides and writes `name` under its lock. `decide` sees the live tool (undefined when there
   * is none; `bad` when the file is unreadable) and the next free version number. A write of a
   * new name publishes with link(2), so it can never clobber; a replace keeps the previous file
   * in the history first.
   */
  async put<R>(name: string, decide: Decide<R>): Promise<R> {
    return this.withLock(name, async () => {
      const live = this.pathOf(name);
      for (let attempt = 1; ; attempt++) {
        if (attempt > 5) throw new Error(`${name}.json keeps appearing while it is written: another program writes there without the lock`);
        const current = this.read(name);
        const maxHistory = await this.maxHistoryVersion(name);
        const next = Math.max(current.status === 'ok' ? current.tool.version : 0, maxHistory) + 1;
        const d = await decide(current, next, async () => this.collisions(name));
        if (!d.write) return d.value;
        const tmp = await writeTemp(this.root, `${JSON.stringify(d.write, null, 2)}\n`);
        if (current.status === 'missing') {
          // Every writer holds the lock, so EEXIST means a foreign writer: decide again.
          if (!(await linkNew(tmp, live))) continue;
        } else {
          await this.keepLive(name, current.status === 'ok' ? current.tool.version : undefined);
          await replaceWith(tmp, live);
        }
        await syncDir(this.root);
        return d.value;
      }
    });
  }

  /**
   * Removes the live file of `name` under its lock, keeping it in the history. `check` sees what
   * is there first; a failure it returns is passed back and nothing is removed.
   */
  async remove<F>(name: string, check?: (current: ReadResult) => F | undefined): Promise<ReadResult | { status: 'refused'; failure: F }> {
    return this.withLock(name, async () => {
      const current = this.read(name);
      if (current.status === 'missing') return current;
      const failure = check?.(current);
      if (failure !== undefined) return { status: 'refused' as const, failure };
      await this.keepLive(name, current.status === 'ok' ? current.tool.version : undefined);
      await unlink(this.pathOf(name));
      await syncDir(this.root);
      return current;
    });
  }

  /** Every version of `name` kept in this scope, oldest first, the live one last. */
  async versions(name: string): Promise<ToolVersion[]> {
    const out: ToolVersion[] = [];
    const dir = this.historyDir(name);
    let files: string[] = [];
    try {
      files = await readdir(dir);
    } catch (err) {
      if (errno(err) !== 'ENOENT') throw unusable(this.root, err);
    }
    for (const f of files) {
      const m = HISTORY_FILE.exec(f);
      if (!m) continue;
      const path = join(dir, f);
      const r = parseToolFile(await readFile(path, 'utf8'), path, `${name}.json`, this.scope, new Set());
      if (r.status === 'ok') out.push({ version: r.tool.version, current: false, path, tool: r.tool });
      else if (r.status === 'bad') out.push({ version: Number(m[1]), current: false, path, reason: r.failure.reason });
    }
    out.sort((a, b) => a.version - b.version);
    const live = this.read(name);
    if (live.status === 'ok') out.push({ version: live.tool.version, current: true, path: this.pathOf(name), tool: live.tool });
    else if (live.status === 'bad') out.push({ version: 0, current: true, path: this.pathOf(name), reason: live.failure.reason });
    return out;
  }
}

/**
 * True when the file name `other` is a tool name whose wire key is `key`. Cheap for the many
 * names that cannot match (no hash unless the first 55 characters agree).
 */
function collidesWith(other: string, key: string): boolean {
  const flat = other.replaceAll('.', '__').toLowerCase();
  if (flat.length <= 64) return flat === key && toolNameProblem(other) === undefined;
  if (key.length !== 64 || flat.slice(0, 55) !== key.slice(0, 55)) return false;
  return toolNameProblem(other) === undefined && wireKey(other) === key;
}

/** Temporary files of writes (see fs-atomic's writeTemp). */
const TMP_PREFIX = '.tmp-';
/** A temporary file this old belongs to a write that died (a live one lasts milliseconds). */
const STALE_TMP_MS = 60 * 60_000;

/** Removes a writer's temporary file left behind by a crash, once it is clearly stale. */
function sweepTemp(path: string): void {
  try {
    if (Date.now() - statSync(path).mtimeMs > STALE_TMP_MS) unlinkSync(path);
  } catch {
    // gone already, or not ours to remove: leave it
  }
}
