import { type ChildProcess, spawn } from 'node:child_process';
import type { Where } from './where.js';

/** The `forge worker` processes of a `forge serve --workers N`. */
export interface WorkerPool {
  /** Live worker pids. */
  pids(): number[];
  /** Stops every worker (SIGTERM: each finishes its calls within its grace period, then SIGKILL) and waits for them. */
  stop(): Promise<void>;
}

/** Restarts are spaced out when a worker keeps dying: at most one per this many ms per slot. */
const RESTART_SPACING_MS = 1_000;

/**
 * Starts `n` workers on this project's queue, as children of the server: each is `forge worker`
 * with the server's home, project and environment, its stderr (one line per call) passed
 * through. A worker that dies is started again (a second later at most once a second), so a
 * crash costs its calls' retries, not the server's capacity.
 */
export function startWorkers(n: number, w: Where, o: { cliPath: string; graceMs: number; note: (line: string) => void }): WorkerPool {
  const { cliPath, graceMs, note } = o;
  const children = new Map<number, ChildProcess>();
  let stopping = false;
  const start = (slot: number) => {
    if (stopping) return;
    const started = Date.now();
    const child = spawn(
      process.execPath,
      [cliPath, 'worker', '--home', w.home, '--project', w.project, '--name', `${process.pid}-w${slot}`, '--grace-ms', String(graceMs)],
      { env: w.env, stdio: ['ignore', 'ignore', 'inherit'] },
    );
    children.set(slot, child);
    child.on('error', (err) => note(`forge serve: worker ${slot} could not start: ${err.message}`));
    child.on('exit', (code, signal) => {
      if (children.get(slot) === child) children.delete(slot);
      if (stopping) return;
      note(`forge serve: worker ${slot} (pid ${child.pid}) ended (${signal ?? `exit ${code}`}); starting another`);
      setTimeout(() => start(slot), Math.max(0, RESTART_SPACING_MS - (Date.now() - started))).unref();
    });
  };
  for (let i = 1; i <= n; i++) start(i);
  return {
    pids: () => [...children.values()].flatMap((c) => (c.pid === undefined ? [] : [c.pid])),
    async stop() {
      stopping = true;
      const all = [...children.values()].filter((c) => c.exitCode === null && c.signalCode === null);
      await Promise.all(
        all.map(
          (c) =>
            new Promise<void>((resolve) => {
              const kill = setTimeout(() => c.kill('SIGKILL'), graceMs + 5_000);
              c.once('exit', () => {
                clearTimeout(kill);
                resolve();
              });
              c.kill('SIGTERM');
            }),
        ),
      );
    },
  };
}
