import {
  chmodSync,
  closeSync,
  constants as fsc,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readlinkSync,
  readSync,
  statfsSync,
  symlinkSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';

/**
 * Copying a run's output directory out of its sandbox. Inside, the directory is a tmpfs of the
 * run's size (so the host's disk never holds more than that); when the tool is done, the host
 * reads it through `/proc/<pid>/root` of a process that is still in the sandbox's mount namespace.
 *
 * What is read there was shaped by the tool, and a process of the tool may still be running (an
 * orphan, or the tool itself when a limit ends the run), so nothing is ever resolved by a path the
 * tool could redirect: each entry is opened relative to the descriptor of its directory
 * (`/proc/self/fd/<dir>/<name>` with `O_NOFOLLOW`), its type is taken from the opened descriptor,
 * and a symbolic link is copied as a link, never followed. A link resolved by the host through
 * `/proc/<pid>/root` would point into the host's own tree.
 */

/** What {@link copyOut} copied. */
export interface CopiedOutput {
  /** Regular files written (possibly cut, see `truncated`). */
  files: number;
  directories: number;
  symlinks: number;
  bytes: number;
  /** Entries that are neither a file, a directory nor a link (FIFOs, sockets), or past the limits: not copied. */
  skipped: number;
  /** True when a limit (bytes, entries, depth) cut the copy short. */
  truncated: boolean;
  /** True when the tmpfs was full: the tool met ENOSPC (its output hit `outputDirBytes`). */
  full: boolean;
}

export interface CopyLimits {
  /** Bytes copied in all (the tmpfs's size bounds it anyway). */
  bytes: number;
  /** Entries copied in all: a tmpfs of a few MiB can hold hundreds of thousands of empty files. */
  entries: number;
  /** Directory depth. */
  depth: number;
}

export const COPY_LIMITS: Readonly<CopyLimits> = { bytes: 2 ** 40, entries: 10_000, depth: 32 };

const O_PATH_DIR = fsc.O_RDONLY | fsc.O_DIRECTORY | fsc.O_NOFOLLOW;
const READ = fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK;
/** O_PATH (Linux): a descriptor of the inode itself, which needs no permission on it. */
const O_PATH = 0o10000000;

/**
 * A file the tool made unreadable (mode 0): root reads it anyway, an ordinary user (whose uid the
 * sandbox's maps to, so it owns the file) gives itself read permission first. Through a descriptor
 * of the inode checked to be a regular file, never by the name the tool could swap; the inode is
 * in the run's own tmpfs, which is thrown away after the copy.
 */
function openUnreadable(at: string): number | undefined {
  let p: number;
  try {
    p = openSync(at, O_PATH | fsc.O_NOFOLLOW);
  } catch {
    return undefined;
  }
  try {
    const st = fstatSync(p);
    if (!st.isFile() || st.uid !== process.getuid?.()) return undefined;
    chmodSync(`/proc/self/fd/${p}`, (st.mode & 0o7777) | 0o400);
    // Reopened through the descriptor's own link (O_NOFOLLOW would refuse that link itself).
    return openSync(`/proc/self/fd/${p}`, fsc.O_RDONLY | fsc.O_NONBLOCK);
  } catch {
    return undefined;
  } finally {
    closeSync(p);
  }
}
const CHUNK = 1 << 16;

/**
 * Copies the directory at `source` (a path through `/proc/<pid>/root`) into `dest`, an existing
 * empty host directory, as this process's user: files 0600, directories 0700, links as links.
 * Returns undefined when `source` cannot be opened; throws when `dest` cannot be written.
 */
export function copyOut(source: string, dest: string, limits: CopyLimits = COPY_LIMITS): CopiedOutput | undefined {
  const out: CopiedOutput = { files: 0, directories: 0, symlinks: 0, bytes: 0, skipped: 0, truncated: false, full: false };
  let root: number;
  try {
    root = openSync(source, O_PATH_DIR);
  } catch {
    return undefined; // the sandbox is gone, or not set up yet
  }
  try {
    try {
      const st = statfsSync(`/proc/self/fd/${root}`);
      // A tmpfs has no reserved blocks: free 0 means the tool's last write met ENOSPC.
      out.full = st.bfree === 0 || st.bavail === 0;
    } catch {
      // not knowable: left false
    }
    walk(root, dest, 0, out, limits);
  } finally {
    closeSync(root);
  }
  return out;
}

function walk(dirFd: number, dest: string, depth: number, out: CopiedOutput, limits: CopyLimits): void {
  const here = `/proc/self/fd/${dirFd}`;
  let names: string[];
  try {
    names = readdirSync(here);
  } catch {
    out.skipped++;
    return;
  }
  for (const name of names) {
    if (out.files + out.directories + out.symlinks >= limits.entries) {
      out.truncated = true;
      return;
    }
    const at = `${here}/${name}`;
    const to = join(dest, name);
    let st: ReturnType<typeof lstatSync>;
    try {
      st = lstatSync(at);
    } catch {
      continue; // gone meanwhile
    }
    if (st.isSymbolicLink()) {
      try {
        symlinkSync(readlinkSync(at), to);
        out.symlinks++;
      } catch {
        out.skipped++;
      }
    } else if (st.isDirectory()) {
      if (depth + 1 >= limits.depth) {
        out.truncated = true;
        continue;
      }
      let fd: number;
      try {
        fd = openSync(at, O_PATH_DIR);
      } catch {
        out.skipped++; // replaced by a link or a file since the lstat
        continue;
      }
      try {
        mkdirSync(to, { mode: 0o700 });
        out.directories++;
        walk(fd, to, depth + 1, out, limits);
      } finally {
        closeSync(fd);
      }
    } else if (st.isFile()) {
      copyFile(at, to, out, limits);
    } else {
      out.skipped++;
    }
  }
}

function copyFile(at: string, to: string, out: CopiedOutput, limits: CopyLimits): void {
  let fd: number;
  try {
    // O_NONBLOCK: a FIFO swapped in since the lstat must not hang the host; its type is checked next.
    fd = openSync(at, READ);
  } catch (err) {
    const opened = (err as NodeJS.ErrnoException).code === 'EACCES' ? openUnreadable(at) : undefined;
    if (opened === undefined) {
      out.skipped++;
      return;
    }
    fd = opened;
  }
  try {
    if (!fstatSync(fd).isFile()) {
      out.skipped++;
      return;
    }
    const w = openSync(to, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o600);
    try {
      out.files++;
      const buf = Buffer.allocUnsafe(CHUNK);
      for (;;) {
        const room = limits.bytes - out.bytes;
        if (room <= 0) {
          out.truncated = true;
          return;
        }
        const n = readSync(fd, buf, 0, Math.min(CHUNK, room), null);
        if (n === 0) return;
        let off = 0;
        while (off < n) off += writeSync(w, buf, off, n - off);
        out.bytes += n;
      }
    } finally {
      closeSync(w);
    }
  } finally {
    closeSync(fd);
  }
}
