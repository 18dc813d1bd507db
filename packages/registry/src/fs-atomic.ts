import { randomBytes } from 'node:crypto';
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { link, mkdir, open, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';

/** Tool files are readable and writable by their owner only. */
export const FILE_MODE = 0o600;
/** Scope directories (and their bookkeeping directories) are the owner's only. */
export const DIR_MODE = 0o700;

/** Creates `dir` and missing parents with mode 0700. */
export async function ensureDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: DIR_MODE });
}

/**
 * Writes `data` to a new temporary file in `dir` (name starting with `.tmp-`, mode 0600) and
 * fsyncs it, so that a following link or rename publishes complete bytes.
 */
export async function writeTemp(dir: string, data: string): Promise<string> {
  const path = join(dir, `.tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
  const fh = await open(path, 'wx', FILE_MODE);
  try {
    // The umask cannot add bits, but a file system with odd defaults could: set it explicitly.
    await fh.chmod(FILE_MODE);
    await fh.writeFile(data);
    await fh.sync();
  } catch (err) {
    await unlink(path).catch(() => {});
    throw err;
  } finally {
    await fh.close();
  }
  return path;
}

/** fsyncs a directory so that a link, rename or unlink in it survives a crash. */
export async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * Publishes `tmp` as `dest` only if `dest` does not exist (link(2) fails with EEXIST, it never
 * replaces), then removes `tmp`. Returns false when `dest` exists.
 */
export async function linkNew(tmp: string, dest: string): Promise<boolean> {
  try {
    await link(tmp, dest);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  } finally {
    await unlink(tmp).catch(() => {});
  }
  return true;
}

/** Publishes `tmp` as `dest`, atomically replacing what was there. */
export async function replaceWith(tmp: string, dest: string): Promise<void> {
  try {
    await rename(tmp, dest);
  } catch (err) {
    await unlink(tmp).catch(() => {});
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
