import { randomBytes } from 'node:crypto';
import {
  closeSync,
  fchmodSync,
  fstatSync,
  fsyncSync,
  linkSync,
  mkdirSync,
  openSync,
  readSync,
  renameSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';

/** Tool files are readable and writable by their owner only. */
export const FILE_MODE = 0o600;
/** Scope directories (and their bookkeeping directories) are the owner's only. */
export const DIR_MODE = 0o700;

// The writes below use the synchronous calls on purpose: a write is a handful of short system
// calls, and going through the thread pool for each cost more than the calls themselves (a
// forge took twice as long). They still return promises, so callers need not care.

/** Creates `dir` and missing parents with mode 0700. */
export async function ensureDir(dir: string): Promise<void> {
  mkdirSync(dir, { recursive: true, mode: DIR_MODE });
}

/**
 * Writes `data` to a new temporary file in `dir` (name starting with `.tmp-`, mode 0600) and
 * fsyncs it, so that a following link or rename publishes complete bytes.
 */
export async function writeTemp(dir: string, data: string): Promise<string> {
  const path = join(dir, `.tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
  const fd = openSync(path, 'wx', FILE_MODE);
  try {
    // The umask cannot add bits, but a file system with odd defaults could: set it explicitly.
    fchmodSync(fd, FILE_MODE);
    writeFileSync(fd, data);
    fsyncSync(fd);
  } catch (err) {
    try {
      unlinkSync(path);
    } catch {
      // already gone
    }
    throw err;
  } finally {
    closeSync(fd);
  }
  return path;
}

/** fsyncs a directory so that a link, rename or unlink in it survives a crash. */
export async function syncDir(dir: string): Promise<void> {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Publishes `tmp` as `dest` only if `dest` does not exist (link(2) fails with EEXIST, it never
 * replaces), then removes `tmp`. Returns false when `dest` exists.
 */
export async function linkNew(tmp: string, dest: string): Promise<boolean> {
  try {
    linkSync(tmp, dest);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  } finally {
    try {
      unlinkSync(tmp);
    } catch {
      // already gone
    }
  }
  return true;
}

/** Publishes `tmp` as `dest`, atomically replacing what was there. */
export async function replaceWith(tmp: string, dest: string): Promise<void> {
  try {
    renameSync(tmp, dest);
  } catch (err) {
    try {
      unlinkSync(tmp);
    } catch {
      // already gone
    }
    throw err;
  }
}

const readBuffer = Buffer.allocUnsafe(64 * 1024);

/** Tool files larger than this are refused when read (a spec's impl is at most 1 MiB). */
export const MAX_TOOL_FILE_BYTES = 8 * 1024 * 1024;

/**
 * Reads a whole file as UTF-8, synchronously, through one reused 64 KiB buffer: for thousands of
 * small files this skips readFileSync's fstat and per-file allocation. Larger files are read
 * whole, up to `MAX_TOOL_FILE_BYTES` (beyond it: a RangeError). Not reentrant; it never yields.
 */
export function readTextSync(path: string): string {
  const fd = openSync(path, 'r');
  try {
    let n = 0;
    while (n < readBuffer.length) {
      const got = readSync(fd, readBuffer, n, readBuffer.length - n, null);
      if (got === 0) return readBuffer.toString('utf8', 0, n);
      n += got;
    }
    const size = fstatSync(fd).size;
    if (size > MAX_TOOL_FILE_BYTES) throw new RangeError(`the file is ${size} bytes; a tool file is at most ${MAX_TOOL_FILE_BYTES}`);
    const whole = Buffer.allocUnsafe(size + 1);
    readBuffer.copy(whole, 0, 0, n);
    for (;;) {
      if (n === whole.length) throw new RangeError(`the file grew while being read; a tool file is at most ${MAX_TOOL_FILE_BYTES} bytes`);
      const got = readSync(fd, whole, n, whole.length - n, null);
      if (got === 0) return whole.toString('utf8', 0, n);
      n += got;
    }
  } finally {
    closeSync(fd);
  }
}
