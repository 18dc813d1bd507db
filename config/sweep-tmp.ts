import { readdirSync, readFileSync } from 'node:fs';
import { sweepTempDirs } from '../packages/sandbox/src/tmp.js';

/**
 * vitest global setup for every package: once every test has run, remove the per-process
 * temporary directories of @forge/sandbox that the test workers made (a worker is torn down
 * without its exit handlers, and only after this teardown), and those any earlier dead process
 * left, so a test run leaves nothing in /tmp.
 */
export default function setup(): () => void {
  return () => {
    const workers = childrenOf(process.pid);
    sweepTempDirs(undefined, (pid) => workers.has(pid));
  };
}

/** The processes whose parent is `parent` (vitest's workers, forks or threads' host). */
function childrenOf(parent: number): Set<number> {
  const kids = new Set<number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      // The fields after the command name's closing parenthesis: state, then the parent's pid.
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1] === String(parent)) kids.add(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return kids;
}
