import type { ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { killLauncher } from './launcher.js';

/**
 * Killing a sandbox that no cgroup holds (an ordinary user's, on a host that delegates none).
 *
 * Killing the launcher's process group can miss part of the sandbox: bwrap's child (the sandbox's
 * init, pid 1 of its namespace) makes a session of its own, and when the kill lands while it is
 * being set up, it has lost its parent-death signal (the kernel clears it when a process changes
 * credentials, as bwrap's child does) and lives on, the tool's command under it. Seen here as an
 * ordinary user: about one kill in a hundred landing in a run's first 12 ms left `sleep 30`
 * running its 30 s. So the group is stopped first (SIGSTOP: bwrap can start nothing more), bwrap's
 * children are read and SIGKILLed (the sandbox's init: its whole pid namespace goes with it), and
 * only then is the group killed.
 */
export function killSandboxTree(child: ChildProcess): void {
  const pid = child.pid;
  if (pid && child.exitCode === null && child.signalCode === null) {
    try {
      process.kill(-pid, 'SIGSTOP');
    } catch {
      // no such group (yet, or any more)
    }
    for (const c of childrenOf(pid)) {
      try {
        process.kill(c, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
  }
  killLauncher(child);
}

/** The children of `pid`, from /proc (every task's list, else each process's parent). */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  try {
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      for (const c of readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').split(' ')) if (c.trim()) out.push(Number(c));
    }
    return out;
  } catch {
    // No children files on this kernel: every process's parent, from its stat.
  }
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const st = readFileSync(`/proc/${p}/stat`, 'utf8');
      if (Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]) === pid) out.push(Number(p));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}
