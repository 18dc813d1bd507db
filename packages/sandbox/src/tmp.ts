import { lstatSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * Temporary directories of this package (the /etc shown, the staging directory): one of each per
 * process, named `forge-sandbox-<kind>-<pid>-XXXXXX` and removed at exit. A process that dies
 * without its exit handlers (SIGKILL, a test worker torn down) leaves its own behind; the next
 * process to make one of that kind removes those whose process is gone.
 */
const NAME = /^forge-sandbox-([a-z]+)-(\d+)-[A-Za-z0-9]{6}$/;

/** Makes this process's directory of `kind` (0700), after sweeping those of dead processes. */
export function processTempDir(kind: string): string {
  sweepTempDirs(kind);
  const dir = mkdtempSync(join(tmpdir(), `forge-sandbox-${kind}-${process.pid}-`));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * Removes this user's `forge-sandbox-<kind>-<pid>-*` directories (every kind when `kind` is
 * undefined) whose process no longer exists. Returns how many it removed.
 */
export function sweepTempDirs(kind?: string): number {
  let removed = 0;
  let names: string[];
  try {
    names = readdirSync(tmpdir());
  } catch {
    return 0;
  }
  const uid = process.getuid?.();
  for (const name of names) {
    const m = NAME.exec(name);
    if (!m || (kind !== undefined && m[1] !== kind)) continue;
    const pid = Number(m[2]);
    if (pid === process.pid || alive(pid)) continue;
    const path = join(tmpdir(), name);
    const st = lstatSync(path, { throwIfNoEntry: false });
    if (!st?.isDirectory() || st.uid !== uid) continue; // another user's, or not ours to judge
    rmSync(path, { recursive: true, force: true });
    removed++;
  }
  return removed;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
