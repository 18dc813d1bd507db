import type { ChildProcess } from 'node:child_process';
import { childrenOf } from './children.js';
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
