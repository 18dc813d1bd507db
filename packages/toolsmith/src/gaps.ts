import { close as closeCb, closeSync, fdatasync, fstatSync, openSync, readSync, rename, statSync, write } from 'node:fs';
import { mkdir, open, readdir, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import type lockfileType from 'proper-lockfile';
import type { GapInput, GapQuery, GapStore as GapStoreContract } from './stores.js';
import type { GapKind, GapRecord, GapSource, GapSummary } from './types.js';

// proper-lockfile (with graceful-fs) is loaded by the first write: reading never locks.
const require = createRequire(import.meta.url);
let lockfileModule: typeof lockfileType | undefined;
function lockfile(): typeof lockfileType {
  lockfileModule ??= require('proper-lockfile') as typeof lockfileType;
  return lockfileModule;
}

const writeAsync = promisify(write);
const fdatasyncAsync = promisify(fdatasync);
const closeAsync = promisify(closeCb);
const renameAsync = promisify(rename);

const KINDS: ReadonlySet<string> = new Set<GapKind>(['missing_tool', 'service_absent']);
const SOURCES: ReadonlySet<string> = new Set<GapSource>(['unknown_tool', 'forge_request', 'gateway']);
const MAX_SIGNATURE = 128;
const MAX_DESCRIPTION = 1_000;
const MAX_EXAMPLES = 5;
const MAX_EXAMPLE_BYTES = 4_096;
const MAX_IDENTITY = 64;
const MAX_ASKED = 256;
/** A sanitised record's line is far below this (5 × 4 KiB of examples + escaped text); longer lines are skipped unread. */
const MAX_LINE_BYTES = 64 * 1024;
const READ_CHUNK = 256 * 1024;
const FILE_NAME = 'gaps.jsonl';
const LOCK_NAME = 'gaps.lock';

/** Why the gap store refused or failed: `invalid_record` (sanitising), `unusable` (the directory or file), `closed`. */
export type GapStoreErrorCode = 'invalid_record' | 'unusable' | 'closed';

/** An error of the gap store; `code` is stable, `field` names the refused field for `invalid_record`. */
export class GapStoreError extends Error {
  readonly code: GapStoreErrorCode;
  readonly field?: string;
  constructor(code: GapStoreErrorCode, message: string, options?: { cause?: unknown; field?: string }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'GapStoreError';
    this.code = code;
    if (options?.field !== undefined) this.field = options.field;
  }
}

/** What sanitising a record gave: the record as it will be stored, or which field was refused and why. */
export type SanitizeResult = { ok: true; record: GapRecord } | { ok: false; kind: 'invalid_record'; field: string; message: string };

/** Cuts `s` to at most `max` UTF-16 units without splitting a surrogate pair. */
function cut(s: string, max: number): string {
  if (s.length <= max) return s;
  const code = s.charCodeAt(max - 1);
  return s.slice(0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max);
}

function refuse(field: string, why: string): SanitizeResult {
  return { ok: false, kind: 'invalid_record', field, message: `gap record: "${field}" ${why}` };
}

/**
 * Sanitises one observation into the record the store keeps (fields in a fixed order, unknown
 * fields dropped): `kind` and `source` must be known values; `signature` is trimmed and must then
 * be 1–128 characters; `at` a finite number ≥ 0; `persona` and `session` strings of at most 64
 * characters; `description` is cut to 1,000 characters and `asked` to 256; `example_inputs` keeps
 * at most 5 entries, dropping any that is not JSON or is over 4 KiB as JSON. Never throws.
 */
export function sanitizeGapRecord(input: unknown): SanitizeResult {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) return refuse('(record)', 'must be an object');
  const r = input as Record<string, unknown>;
  if (typeof r.kind !== 'string' || !KINDS.has(r.kind))
    return refuse('kind', `must be one of ${[...KINDS].join(', ')} (got ${JSON.stringify(r.kind)})`);
  if (typeof r.source !== 'string' || !SOURCES.has(r.source)) {
    return refuse('source', `must be one of ${[...SOURCES].join(', ')} (got ${JSON.stringify(r.source)})`);
  }
  if (typeof r.signature !== 'string') return refuse('signature', 'must be a string');
  const signature = r.signature.trim();
  if (signature.length < 1 || signature.length > MAX_SIGNATURE) {
    return refuse('signature', `must be 1–${MAX_SIGNATURE} characters once trimmed (got ${signature.length})`);
  }
  if (typeof r.at !== 'number' || !Number.isFinite(r.at) || r.at < 0)
    return refuse('at', 'must be a finite number of ms since the epoch, at least 0');
  for (const field of ['persona', 'session'] as const) {
    const v = r[field];
    if (typeof v !== 'string') return refuse(field, 'must be a string');
    if (v.length > MAX_IDENTITY) return refuse(field, `must be at most ${MAX_IDENTITY} characters (got ${v.length})`);
  }
  const record: GapRecord = {
    kind: r.kind as GapKind,
    signature,
    source: r.source as GapSource,
    at: r.at,
    persona: r.persona as string,
    session: r.session as string,
  };
  if (r.description !== undefined) {
    if (typeof r.description !== 'string') return refuse('description', 'must be a string when given');
    record.description = cut(r.description, MAX_DESCRIPTION);
  }
  if (r.example_inputs !== undefined) {
    if (!Array.isArray(r.example_inputs)) return refuse('example_inputs', 'must be an array when given');
    const kept: unknown[] = [];
    for (const example of r.example_inputs) {
      if (kept.length === MAX_EXAMPLES) break;
      let json: string | undefined;
      try {
        json = JSON.stringify(example);
      } catch {
        continue; // circular or BigInt: not JSON, dropped
      }
      if (json === undefined || Buffer.byteLength(json) > MAX_EXAMPLE_BYTES) continue;
      kept.push(JSON.parse(json));
    }
    record.example_inputs = kept;
  }
  if (r.asked !== undefined) {
    if (typeof r.asked !== 'string') return refuse('asked', 'must be a string when given');
    record.asked = cut(r.asked, MAX_ASKED);
  }
  return { ok: true, record };
}

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
  /** {@link summarizeGaps} over {@link records}, at once. */
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

