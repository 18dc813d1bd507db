import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { type FileHandle, link, lstat, mkdir, open, readdir, rename, rmdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { describeCause, QueueError } from './errors.js';

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_DIRECTORY } = constants;

/** Mode of every directory and file the queue creates. */
export const DIR_MODE = 0o700;
export const FILE_MODE = 0o600;

/** The errno code of a failure, if it has one. */
export function errno(err: unknown): string | undefined {
  return err && typeof err === 'object' && 'code' in err ? String((err as { code: unknown }).code) : undefined;
}

/** Wraps an unexpected file failure as `io_error`, naming the path. */
export function ioError(what: string, path: string, err: unknown): QueueError {
  if (err instanceof QueueError) return err;
  return new QueueError(
    'io_error',
    `${what} ${path} failed: ${describeCause(err)}; check the disk and the permissions of the queue directory`,
    { cause: err },
  );
}

/** A fresh temporary name (never a job name: it starts with a dot). */
export function tempName(tag: string): string {
  return `.tmp-${tag}-${process.pid}-${randomBytes(6).toString('hex')}`;
}

/** fsyncs a directory so that a rename, link or removal in it is durable. */
export async function syncDir(path: string): Promise<void> {
  let fh: FileHandle | undefined;
  try {
    fh = await open(path, O_RDONLY | O_DIRECTORY);
    await fh.sync();
  } catch (err) {
    if (errno(err) === 'ENOENT') return; // removed meanwhile: nothing left in it to make durable
    throw ioError('syncing directory', path, err);
  } finally {
    await fh?.close();
  }
}

/** fsyncs several directories at once (concurrent fsyncs share a journal commit on ext4 and xfs). */
export async function syncDirs(...paths: string[]): Promise<void> {
  await Promise.all(paths.map(syncDir));
}

/** Creates a new file (never following or replacing anything), writes it and fsyncs it. */
export async function writeNew(path: string, data: Buffer | string): Promise<void> {
  const fh = await open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, FILE_MODE);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * Moves `from` to `to` without replacing anything (link, then unlink of `from`): false when `to`
 * exists. `from` must be a temporary of ours.
 */
export async function moveNoReplace(from: string, to: string): Promise<boolean> {
  try {
    await link(from, to);
  } catch (err) {
    if (errno(err) === 'EEXIST') {
      await unlink(from).catch(() => undefined);
      return false;
    }
    throw err;
  }
  await unlink(from);
  return true;
}

/** What reading a request, lease or result file found. */
export type ReadOutcome = { kind: 'file'; text: string; mtimeMs: number } | { kind: 'missing' } | { kind: 'not_regular'; what: string };

/** Reads a regular file without following a symlink or blocking on a FIFO; anything else is reported, not read. */
export async function readRegular(path: string, maxBytes: number): Promise<ReadOutcome> {
  let fh: FileHandle;
  try {
    fh = await open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  } catch (err) {
    const code = errno(err);
    if (code === 'ENOENT' || code === 'ENOTDIR') return { kind: 'missing' };
    if (code === 'ELOOP') return { kind: 'not_regular', what: 'a symlink' };
    if (code === 'ENXIO') return { kind: 'not_regular', what: 'a socket or FIFO' };
    throw ioError('opening', path, err);
  }
  try {
    const st = await fh.stat();
    if (!st.isFile()) return { kind: 'not_regular', what: st.isDirectory() ? 'a directory' : 'not a regular file' };
    if (st.size > maxBytes) return { kind: 'not_regular', what: `a file of ${st.size} bytes (over the cap)` };
    const text = await fh.readFile('utf8');
    return { kind: 'file', text, mtimeMs: st.mtimeMs };
  } catch (err) {
    if (errno(err) === 'EISDIR') return { kind: 'not_regular', what: 'a directory' };
    throw ioError('reading', path, err);
  } finally {
    await fh.close();
  }
}

/** Parses JSON, or undefined when it is not (a torn or foreign file). */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** lstat kind of a path: 'file', 'dir', 'other' (symlink, FIFO, ...) or 'missing'. Never follows a symlink. */
export async function kindOf(path: string): Promise<'file' | 'dir' | 'other' | 'missing'> {
  try {
    const st = await lstat(path);
    return st.isFile() ? 'file' : st.isDirectory() ? 'dir' : 'other';
  } catch (err) {
    const code = errno(err);
    if (code === 'ENOENT' || code === 'ENOTDIR') return 'missing';
    throw ioError('inspecting', path, err);
  }
}

/** mtime of a path (ms), or undefined when it is missing. */
export async function mtimeOf(path: string): Promise<number | undefined> {
  try {
    return (await lstat(path)).mtimeMs;
  } catch (err) {
    if (errno(err) === 'ENOENT') return undefined;
    throw ioError('inspecting', path, err);
  }
}

/** Directory entries, or [] when the directory is gone. */
export async function list(path: string): Promise<string[]> {
  try {
    return await readdir(path);
  } catch (err) {
    const code = errno(err);
    if (code === 'ENOENT' || code === 'ENOTDIR') return [];
    throw ioError('listing', path, err);
  }
}

/** rename that reports a missing source as false (someone else moved it first) instead of throwing. */
export async function renameIfThere(from: string, to: string): Promise<boolean> {
  try {
    await rename(from, to);
    return true;
  } catch (err) {
    if (errno(err) === 'ENOENT') return false;
    throw ioError(`renaming ${from} to`, to, err);
  }
}

/** mkdir that reports an existing directory as false (the exclusive arbitration of a claim). */
export async function mkdirExclusive(path: string): Promise<boolean> {
  try {
    await mkdir(path, { mode: DIR_MODE });
    return true;
  } catch (err) {
    if (errno(err) === 'EEXIST') return false;
    throw ioError('creating directory', path, err);
  }
}

/** Removes files (a missing one is fine). */
export async function removeFiles(dir: string, names: string[]): Promise<void> {
  for (const n of names) {
    try {
      await unlink(join(dir, n));
    } catch (err) {
      const code = errno(err);
      if (code !== 'ENOENT') throw ioError('removing', join(dir, n), err);
    }
  }
}

/** Removes a directory that should be empty: false when it is not empty or already gone. */
export async function removeDir(path: string): Promise<boolean> {
  try {
    await rmdir(path);
    return true;
  } catch (err) {
    const code = errno(err);
    if (code === 'ENOENT' || code === 'ENOTEMPTY' || code === 'EEXIST') return false;
    throw ioError('removing directory', path, err);
  }
}
