import { randomBytes } from 'node:crypto';
import {
  closeSync,
  constants,
  fstatSync,
  fsync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFile,
  readFileSync,
  renameSync,
  rmdirSync,
  unlinkSync,
  write,
  writeSync,
} from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describeCause, QueueError } from './errors.js';

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_DIRECTORY } = constants;

// The metadata calls (open, lstat, mkdir, rename, link, unlink, rmdir) and reads of small files are
// synchronous: each takes microseconds, and a thread-pool round trip per call would cost more than
// the call. fsync, large reads and writes, and directory listings go to the thread pool.
const fsyncAsync = promisify(fsync);
const readFd = promisify(readFile) as (fd: number, encoding: 'utf8') => Promise<string>;
const writeFd = promisify(write) as (fd: number, data: Buffer | string) => Promise<unknown>;
const SMALL = 256 * 1024;

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
  let fd: number;
  try {
    fd = openSync(path, O_RDONLY | O_DIRECTORY);
  } catch (err) {
    if (errno(err) === 'ENOENT') return; // removed meanwhile: nothing left in it to make durable
    throw ioError('syncing directory', path, err);
  }
  try {
    await fsyncAsync(fd);
  } catch (err) {
    throw ioError('syncing directory', path, err);
  } finally {
    closeSync(fd);
  }
}

/** fsyncs several directories at once (concurrent fsyncs share a journal commit on ext4 and xfs). */
export async function syncDirs(...paths: string[]): Promise<void> {
  await Promise.all(paths.map(syncDir));
}

/** Creates a new file (never following or replacing anything), writes it and fsyncs it. */
export async function writeNew(path: string, data: Buffer | string): Promise<void> {
  const fd = openSync(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, FILE_MODE);
  try {
    const bytes = typeof data === 'string' ? Buffer.from(data) : data;
    if (bytes.length <= SMALL) {
      for (let off = 0; off < bytes.length; ) off += writeSync(fd, bytes, off);
    } else await writeFd(fd, bytes);
    await fsyncAsync(fd);
  } finally {
    closeSync(fd);
  }
}

/** What reading a request, lease or result file found. */
export type ReadOutcome = { kind: 'file'; text: string; mtimeMs: number } | { kind: 'missing' } | { kind: 'not_regular'; what: string };

/** Reads a regular file without following a symlink or blocking on a FIFO; anything else is reported, not read. */
export async function readRegular(path: string, maxBytes: number): Promise<ReadOutcome> {
  let fd: number;
  try {
    fd = openSync(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  } catch (err) {
    const code = errno(err);
    if (code === 'ENOENT' || code === 'ENOTDIR') return { kind: 'missing' };
    if (code === 'ELOOP') return { kind: 'not_regular', what: 'a symlink' };
    if (code === 'ENXIO') return { kind: 'not_regular', what: 'a socket or FIFO' };
    throw ioError('opening', path, err);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return { kind: 'not_regular', what: st.isDirectory() ? 'a directory' : 'not a regular file' };
    if (st.size > maxBytes) return { kind: 'not_regular', what: `a file of ${st.size} bytes (over the cap)` };
    const text = st.size <= SMALL ? readFileSync(fd, 'utf8') : await readFd(fd, 'utf8');
    return { kind: 'file', text, mtimeMs: st.mtimeMs };
  } catch (err) {
    if (errno(err) === 'EISDIR') return { kind: 'not_regular', what: 'a directory' };
    throw ioError('reading', path, err);
  } finally {
    closeSync(fd);
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
    const st = lstatSync(path);
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
    return lstatSync(path).mtimeMs;
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
    renameSync(from, to);
    return true;
  } catch (err) {
    if (errno(err) === 'ENOENT') return false;
    throw ioError(`renaming ${from} to`, to, err);
  }
}

/** mkdir that reports an existing directory as false (the exclusive arbitration of a claim). */
export async function mkdirExclusive(path: string): Promise<boolean> {
  try {
    mkdirSync(path, { mode: DIR_MODE });
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
      unlinkSync(join(dir, n));
    } catch (err) {
      const code = errno(err);
      if (code !== 'ENOENT') throw ioError('removing', join(dir, n), err);
    }
  }
}

/** Removes a directory that should be empty: false when it is not empty or already gone. */
export async function removeDir(path: string): Promise<boolean> {
  try {
    rmdirSync(path);
    return true;
  } catch (err) {
    const code = errno(err);
    if (code === 'ENOENT' || code === 'ENOTEMPTY' || code === 'EEXIST') return false;
    throw ioError('removing directory', path, err);
  }
}

/** link(2), synchronously (see the note at the top). */
export function linkFile(from: string, to: string): void {
  linkSync(from, to);
}

/** unlink(2), synchronously; throws like unlink. */
export function unlinkFile(path: string): void {
  unlinkSync(path);
}

/** unlink that ignores every failure (a temporary that may already be gone). */
export function unlinkQuiet(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone, or never made: nothing to clean
  }
}

/** rename(2), synchronously; throws like rename. */
export function renameFile(from: string, to: string): void {
  renameSync(from, to);
}