/**
 * Recurrence per (kind, signature) over `records` (oldest first), as {@link GapStoreContract.summary}
 * specifies it; `now` is the window's end when `q.now` is not given. Every gap store answers with
 * this function, so that they agree to the order. Throws a RangeError for a threshold below 1 or a
 * negative window.
 */
export function summarizeGaps(records: readonly GapRecord[], q: GapQuery, now: number): GapSummary[] {
  const { threshold, windowMs, only } = q;
  if (!(threshold >= 1)) throw new RangeError(`summary: threshold must be at least 1 (got ${threshold})`);
  if (!(windowMs >= 0)) throw new RangeError(`summary: windowMs must be at least 0 (got ${windowMs})`);
  const at = q.now ?? now;
  const from = at - windowMs;
  const groups = new Map<string, GapSummary & { personaSet: Set<string>; sourceSet: Set<GapSource>; descriptionAt: number }>();
  for (const r of records) {
    if (only && (r.kind !== only.kind || r.signature !== only.signature)) continue;
    const key = `${r.kind}\u0000${r.signature}`;
    let g = groups.get(key);
    if (g === undefined) {
      g = {
        kind: r.kind,
        signature: r.signature,
        count: 0,
        total: 0,
        first_at: r.at,
        last_at: r.at,
        personas: [],
        sources: [],
        qualifies: false,
        personaSet: new Set(),
        sourceSet: new Set(),
        descriptionAt: -1,
      };
      groups.set(key, g);
    }
    g.total++;
    if (r.at >= from && r.at <= at) g.count++;
    g.first_at = Math.min(g.first_at, r.at);
    g.last_at = Math.max(g.last_at, r.at);
    if (r.description !== undefined && r.at >= g.descriptionAt) {
      g.description = r.description;
      g.descriptionAt = r.at;
    }
    g.personaSet.add(r.persona);
    g.sourceSet.add(r.source);
  }
  const out: GapSummary[] = [];
  for (const { personaSet, sourceSet, descriptionAt: _, ...g } of groups.values()) {
    out.push({ ...g, personas: [...personaSet].sort(), sources: [...sourceSet].sort(), qualifies: g.count >= threshold });
  }
  return out.sort(
    (a, b) =>
      Number(b.qualifies) - Number(a.qualifies) ||
      b.count - a.count ||
      b.last_at - a.last_at ||
      (a.kind + a.signature < b.kind + b.signature ? -1 : 1),
  );
}

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

