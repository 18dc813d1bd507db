import { close as closeCb, closeSync, fdatasync, fstatSync, openSync, readSync, rename, statSync, write } from 'node:fs';
import { mkdir, open, readdir, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { DirLock } from '@forge/audit-chain';
import { GapStoreError, sanitizeGapRecord, summarizeGaps } from './gapRecords.js';
import { checkGapQuery, openGapWriter } from './gapWriter.js';
import type { GapInput, GapQuery, GapStore as GapStoreContract } from './stores.js';
import type { GapKind, GapRecord, GapSummary } from './types.js';

export { GapStoreError, type GapStoreErrorCode, type SanitizeResult, sanitizeGapRecord, summarizeGaps } from './gapRecords.js';

const writeAsync = promisify(write);
const fdatasyncAsync = promisify(fdatasync);
const closeAsync = promisify(closeCb);
const renameAsync = promisify(rename);

/** A sanitised record's line is far below this (5 × 4 KiB of examples + escaped text); longer lines are skipped unread. */
const MAX_LINE_BYTES = 64 * 1024;
const READ_CHUNK = 256 * 1024;
const FILE_NAME = 'gaps.jsonl';
const LOCK_NAME = 'gaps.lock';

/** How to open a gap store. */
export interface GapStoreOptions {
  /** The store's directory (`<project>/.forge/toolsmith`): created 0700 by the first write; opening or reading creates nothing. */
  dir: string;
  /** Records kept (the ring; default 10,000). The file never holds more than twice this many lines. */
  maxRecords?: number;
  /** The clock (ms since the epoch) for records given without `at` and for `summary` without `now`. */
  now?: () => number;
  /** Where best-effort writes (`note`) report failures; never throws into the caller. Default: a process warning. */
  onError?: (err: Error) => void;
}

/**
 * The file implementation of the {@link GapStoreContract | GapStore} interface: a durable, bounded,
 * multi-process store of gap observations (`<dir>/gaps.jsonl`, JSON Lines). Its reads answer at
 * once (synchronously), from a view of the file kept up to date incrementally.
 */
export interface FileGapStore extends GapStoreContract {
  /** `<dir>/gaps.jsonl`. */
  readonly file: string;
  /**
   * Records one observation; resolves once it is durable (group commit: one locked append and one
   * fdatasync per batch of concurrent calls). Rejects with a {@link GapStoreError}: `invalid_record`
   * (naming the field), `unusable` (the directory or file cannot be written), `closed`.
   */
  record(r: GapInput): Promise<void>;
  /** Best effort: `record()` without waiting; any failure goes to `onError`. Never throws, never blocks. */
  note(r: GapInput): void;
  /**
   * The records held now, oldest first, other processes' appends included (the file is re-read
   * when its inode, size or mtime changed; incrementally when the same inode grew). Throws
   * `unusable` when the file exists but cannot be read; a missing file is an empty store.
   */
  records(): readonly GapRecord[];
  /** {@link summarizeGaps} over {@link records} and the records noted and not written yet, at once. */
  summary(q: GapQuery): GapSummary[];
  /** One (kind, signature)'s records, oldest first. */
  history(kind: GapKind, signature: string): readonly GapRecord[];
  /** Resolves once every record accepted so far is durable (or has failed). */
  flush(): Promise<void>;
  /** Flushes, then releases the file; later `record()` calls reject with `closed`. */
  close(): Promise<void>;
}

/** The file store's type under its earlier name (as `./gaps.js` exported it); the package exports the interface as `GapStore`. */
export type GapStore = FileGapStore;

/** What this process knows of the file: the inode it holds open, how far it has read, and the ring of records. */
interface View {
  fd?: number;
  dev: number;
  ino: number;
  size: number;
  mtimeMs: number;
  /** Bytes consumed: always the end of a complete line. */
  offset: number;
  /** Complete lines up to `offset`, records or not. */
  lines: number;
  ring: GapRecord[];
  start: number;
  snapshot?: readonly GapRecord[];
}

function emptyView(): View {
  return { dev: 0, ino: 0, size: 0, mtimeMs: 0, offset: 0, lines: 0, ring: [], start: 0 };
}

function errno(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code;
}

function unusable(what: string, err: unknown): GapStoreError {
  return new GapStoreError(
    'unusable',
    `gap store ${what} is not usable: ${(err as Error).message}; check that it is a directory this user can read and write`,
    { cause: err },
  );
}

function pushRing(view: View, record: GapRecord, max: number): void {
  if (view.ring.length < max) view.ring.push(record);
  else {
    view.ring[view.start] = record;
    view.start = (view.start + 1) % max;
  }
  view.snapshot = undefined;
}

function ordered(view: View): readonly GapRecord[] {
  view.snapshot ??= Object.freeze(view.ring.slice(view.start).concat(view.ring.slice(0, view.start)));
  return view.snapshot;
}

function parseLine(buf: Buffer, view: View, max: number): void {
  view.lines++;
  let value: unknown;
  try {
    value = JSON.parse(buf.toString('utf8'));
  } catch {
    return; // not JSON (a torn line glued shut by a later batch's "\n"): skipped
  }
  const s = sanitizeGapRecord(value);
  if (s.ok) pushRing(view, Object.freeze(s.record), max);
}

/** Reads complete lines from `view.offset` to `end` of `view.fd`, bounded per line; a partial last line stays unread. */
function readFrom(view: View, end: number, max: number): void {
  const fd = view.fd as number;
  const chunk = Buffer.allocUnsafe(READ_CHUNK);
  let carry: Buffer[] = [];
  let carryLen = 0;
  let skipping = false; // inside a line longer than MAX_LINE_BYTES: drop bytes up to its "\n"
  let pos = view.offset;
  while (pos < end) {
    const n = readSync(fd, chunk, 0, Math.min(READ_CHUNK, end - pos), pos);
    if (n === 0) break;
    let from = 0;
    for (;;) {
      const nl = chunk.indexOf(10, from);
      if (nl === -1 || nl >= n) break;
      if (skipping) view.lines++;
      else {
        const piece = chunk.subarray(from, nl);
        if (carryLen + piece.length > MAX_LINE_BYTES) view.lines++;
        else parseLine(carryLen === 0 ? piece : Buffer.concat([...carry, piece]), view, max);
      }
      skipping = false;
      carry = [];
      carryLen = 0;
      from = nl + 1;
      view.offset = pos + from;
    }
    if (from < n && !skipping) {
      carryLen += n - from;
      if (carryLen > MAX_LINE_BYTES) {
        skipping = true;
        carry = [];
      } else carry.push(Buffer.from(chunk.subarray(from, n)));
    }
    pos += n;
  }
}

/** Brings `view` up to date with the file at `path` (synchronous: readers never lock). */
/** `records` and the `pending` ones not among them yet (a batch may be in the file before its commit returns). */
function withPending(records: readonly GapRecord[], pending: readonly GapRecord[]): readonly GapRecord[] {
  if (pending.length === 0) return records;
  const key = (r: GapRecord) => JSON.stringify(r);
  const written = new Set(records.slice(-pending.length).map(key));
  return [...records, ...pending.filter((r) => !written.has(key(r)))];
}

function syncView(view: View, path: string, max: number): View {
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(path);
  } catch (err) {
    if (errno(err) !== 'ENOENT') throw unusable(path, err);
    if (view.fd !== undefined) closeSync(view.fd);
    return emptyView();
  }
  if (view.fd !== undefined && st.ino === view.ino && st.dev === view.dev) {
    // The fd keeps this inode alive, so its number cannot be reused by a newer file.
    const fst = fstatSync(view.fd);
    if (fst.size === view.size && fst.mtimeMs === view.mtimeMs) return view;
    if (fst.size > view.size) {
      readFrom(view, fst.size, max);
      view.size = fst.size;
      view.mtimeMs = fst.mtimeMs;
      return view;
    }
  }
  if (view.fd !== undefined) closeSync(view.fd);
  const next = emptyView();
  try {
    next.fd = openSync(path, 'r');
  } catch (err) {
    if (errno(err) === 'ENOENT') return next;
    throw unusable(path, err);
  }
  const fst = fstatSync(next.fd);
  next.dev = fst.dev;
  next.ino = fst.ino;
  readFrom(next, fst.size, max);
  next.size = fst.size;
  next.mtimeMs = fst.mtimeMs;
  return next;
}

