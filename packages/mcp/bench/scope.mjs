// The lifetime of one benchmark run: a temp root, everything opened meanwhile (closed in reverse
// at the end, also after an error or a signal), and the child processes, waited for (then
// stopped) before the root is removed. Nothing is left in the temp directory.

import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** This process's live children (stdio servers, bwrap runs), from /proc. */
function childPids() {
  const out = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(ppid) === process.pid && state !== 'Z') out.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/**
 * Makes the run's temp root (`<tmpdir>/<prefix>XXXXXX`). `defer(close)` registers something to
 * close; `cleanup()` (idempotent) closes all of it, waits for the children, removes the root.
 * SIGINT and SIGTERM clean up and exit 130; the root is also removed at any exit.
 */
export function createScope(prefix) {
  const root = mkdtempSync(join(tmpdir(), prefix));
  const closers = [];
  let stopping = false;
  let cleaning;
  const removeRoot = () => rmSync(root, { recursive: true, force: true, maxRetries: 5 });
  process.on('exit', removeRoot);
  const cleanup = () =>
    (cleaning ??= (async () => {
      stopping = true;
      while (closers.length > 0)
        await closers
          .pop()()
          .catch(() => {});
      // A child server ends on its own once its stdin closed (closing its Forge, removing its temp
      // dirs): wait for that, then ask (SIGTERM), then insist; only then remove what they wrote into.
      for (const [signal, waitMs] of [
        [undefined, 5000],
        ['SIGTERM', 3000],
        ['SIGKILL', 1000],
      ]) {
        const pids = childPids();
        if (pids.length === 0) break;
        if (signal) for (const pid of pids) process.kill(pid, signal);
        for (let t = 0; t < waitMs && childPids().length > 0; t += 50) await sleep(50);
      }
      removeRoot();
    })());
  // `on`, not `once`: a library's signal-exit handler re-raises the signal (killing the process
  // before anything is cleaned up) when it finds itself the only listener left.
  for (const sig of ['SIGINT', 'SIGTERM'])
    process.on(sig, () => {
      if (stopping) return;
      console.error(`\n${sig}: stopping, removing ${root}`);
      void cleanup().finally(() => process.exit(130));
    });
  return {
    root,
    /** Registers `close` (returns a promise) to run at cleanup; throws once the run is stopping. */
    defer(close) {
      closers.push(close);
      if (stopping) throw new Error('stopped');
    },
    get stopping() {
      return stopping;
    },
    cleanup,
  };
}