interface Pending {
  line: string;
  resolve: () => void;
  reject: (err: Error) => void;
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
async function compact(file: string, dir: string, held: readonly GapRecord[], batch: readonly Pending[], max: number): Promise<void> {
  // A compaction killed before its rename left a temp file: under the lock, none is in progress.
  for (const name of await readdir(dir)) {
    if (name.startsWith(`.${FILE_NAME}.`) && name.endsWith('.tmp')) await rm(join(dir, name), { force: true });
  }
  const all = held.map((r) => `${JSON.stringify(r)}\n`).concat(batch.map((p) => p.line));
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
  let queue: Pending[] = [];
  let running: Promise<void> | undefined;
  let closed = false;

  const commit = async (batch: Pending[]): Promise<void> => {
    await ensureDir(dir, writer);
    let release: () => Promise<void>;
    try {
      release = await lockfile().lock(file, {
        realpath: false,
        lockfilePath: lockPath,
        stale: 10_000,
        retries: { retries: 400, factor: 1.3, minTimeout: 1, maxTimeout: 25, randomize: true },
        onCompromised: (err) =>
          onError(new GapStoreError('unusable', `gap store lock ${lockPath} was lost: ${err.message}`, { cause: err })),
      });
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
      if (view.lines + (torn ? 1 : 0) + batch.length > 2 * max) {
        await compact(file, dir, ordered(view), batch, max);
        return;
      }
      const data = Buffer.from((torn ? '\n' : '') + batch.map((p) => p.line).join(''));
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
      await release().catch((err: Error) => onError(unusable(lockPath, err)));
    }
  };

  const drain = async (): Promise<void> => {
    while (queue.length > 0) {
      const batch = queue;
      queue = [];
      try {
        await commit(batch);
        for (const p of batch) p.resolve();
      } catch (err) {
        writer.dirReady = false; // the directory may have gone: make it again next time
        for (const p of batch) p.reject(err as Error);
      }
    }
    running = undefined;
  };

  const record = (r: GapInput): Promise<void> => {
    if (closed) return Promise.reject(new GapStoreError('closed', `gap store ${file} is closed; open it again to record`));
    const s = sanitizeGapRecord({ ...r, at: r.at ?? clock() });
    if (!s.ok) return Promise.reject(new GapStoreError('invalid_record', `${s.message}; not recorded`, { field: s.field }));
    return new Promise<void>((resolve, reject) => {
      queue.push({ line: `${JSON.stringify(s.record)}\n`, resolve, reject });
      // Callers of the same tick share one batch: the drain starts after they have queued.
      running ??= Promise.resolve().then(drain);
    });
  };

  const records = (): readonly GapRecord[] => {
    view = syncView(view, file, max);
    return ordered(view);
  };

  return {
    file,
    record,
    note(r) {
      try {
        record(r).catch((err: Error) => onError(err));
      } catch (err) {
        onError(err as Error);
      }
    },
    records,
    summary(q) {
      // Checked before reading, as before: a bad query throws without touching the file.
      if (!(q.threshold >= 1)) throw new RangeError(`summary: threshold must be at least 1 (got ${q.threshold})`);
      if (!(q.windowMs >= 0)) throw new RangeError(`summary: windowMs must be at least 0 (got ${q.windowMs})`);
      return summarizeGaps(records(), q, q.now ?? clock());
    },
    history(kind, signature) {
      return records().filter((r) => r.kind === kind && r.signature === signature);
    },
    async flush() {
      while (running !== undefined) await running;
    },
    async close() {
      closed = true;
      while (running !== undefined) await running;
      if (view.fd !== undefined) closeSync(view.fd);
      view = emptyView();
      if (writer.fd !== undefined) closeSync(writer.fd);
      writer.fd = undefined;
    },
  };
}