/** The appender's side: its own O_APPEND fd, re-opened under the lock whenever the path's inode changed. */
interface Writer {
  fd?: number;
  dev: number;
  ino: number;
  dirReady: boolean;
}

async function ensureDir(dir: string, writer: Writer): Promise<void> {
  if (writer.dirReady) return;
  try {
    const created = await mkdir(dir, { recursive: true, mode: 0o700 });
    if (created !== undefined) await syncDirPath(dirname(created));
  } catch (err) {
    throw unusable(dir, err);
  }
  writer.dirReady = true;
}

async function syncDirPath(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Under the lock: points `writer.fd` at the inode the path names now, creating the file (0600) if needed. */
async function openWriter(writer: Writer, file: string, dir: string): Promise<void> {
  let st: ReturnType<typeof statSync> | undefined;
  try {
    st = statSync(file);
  } catch (err) {
    if (errno(err) !== 'ENOENT') throw unusable(file, err);
  }
  if (writer.fd !== undefined && st !== undefined && st.ino === writer.ino && st.dev === writer.dev) return;
  if (writer.fd !== undefined) {
    const old = writer.fd;
    writer.fd = undefined;
    await closeAsync(old).catch(() => {});
  }
  const fd = openSync(file, 'a', 0o600);
  const fst = fstatSync(fd);
  Object.assign(writer, { fd, dev: fst.dev, ino: fst.ino });
  if (st === undefined) await syncDirPath(dir); // the new file's directory entry is durable too
}

async function writeAll(fd: number, data: Buffer): Promise<void> {
  let done = 0;
  while (done < data.length) {
    const { bytesWritten } = await writeAsync(fd, data, done, data.length - done, null);
    done += bytesWritten;
  }
}

/** Under the lock: writes the newest `max` of the held records plus `batch` to a temp file and renames it over the store. */
async function compact(file: string, dir: string, held: readonly GapRecord[], batch: readonly string[], max: number): Promise<void> {
  // A compaction killed before its rename left a temp file: under the lock, none is in progress.
  for (const name of await readdir(dir)) {
    if (name.startsWith(`.${FILE_NAME}.`) && name.endsWith('.tmp')) await rm(join(dir, name), { force: true });
  }
  const all = held.map((r) => `${JSON.stringify(r)}\n`).concat(batch);
  const tmp = join(dir, `.${FILE_NAME}.${process.pid}.${Date.now().toString(36)}.tmp`);
  const handle = await open(tmp, 'wx', 0o600);
  try {
    await handle.writeFile(all.slice(-max).join(''));
    await handle.sync();
  } finally {
    await handle.close();
  }
  await renameAsync(tmp, file);
  await syncDirPath(dir);
}

/** Opens (lazily: nothing is read or created yet) the gap store in `o.dir`. */
export function openGapStore(o: GapStoreOptions): FileGapStore {
  const max = o.maxRecords ?? 10_000;
  if (!Number.isInteger(max) || max < 1) throw new RangeError(`openGapStore: maxRecords must be a positive integer (got ${max})`);
  const clock = o.now ?? Date.now;
  const onError = o.onError ?? ((err: Error) => process.emitWarning(err.message, { code: 'FORGE_TOOLSMITH_GAPS' }));
  const dir = o.dir;
  const file = join(dir, FILE_NAME);
  const lockPath = join(dir, LOCK_NAME);
  let view = emptyView();
  const writer: Writer = { dev: 0, ino: 0, dirReady: false };

  const commit = async (batch: GapRecord[]): Promise<void> => {
    const lines = batch.map((r) => `${JSON.stringify(r)}\n`);
    await ensureDir(dir, writer);
    // forge's one lock design (an owner record inside: a writer that died is taken over at once).
    const lock = new DirLock(lockPath, { timeoutMs: 20_000 });
    try {
      await lock.acquire();
    } catch (err) {
      throw unusable(lockPath, err);
    }
    try {
      await openWriter(writer, file, dir);
      view = syncView(view, file, max);
      if (view.ino !== writer.ino || view.dev !== writer.dev) {
        throw new GapStoreError('unusable', `gap store ${file} was replaced outside forge while being written; retry`);
      }
      const torn = view.size > view.offset; // a crashed writer's partial line: only we write now
      if (view.lines + (torn ? 1 : 0) + lines.length > 2 * max) {
        await compact(file, dir, ordered(view), lines, max);
        return;
      }
      const data = Buffer.from((torn ? '\n' : '') + lines.join(''));
      const fd = writer.fd as number;
      try {
        await writeAll(fd, data);
        await fdatasyncAsync(fd);
      } catch (err) {
        writer.fd = undefined; // after a failed write or sync the fd's state is unknown: re-open next time
        await closeAsync(fd).catch(() => {});
        throw unusable(file, err);
      }
      view = syncView(view, file, max);
    } catch (err) {
      throw err instanceof GapStoreError ? err : unusable(file, err);
    } finally {
      await lock.release().catch((err: Error) => onError(unusable(lockPath, err)));
    }
  };

  const writing = openGapWriter({
    where: file,
    now: clock,
    onError,
    commit,
    onFailed: () => {
      writer.dirReady = false; // the directory may have gone: make it again next time
    },
  });

  const records = (): readonly GapRecord[] => {
    view = syncView(view, file, max);
    return ordered(view);
  };

  return {
    file,
    record: writing.record,
    note: writing.note,
    records,
    summary(q) {
      checkGapQuery(q); // before reading: a bad query throws without touching the file
      // What was noted and is still being written counts too (a second call in the same moment
      // sees the first): a record already in the file is not counted twice.
      return summarizeGaps(withPending(records(), writing.pending()), q, q.now ?? clock());
    },
    history(kind, signature) {
      return records().filter((r) => r.kind === kind && r.signature === signature);
    },
    flush: writing.flush,
    async close() {
      await writing.close();
      if (view.fd !== undefined) closeSync(view.fd);
      view = emptyView();
      if (writer.fd !== undefined) closeSync(writer.fd);
      writer.fd = undefined;
    },
  };
}
