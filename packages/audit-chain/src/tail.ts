import { type FSWatcher, watch } from 'node:fs';
import { type FileHandle, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { AuditError } from './errors.js';
import { type AuditEntry, checkLine, GENESIS_HASH } from './format.js';
import { scanLines } from './lines.js';
import { openRegular } from './regular-file.js';
import { listSealedSegments, logFiles, segmentName } from './segments.js';

export interface TailOptions {
  /** Start with the last `last` entries instead of the first entry (like `tail -n`). */
  last?: number;
  /** Keep waiting for new entries (from any process) until `signal` aborts. */
  follow?: boolean;
  /** Stops a follow (the iterator then ends normally). */
  signal?: AbortSignal;
  /** Poll interval in follow mode, as a fallback where file-change events do not arrive (ms, default 250). */
  pollMs?: number;
}

const RANGE_BYTES = 4 << 20;

/**
 * Iterates over complete, verified entries of the log at `path`, oldest first: every line's hash
 * is checked and every entry must link to the one before it, so a half-written or altered line is
 * never delivered. With `follow`, waits for entries appended later by any process, across
 * rotations, until `signal` aborts. Throws `log_corrupt` when an entry fails its checks (run
 * {@link verifyLog} for the full verdict) and `io_error` when the log cannot be read.
 *
 * When `last` is given, the first entry delivered is checked against the entry just before it;
 * the history before that is not re-verified (that is what `verifyLog` is for).
 */
export async function* tailLog(path: string, options: TailOptions = {}): AsyncGenerator<AuditEntry> {
  const files = logFiles(path);
  const { signal } = options;
  const pollMs = options.pollMs ?? 250;

  // Where to start: a list of segment files to read, oldest first, and the first one's offset.
  const sealed = await listSealedSegments(files).catch((err: unknown) => {
    throw new AuditError('io_error', `cannot read the directory of ${path}: ${(err as Error).message}`, { cause: err });
  });
  const paths = [...sealed.map((s) => s.path), path];
  let startIdx = 0;
  let startOffset = 0;
  let skip = 0; // entries to read but not deliver (the anchor line before the first wanted one)
  if (options.last !== undefined) {
    let want = options.last + 1; // one extra line anchors the link check
    startIdx = paths.length - 1;
    for (let i = paths.length - 1; i >= 0; i--) {
      startIdx = i;
      const found = await lastLinesStart(paths[i] as string, want);
      startOffset = found.offset;
      want -= found.lines;
      if (want <= 0) break;
    }
    skip = want <= 0 ? 1 : 0;
  }

  let seq = 0; // 0: take the first entry's own seq and prev as the starting point
  let prev = GENESIS_HASH;
  if (startIdx === 0 && startOffset === 0) seq = 1;

  const check = (raw: Buffer): AuditEntry => {
    const c = checkLine(raw);
    if (!c.ok) throw new AuditError('log_corrupt', `${path}: entry after ${seq - 1}: ${c.message}; run "forge-audit verify ${path}"`);
    const e = c.entry;
    if (seq !== 0 && (e.seq !== seq || e.prev !== prev)) {
      throw new AuditError(
        'log_corrupt',
        `${path}: entry ${e.seq} does not follow entry ${seq - 1} (${e.seq !== seq ? 'sequence gap' : 'broken link'}); run "forge-audit verify ${path}"`,
      );
    }
    seq = e.seq + 1;
    prev = e.hash;
    return e;
  };

  // Reads complete lines of `fh` from `pos`, yielding verified entries; returns the new position.
  async function* drain(fh: FileHandle, from: number): AsyncGenerator<AuditEntry, number> {
    let pos = from;
    for (;;) {
      const size = (await fh.stat()).size;
      if (size < pos) throw new AuditError('log_corrupt', `${path} shrank below offset ${pos} while being read: it was truncated`);
      if (size === pos) return pos;
      const batch: AuditEntry[] = [];
      const end = Math.min(size, pos + RANGE_BYTES);
      const next = await scanLines(fh, pos, end, (raw) => {
        if (raw.torn) return false; // incomplete: wait for the rest
        batch.push(check(raw.bytes));
        return true;
      });
      for (const e of batch) {
        if (skip > 0) skip--;
        else yield e;
      }
      if (next === pos) return pos; // only an incomplete line remains
      pos = next;
    }
  }

  // Segment numbers: sealed ones as listed, the active one after the last sealed.
  let curN = startIdx < sealed.length ? (sealed[startIdx] as { n: number }).n : (sealed.at(-1)?.n ?? 0) + 1;
  let pos = startOffset;

  /** Opens segment `n`: sealed as `L.<n>` if it is, else the active `L` (checked not to be a later one). */
  const openSegment = async (n: number): Promise<FileHandle | undefined> => {
    const sealedPath = join(files.dir, segmentName(files.base, n));
    const fh = (await tryOpen(sealedPath)) ?? (await tryOpen(path));
    if (!fh) return undefined;
    // A rotation between the two opens makes `L` a later segment: then read `L.<n>` instead.
    const sealedNow = await stat(sealedPath).catch(() => undefined);
    const mine = await fh.stat();
    if (sealedNow && (sealedNow.ino !== mine.ino || sealedNow.dev !== mine.dev)) {
      await fh.close();
      return tryOpen(sealedPath);
    }
    return fh;
  };
  /** Whether the file behind `fh` is no longer the active segment (it was sealed by a rotation). */
  const isSealed = async (fh: FileHandle): Promise<boolean> => {
    const now = await stat(path).catch(() => undefined);
    const mine = await fh.stat();
    return !now || now.ino !== mine.ino || now.dev !== mine.dev;
  };

  let watcher: FSWatcher | undefined;
  let wake: (() => void) | undefined;
  const poke = () => {
    wake?.();
  };
  if (options.follow) {
    try {
      watcher = watch(files.dir, { persistent: false }, poke);
      watcher.on('error', () => {});
    } catch {
      // No change events here (some network filesystems): polling alone will do.
    }
    signal?.addEventListener('abort', poke);
  }
  let fh = await openSegment(curN);
  try {
    for (;;) {
      if (signal?.aborted) return;
      fh ??= await openSegment(curN);
      if (fh) {
        pos = yield* drain(fh, pos);
        if (await isSealed(fh)) {
          // Sealed files no longer grow: finish this one, then go straight on to the next.
          pos = yield* drain(fh, pos);
          await fh.close();
          fh = undefined;
          curN++;
          pos = 0;
          continue;
        }
      }
      if (!options.follow) return;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, pollMs);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
    }
  } finally {
    watcher?.close();
    signal?.removeEventListener('abort', poke);
    await fh?.close();
  }
}

