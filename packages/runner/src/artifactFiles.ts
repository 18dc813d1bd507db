import { closeSync, constants as fsc, fstatSync, lstatSync, openSync, readSync } from 'node:fs';

/**
 * Opening files inside a run's directory, which a tool shaped: every component is opened relative
 * to the descriptor of the one before (`/proc/self/fd/<dir>/<name>` with `O_NOFOLLOW`, as `openat`
 * does), so a symbolic link anywhere on the way (to `/etc/shadow`, to another run) is refused,
 * never followed, and the type of what was opened is taken from its descriptor.
 */

const O_DIR = fsc.O_RDONLY | fsc.O_DIRECTORY | fsc.O_NOFOLLOW;
// O_NONBLOCK: a FIFO left among the artifacts must not hang the reader; its type is checked next.
const O_FILE = fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK;

/** Why a path could not be opened: nothing there, a link, or something that is no file or directory. */
export type OpenProblem = { problem: 'missing' | 'symlink' | 'not_regular' | 'not_directory'; at: string };

/**
 * Opens the directory `root` (a trusted path: forge's own runs directory), then each of `dirs`
 * below it by descriptor. Returns the last descriptor (the caller closes it) or the problem, naming
 * the segments walked so far.
 */
export function openDirBeneath(root: string, dirs: readonly string[]): { fd: number } | OpenProblem {
  let fd: number;
  try {
    fd = openSync(root, fsc.O_RDONLY | fsc.O_DIRECTORY);
  } catch {
    return { problem: 'missing', at: '' };
  }
  for (let i = 0; i < dirs.length; i++) {
    const at = dirs.slice(0, i + 1).join('/');
    const name = `/proc/self/fd/${fd}/${dirs[i]}`;
    let next: number;
    try {
      next = openSync(name, O_DIR);
    } catch (err) {
      const p = classify(name, err);
      closeSync(fd);
      return { problem: p === 'not_regular' ? 'not_directory' : p, at };
    }
    closeSync(fd);
    fd = next;
  }
  return { fd };
}

/**
 * Opens regular file `name` in the directory held by `dirFd`. Returns its descriptor and size (the
 * caller closes it), or the problem.
 */
export function openFileAt(dirFd: number, name: string): { fd: number; size: number } | Omit<OpenProblem, 'at'> {
  const at = `/proc/self/fd/${dirFd}/${name}`;
  let fd: number;
  try {
    fd = openSync(at, O_FILE);
  } catch (err) {
    return { problem: classify(at, err) };
  }
  const st = fstatSync(fd);
  if (!st.isFile()) {
    closeSync(fd);
    return { problem: 'not_regular' };
  }
  return { fd, size: st.size };
}

/** What a failed open met: ELOOP is a link (O_NOFOLLOW); anything else is looked at without following. */
function classify(at: string, err: unknown): 'missing' | 'symlink' | 'not_regular' {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ELOOP') return 'symlink';
  try {
    const st = lstatSync(at);
    if (st.isSymbolicLink()) return 'symlink';
    return 'not_regular';
  } catch {
    return 'missing';
  }
}

/**
 * Opens `path` (already checked: relative, normalized) below `root/<dirs…>`, every component by
 * descriptor with `O_NOFOLLOW`, and returns its descriptor and size or the problem (with the
 * segments of `path` walked when it was met).
 */
export function openBeneath(root: string, dirs: readonly string[], path: string): { fd: number; size: number } | OpenProblem {
  const segs = path.split('/');
  const base = openDirBeneath(root, dirs);
  if ('problem' in base) return { problem: base.problem, at: '' };
  let dirFd = base.fd;
  try {
    for (let i = 0; i < segs.length - 1; i++) {
      const at = `/proc/self/fd/${dirFd}/${segs[i]}`;
      let next: number;
      try {
        next = openSync(at, O_DIR);
      } catch (err) {
        const p = classify(at, err);
        return { problem: p === 'not_regular' ? 'not_directory' : p, at: segs.slice(0, i + 1).join('/') };
      }
      closeSync(dirFd);
      dirFd = next;
    }
    const f = openFileAt(dirFd, segs.at(-1) as string);
    return 'problem' in f ? { problem: f.problem, at: path } : f;
  } finally {
    closeSync(dirFd);
  }
}

/** Reads at most `max` bytes of `fd` from its start (fewer when the file is shorter). */
export function readHead(fd: number, max: number): Buffer {
  const buf = Buffer.allocUnsafe(max);
  let off = 0;
  while (off < max) {
    const n = readSync(fd, buf, off, max - off, off);
    if (n === 0) break;
    off += n;
  }
  return buf.subarray(0, off);
}

/** Media types by extension (lower-cased). Anything else is `application/octet-stream`. */
const BY_EXTENSION: Record<string, string> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
  json: 'application/json',
  jsonl: 'application/jsonl',
  txt: 'text/plain',
  log: 'text/plain',
  md: 'text/markdown',
  csv: 'text/csv',
  tsv: 'text/tab-separated-values',
  pdf: 'application/pdf',
};

/** Whether `head` (the first bytes of a file) starts as an image of type `mime` does. */
function imageMagic(mime: string, head: Buffer): boolean {
  const starts = (...b: number[]) => b.every((x, i) => head[i] === x);
  switch (mime) {
    case 'image/png':
      return starts(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a);
    case 'image/jpeg':
      return starts(0xff, 0xd8, 0xff);
    case 'image/gif':
      return head.subarray(0, 6).toString('latin1') === 'GIF87a' || head.subarray(0, 6).toString('latin1') === 'GIF89a';
    case 'image/webp':
      return head.subarray(0, 4).toString('latin1') === 'RIFF' && head.subarray(8, 12).toString('latin1') === 'WEBP';
    default:
      return false;
  }
}

/** Bytes of a file's head that {@link mimeTypeOf} looks at. */
export const MIME_HEAD_BYTES = 16;

/**
 * The media type of an artifact: by its extension, except that an image type (png, jpeg, gif,
 * webp) is given only when the first bytes (`head`, at least {@link MIME_HEAD_BYTES}) agree; an
 * image claimed by its name alone is `application/octet-stream`. SVG and HTML are never served
 * as such (a client that renders them would run what a tool wrote): they are octet-stream too.
 */
export function mimeTypeOf(path: string, head: Buffer): string {
  const name = path.slice(path.lastIndexOf('/') + 1);
  const dot = name.lastIndexOf('.');
  const mime = dot > 0 ? BY_EXTENSION[name.slice(dot + 1).toLowerCase()] : undefined;
  if (!mime) return 'application/octet-stream';
  if (mime.startsWith('image/')) return imageMagic(mime, head) ? mime : 'application/octet-stream';
  return mime;
}
