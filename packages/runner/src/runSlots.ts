import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';

/**
 * How many sandboxes run at once, the rest waiting in the order they came. Each run holds a
 * dozen or more of this process's file descriptors (its pipes, bind sources, cgroup files) and
 * a share of the CPU: without a bound a burst of calls (a thousand at once over HTTP) would fork
 * a thousand launchers and run out of descriptors, failing calls that a short wait would serve.
 */
export class RunSlots {
  #free: number;
  readonly #waiting: (() => void)[] = [];
  /** Holders waiting for another run's end (afterAnotherEnds), each woken by the next release. */
  readonly #stalled = new Set<() => void>();

  constructor(readonly size: number) {
    this.#free = size;
  }

  /**
   * Resolves with the release of a slot once one is free (at once when one is). When `signal`
   * aborts first it resolves too, with a release that does nothing: the run then starts aborted
   * and ends at once, recorded as the caller cancelled it.
   */
  take(signal?: AbortSignal): Promise<() => void> {
    if (this.#free > 0) {
      this.#free--;
      return Promise.resolve(this.#releaser());
    }
    if (signal?.aborted) return Promise.resolve(() => {});
    return new Promise((resolve) => {
      const onAbort = () => {
        const i = this.#waiting.indexOf(grant);
        if (i >= 0) this.#waiting.splice(i, 1);
        resolve(() => {});
      };
      const grant = () => {
        signal?.removeEventListener('abort', onAbort);
        resolve(this.#releaser());
      };
      this.#waiting.push(grant);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Runs waiting for a slot now. */
  get waiting(): number {
    return this.#waiting.length;
  }

  /**
   * For a holder whose run the system would not start (out of descriptors or processes: other
   * runs and the process's connections hold them): resolves true at the next end of a run, or
   * false at once when no other holder is running (then the shortage is not one that an end will
   * cure) and when `signal` aborts. A holder waiting here does not count as running, so two that
   * wait on each other cannot both wait.
   */
  afterAnotherEnds(signal?: AbortSignal): Promise<boolean> {
    const running = this.size - this.#free - this.#stalled.size - 1;
    if (running <= 0 || signal?.aborted) return Promise.resolve(false);
    return new Promise((resolve) => {
      const onAbort = () => {
        this.#stalled.delete(wake);
        resolve(false);
      };
      const wake = () => {
        signal?.removeEventListener('abort', onAbort);
        resolve(true);
      };
      this.#stalled.add(wake);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  #releaser(): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      // The run's descriptors are free now: whoever waits for them tries again.
      for (const wake of this.#stalled) wake();
      this.#stalled.clear();
      const next = this.#waiting.shift();
      if (next) next();
      else this.#free++;
    };
  }
}

/**
 * The default bound: four runs per core, and no more than the open-files limit leaves room for
 * (about 24 descriptors a run, 64 kept for the rest: sockets, logs, stores). At least 2.
 */
export function defaultRunSlots(): number {
  const byCpu = 4 * availableParallelism();
  const files = openFilesLimit();
  const byFiles = files === undefined ? byCpu : Math.floor((files - 64) / 24);
  return Math.max(2, Math.min(byCpu, byFiles));
}

/** This process's soft RLIMIT_NOFILE, from /proc (undefined: unlimited or unknown). */
export function openFilesLimit(): number | undefined {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0];
    const n = Number(soft);
    return Number.isInteger(n) && n > 0 ? n : undefined;
  } catch {
    return undefined;
  }
}