async function tryOpen(file: string): Promise<FileHandle | undefined> {
  try {
    return await openRegular(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new AuditError('io_error', `cannot read ${file}: ${(err as Error).message}`, { cause: err });
  }
}

/** Offset where the last `n` complete lines of a file start, and how many lines were found. */
async function lastLinesStart(file: string, n: number): Promise<{ offset: number; lines: number }> {
  let fh: FileHandle;
  try {
    fh = await openRegular(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { offset: 0, lines: 0 };
    throw new AuditError('io_error', `cannot read ${file}: ${(err as Error).message}`, { cause: err });
  }
  try {
    const size = (await fh.stat()).size;
    const chunk = Buffer.allocUnsafe(64 * 1024);
    let pos = size;
    let found = 0;
    let end = size; // skip a torn last line: it does not count
    let first = true;
    while (pos > 0) {
      const len = Math.min(chunk.length, pos);
      pos -= len;
      await fh.read(chunk, 0, len, pos);
      for (let i = len - 1; i >= 0; i--) {
        if (chunk[i] !== 0x0a) continue;
        const at = pos + i;
        if (first) {
          first = false;
          end = at + 1;
          continue; // the newline that ends the last complete line
        }
        found++;
        if (found === n) return { offset: at + 1, lines: found };
      }
      if (first && pos === 0) return { offset: 0, lines: 0 };
    }
    // Reached the start of the file: the first line counts too (when there is a complete one).
    if (end > 0 && !first) found++;
    return { offset: 0, lines: Math.min(found, n) };
  } finally {
    await fh.close();
  }
}
