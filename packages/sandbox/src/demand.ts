/**
 * How many sandboxes of a shape to keep built ahead (prebuilt.ts): as many as its runs will want
 * before another could be built, following its recent rate and how many run at once, up to a
 * bound; fewer once it goes idle; and warm ones only as far as memory allows. A run that finds
 * none waiting builds its own (cold), so following demand never fails a run.
 */
import { readFileSync } from 'node:fs';

/** The bounds and times the pools follow (a test may shorten the times). */
export const DEMAND = {
  /** Sandboxes waiting at once, per shape and in all. */
  maxPerShape: 4,
  maxReady: 8,
  /** How far back a shape's runs are counted to tell its rate. */
  windowMs: 10_000,
  /** A shape with no run for this long keeps one sandbox waiting; for `idleLongMs`, none. */
  idleMs: 60_000,
  idleLongMs: 600_000,
};

/** Memory the waiting warm sandboxes of a process may hold in all, unless told otherwise. */
export const DEFAULT_WARM_POOL_BYTES = 128 << 20;
/** What one warm sandbox is taken to hold until one of its shape has been measured (its cgroup's memory). */
export const WARM_BYTES_GUESS = 16 << 20;
/** The share of the host's available memory (MemAvailable) the waiting warm sandboxes may hold at most. */
const AVAILABLE_SHARE = 4;

/** One shape's recent runs and how long one of its sandboxes takes to be ready. */
export class Demand {
  readonly #takes: number[] = [];
  /** Launch to ready, smoothed; a first guess until one has been built. */
  #buildMs = 200;
  /** performance.now() of the last run that asked for this shape. */
  lastTake = 0;

  /** A run asked for the shape at `now`. */
  take(now: number): void {
    this.lastTake = now;
    this.#takes.push(now);
    while (this.#takes.length > 0 && now - (this.#takes[0] as number) > DEMAND.windowMs) this.#takes.shift();
    if (this.#takes.length > 256) this.#takes.shift();
  }

  /** One of its sandboxes took `ms` from launch to ready. */
  built(ms: number): void {
    this.#buildMs = this.#buildMs * 0.7 + ms * 0.3;
  }

  /**
   * How many to keep waiting: the runs expected while one sandbox is being built (the recent rate
   * times the build time), plus one, and at least as many as run at once; at most `maxPerShape`.
   */
  wanted(now: number, inFlight: number): number {
    const recent = this.#takes.filter((t) => now - t <= DEMAND.windowMs);
    // Runs per ms over the span they came in (at least a second: two runs are not yet a rate).
    const span = Math.max(1000, now - (recent[0] ?? now));
    const during = Math.round((recent.length / span) * this.#buildMs);
    return Math.min(DEMAND.maxPerShape, Math.max(inFlight, during + 1));
  }

  /** How many to keep once the shape has had no run since `lastTake`: one while briefly idle, none after long. */
  idleWanted(now: number, wanted: number): number {
    const idle = now - this.lastTake;
    if (idle >= DEMAND.idleLongMs) return 0;
    if (idle >= DEMAND.idleMs) return Math.min(wanted, 1);
    return wanted;
  }
}

/** What the waiting warm sandboxes may hold now: `poolBytes`, and never more than a share of the host's available memory. */
export function warmBudget(poolBytes: number): { bytes: number; availableBytes?: number } {
  const available = memAvailable();
  if (available === undefined) return { bytes: poolBytes };
  return { bytes: Math.min(poolBytes, Math.floor(available / AVAILABLE_SHARE)), availableBytes: available };
}

let cached: { at: number; bytes: number | undefined } | undefined;

/** The host's MemAvailable (bytes), read at most once a second; undefined where /proc/meminfo does not say. */
function memAvailable(): number | undefined {
  const now = performance.now();
  if (cached && now - cached.at < 1000) return cached.bytes;
  let bytes: number | undefined;
  try {
    const kib = /^MemAvailable:\s+(\d+) kB$/m.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1];
    bytes = kib === undefined ? undefined : Number(kib) * 1024;
  } catch {
    bytes = undefined;
  }
  cached = { at: now, bytes };
  return bytes;
}
