import { lstatSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { isAlive } from './cgroup.js';
import type { SandboxIdentity } from './probe.js';

/**
 * Temporary directories of this package (the /etc shown, the staging directory): one of each per
 * process, named `forge-sandbox-<kind>-<pid>-XXXXXX` and removed at exit. A process that dies
 * without its exit handlers (SIGKILL, a test worker torn down) leaves its own behind; the next
 * process to make one of that kind removes those whose process is gone.
 */
const NAME = /^forge-sandbox-([a-z]+)-(\d+)-[A-Za-z0-9]{6}$/;

/**
 * Makes this process's directory of `kind` (0700), after sweeping those of dead processes. With
 * `reachableBy`, under a temporary directory that identity can search: the system's, else /tmp
 * or /dev/shm (a TMPDIR of root's own, 0700, is common), for what the sandbox's uid mounts.
 */
export function processTempDir(kind: string, reachableBy?: SandboxIdentity): string {
  sweepTempDirs(kind);
  const base = reachableBy ? [tmpdir(), '/tmp', '/dev/shm'].find((d) => reachable(join(d, 'x'), reachableBy)) : tmpdir();
  if (!base) throw new Error(`no temporary directory the sandbox's uid ${reachableBy?.uid} can search (${tmpdir()}, /tmp, /dev/shm)`);
  const dir = mkdtempSync(join(base, `forge-sandbox-${kind}-${process.pid}-`));
  removeAtExit(dir);
  return dir;
}

const atExit = new Set<string>();

/** One exit handler for all of them: an embedder that opens many engines gets no listener-leak warning. */
function removeAtExit(dir: string): void {
  if (atExit.size === 0) {
    process.once('exit', () => {
      for (const d of atExit) rmSync(d, { recursive: true, force: true });
    });
  }
  atExit.add(dir);
}

/**
 * Removes this user's `forge-sandbox-<kind>-<pid>-*` directories (every kind when `kind` is
 * undefined) whose process no longer exists, and those of the processes `doneWith` names (a test
 * runner's workers once every test has run: they are torn down later, without their exit
 * handlers). Never this process's own. Returns how many it removed.
 */
export function sweepTempDirs(kind?: string, doneWith: (pid: number) => boolean = () => false): number {
  let removed = 0;
  const uid = process.getuid?.();
  const gone = (pid: number) => doneWith(pid) || !isAlive(pid);
  for (const base of new Set([tmpdir(), '/tmp', '/dev/shm'])) removed += sweepIn(base, kind, uid, gone);
  return removed;
}

function sweepIn(base: string, kind: string | undefined, uid: number | undefined, gone: (pid: number) => boolean): number {
  let removed = 0;
  let names: string[];
  try {
    names = readdirSync(base);
  } catch {
    return 0;
  }
  for (const name of names) {
    const m = NAME.exec(name);
    if (!m || (kind !== undefined && m[1] !== kind)) continue;
    const pid = Number(m[2]);
    if (pid === process.pid || !gone(pid)) continue;
    const path = join(base, name);
    const st = lstatSync(path, { throwIfNoEntry: false });
    if (!st?.isDirectory() || st.uid !== uid) continue; // another user's, or not ours to judge
    rmSync(path, { recursive: true, force: true });
    removed++;
  }
  return removed;
}

/**
 * Whether `id` can reach `path` by name: search permission on every directory above it, from
 * their mode bits (this process may be root, for whom access() would say yes).
 */
export function reachable(path: string, id: SandboxIdentity): boolean {
  if (!path.startsWith('/')) return false; // (a relative source is refused later, as invalid_profile)
  for (let d = dirname(path); ; d = dirname(d)) {
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(d);
    } catch {
      return false;
    }
    const bits = st.uid === id.uid ? st.mode >> 6 : st.gid === id.gid ? st.mode >> 3 : st.mode;
    if ((bits & 1) === 0) return false;
    if (d === '/') return true;
  }
}
