/**
 * The pools of sandboxes built ahead (one sandbox: prebuilt-sandbox.ts): per shape, how many to
 * keep, when to build them, and the runs that take them.
 */

import type { Writable } from 'node:stream';
import { type CgroupLimits, memoryInUse, runCpuUsec, setRunLimits } from './cgroup.js';
import { DEFAULT_WARM_POOL_BYTES, DEMAND, Demand, WARM_BYTES_GUESS, warmBudget } from './demand.js';
import { setHeld } from './launcher.js';
import { type Built, buildSandbox, cleanUp, discard, dropStageRoot, fill, gone, type Shape, type Warmup } from './prebuilt-sandbox.js';

export {
  INNER_COMMAND,
  MAX_STAGED_FILE,
  makeStageDir,
  runLine,
  type Shape,
  sourcedCommand,
  sourcedLine,
  sourcedScript,
  type Warmup,
} from './prebuilt-sandbox.js';

/** Shapes remembered (with how many of each to keep) before idle ones are forgotten. */
const MAX_POOLS = 32;

interface Pool {
  shape: Shape;
  /** Warm-ups in a row that died or hung before their loader was up (see {@link WARM_FAILURES}). */
  warmFailures: number;
  /** Until when (performance.now()) this shape is not warmed, after too many failed warm-ups. */
  warmPausedUntil: number;
  ready: Built[];
  inFlight: number;
  /** How many to keep waiting (see demand.ts), and the runs that tell it. */
  wanted: number;
  demand: Demand;
  /** What one of its warm sandboxes held when a run took it, where a cgroup measured it. */
  bytesEach?: number;
  /** The warm budget its last run gave ({@link WarmOptions.poolBytes}). */
  poolBytes: number;
  /** Shrinks the pool once the shape goes idle. */
  idle?: ReturnType<typeof setTimeout>;
  /** When a run last asked for this shape (a counter), to pick which pool gives way. */
  used: number;
  /** The cgroup limits its last run had: its next sandboxes are built with them (see buildSandbox). */
  limits?: CgroupLimits;
}

const pools = new Map<string, Pool>();
/** Pools whose refill waits for this process to have no run going, since when (see refillSoon). */
const pending = new Map<Pool, number>();
let quiet: ReturnType<typeof setTimeout> | undefined;
/** How long this process must have had no run going before a waiting refill starts, and the longest a refill waits. */
const QUIET_MS = 10;
const REFILL_WAIT_MS = 250;

let clock = 0;
const stats: { served: number; missed: number; warm: number; held?: PrebuiltStats['held'] } = { served: 0, missed: 0, warm: 0 };
/** How long a warm sandbox may take to be up before a run gives up on it (a preload that hangs). */
const WARM_UP_MS = 10_000;
/**
 * Warm-ups of a shape that fail in a row before it stops being warmed for {@link WARM_PAUSE_MS}
 * (its runs then start cold; a host too busy to warm one up in time may be less busy later).
 */
const WARM_FAILURES = 3;
const WARM_PAUSE_MS = 60_000;

/** Sandboxes built ahead: being built, built and waiting, and the runs served by one or not so far. */
export interface PrebuiltStats {
  /** Being built, or about to be (a refill that waits for this process to be quiet). */
  building: number;
  ready: number;
  /** Runs that took a sandbox built ahead. */
  served: number;
  /** Runs that could have, but found none waiting (and built their own). */
  missed: number;
  /** Of the runs served, those whose interpreter was already running (warm). */
  warm: number;
  /** Per shape: what it runs, whether warm, how many wait, are being built, are wanted, run now; ms since its last run. */
  pools: {
    label: string;
    warm: boolean;
    stageDir: string;
    ready: number;
    building: number;
    wanted: number;
    running: number;
    idleMs: number;
  }[];
  /**
   * What the waiting warm sandboxes hold (measured where a cgroup did, else {@link WARM_BYTES_GUESS}
   * each), and may hold (the budget of the warm shape asked for last).
   */
  warmBytes: number;
  warmBudgetBytes: number;
  /**
   * The last time a warm sandbox was not built because memory would not allow it (runs of its
   * shape then start cold, as they say in `RunResult.prebuilt`): when (ms since the epoch), its
   * shape, and the figures.
   */
  held?: { at: number; label: string; neededBytes: number; budgetBytes: number; availableBytes?: number };
}

/** Where the sandboxes built ahead stand in this process (for diagnostics and benchmarks). */
export function prebuiltStats(): PrebuiltStats {
  let ready = 0;
  let building = 0;
  const now = performance.now();
  const list: PrebuiltStats['pools'] = [];
  for (const p of pools.values()) {
    const up = p.ready.filter((b) => b.up).length;
    // A refill waiting for this process to be quiet counts as being built (see refillSoon).
    const due = pending.has(p) ? Math.max(0, p.wanted - p.ready.length) : 0;
    ready += up;
    building += p.ready.length - up + due;
    list.push({
      label: p.shape.label,
      warm: p.shape.warm !== undefined,
      stageDir: p.shape.stageDir,
      ready: up,
      building: p.ready.length - up + due,
      wanted: p.wanted,
      running: p.inFlight,
      idleMs: Math.round(now - p.demand.lastTake),
    });
  }
  return {
    building,
    ready,
    served: stats.served,
    missed: stats.missed,
    warm: stats.warm,
    pools: list,
    warmBytes: warmHeld(),
    warmBudgetBytes: warmBudget(lastWarm()?.poolBytes ?? DEFAULT_WARM_POOL_BYTES).bytes,
    ...(stats.held ? { held: { ...stats.held } } : {}),
  };
}

/** The warm pool a run asked for last. */
function lastWarm(): Pool | undefined {
  let last: Pool | undefined;
  for (const p of pools.values()) if (p.shape.warm && (!last || p.used > last.used)) last = p;
  return last;
}

/** What the waiting (and warming) warm sandboxes hold, by their shapes' measures. */
function warmHeld(): number {
  let bytes = 0;
  for (const p of pools.values()) if (p.shape.warm) bytes += p.ready.length * (p.bytesEach ?? WARM_BYTES_GUESS);
  return bytes;
}

/** Builds one sandbox for `pool`'s shape into its waiting list; false when it cannot. */
function build(pool: Pool): boolean {
  let built: ReturnType<typeof buildSandbox>;
  try {
    built = buildSandbox(
      pool.shape,
      {
        up: (ms) => pool.demand.built(ms),
        exited: (b) => {
          const i = pool.ready.indexOf(b);
          if (i >= 0) pool.ready.splice(i, 1);
        },
      },
      pool.limits,
    );
  } catch {
    // Building ahead is a saving, never a duty: what failed here fails again, named, in a run.
    return false;
  }
  if (!built) return false;
  pool.ready.push(built);
  return true;
}

function refill(pool: Pool): void {
  if (pool.shape.warm && performance.now() < pool.warmPausedUntil) return;
  while (pool.ready.length < pool.wanted && pools.get(pool.shape.key) === pool) {
    if (pool.shape.warm && !warmRoom(pool)) return;
    let total = 0;
    for (const p of pools.values()) total += p.ready.length;
    if (total >= DEMAND.maxReady) {
      // Room is made by the shape asked for least recently, never by this one.
      let victim: Pool | undefined;
      for (const p of pools.values()) if (p !== pool && p.ready.length > 0 && (!victim || p.used < victim.used)) victim = p;
      const b = victim?.ready.shift();
      if (!b) return;
      discard(b);
    }
    if (!build(pool)) return;
  }
  // Filled: a refill owed from before (refillSoon) is paid. Left owed, it would later replace a
  // sandbox lost meanwhile, which a pool does only when a run next asks for its shape.
  pending.delete(pool);
}

/**
 * Whether memory allows one more warm sandbox of `pool`'s shape: what the waiting ones (of every
 * shape) hold and one more must fit its budget (demand.ts). When it does not, none is built (the
 * shape's runs start cold), and the figures are kept for `prebuiltStats().held`.
 */
function warmRoom(pool: Pool): boolean {
  const each = pool.bytesEach ?? WARM_BYTES_GUESS;
  const budget = warmBudget(pool.poolBytes);
  const needed = warmHeld() + each;
  if (needed <= budget.bytes) return true;
  stats.held = {
    at: Date.now(),
    label: pool.shape.label,
    neededBytes: needed,
    budgetBytes: budget.bytes,
    ...(budget.availableBytes !== undefined ? { availableBytes: budget.availableBytes } : {}),
  };
  return false;
}

/**
 * Keeps `pool` following its shape's idleness: once no run has asked for it for a while, the
 * sandboxes it no longer wants are dropped (one stays after a minute, none after ten).
 */
function watchIdle(pool: Pool): void {
  if (pool.idle) clearTimeout(pool.idle);
  if (pool.wanted === 0) return;
  const now = performance.now();
  const at = pool.wanted > 1 ? DEMAND.idleMs : DEMAND.idleLongMs;
  pool.idle = setTimeout(
    () => {
      pool.idle = undefined;
      const t = performance.now();
      pool.wanted = pool.demand.idleWanted(t, pool.wanted);
      // The newest go first: the oldest are the furthest along.
      while (pool.ready.length > pool.wanted) discard(pool.ready.pop() as Built);
      watchIdle(pool);
    },
    Math.max(0, pool.demand.lastTake + at - now),
  );
  pool.idle.unref();
}

/** A run's claim on a shape: the sandbox it got, if one was waiting. Pass it to {@link finishPrebuilt}. */
export interface PrebuiltClaim {
  pool: Pool;
  built?: Built;
  /** What the warm-up cost, when a warm sandbox serves the run. */
  warmup?: Warmup;
  done?: boolean;
}

/**
 * Takes a sandbox built for `shape`, copies the read-only slots' `sources` into it and sends it
 * `line`; or, when none is waiting, returns a claim without one (the run then builds its own).
 * Either way another is built for the next run. A warm shape's sandbox is taken only once its
 * loader is up; when none is but one is warming up, the run waits for it (it started before a
 * cold run would), unless it has been warming up for longer than {@link WARM_UP_MS}. `ready`:
 * keep at least that many of the shape waiting (a caller that runs it several times in a row).
 */
export async function takePrebuilt(
  shape: Shape,
  sources: readonly string[],
  line: string,
  limits: CgroupLimits,
  signal?: AbortSignal,
  ready = 0,
): Promise<PrebuiltClaim> {
  const pool = poolFor(shape);
  const now = performance.now();
  pool.used = ++clock;
  pool.limits = limits;
  pool.poolBytes = shape.warm?.poolBytes ?? DEFAULT_WARM_POOL_BYTES;
  pool.inFlight++;
  pool.demand.take(now);
  pool.wanted = Math.max(pool.wanted, pool.demand.wanted(now, pool.inFlight), Math.min(ready, DEMAND.maxPerShape));
  watchIdle(pool);
  // A refill owed (or none waiting at all): this run shows there is demand now, so at once. But
  // not while one still waits for a caller that runs the shape several times in a row (`ready`,
  // a call's hooks): building forks this process, which would hold up the rest of the sequence;
  // what is owed is then built in the next quiet moment (refillSoon).
  if (pool.ready.length === 0 || (ready === 0 && pending.has(pool))) {
    pending.delete(pool);
    setImmediate(() => refill(pool));
  }
  const claim = await takeFrom(pool, shape, sources, line, limits, signal);
  if (pool.ready.length < pool.wanted) refillSoon(pool);
  return claim;
}

/**
 * Has `pool` build what it lacks once this process has had no run going for {@link QUIET_MS} (at
 * the latest after {@link REFILL_WAIT_MS}), or when a run asks for the shape meanwhile (then at
 * once: see takePrebuilt). Building a sandbox forks this process, which holds up its event loop
 * for as long as the fork copies its page tables (about 10 ms for a server's size): in the middle
 * of a run, that is added to its answer; between runs (calls seconds apart, as an agent's are), to
 * nothing.
 */
function refillSoon(pool: Pool): void {
  if (!pending.has(pool)) pending.set(pool, performance.now());
  armQuiet();
}

function armQuiet(): void {
  if (quiet) clearTimeout(quiet);
  quiet = undefined;
  if (pending.size === 0) return;
  const oldest = Math.min(...pending.values());
  const busy = [...pools.values()].some((p) => p.inFlight > 0);
  const wait = busy ? Math.max(0, oldest + REFILL_WAIT_MS - performance.now()) : QUIET_MS;
  quiet = setTimeout(() => {
    quiet = undefined;
    const waiting = [...pending.keys()];
    pending.clear();
    for (const p of waiting) refill(p);
  }, wait);
  quiet.unref();
}

/** {@link takePrebuilt}'s take: a sandbox of the pool, filled and sent its line, or none. */
async function takeFrom(
  pool: Pool,
  shape: Shape,
  sources: readonly string[],
  line: string,
  limits: CgroupLimits,
  signal: AbortSignal | undefined,
): Promise<PrebuiltClaim> {
  for (;;) {
    const b = await next(pool, signal);
    if (!b) break;
    const warmup = shape.warm ? warmupOf(b) : undefined;
    if (warmup?.memoryBytes !== undefined) pool.bytesEach = warmup.memoryBytes;
    // A warm-up's memory stays with the sandbox: the run's limit is on top of it.
    const own =
      warmup?.memoryBytes !== undefined && limits.memoryBytes !== undefined
        ? { ...limits, memoryBytes: limits.memoryBytes + warmup.memoryBytes }
        : limits;
    if (gone(b) || (b.cgroup && !setRunLimits(b.cgroup, own)) || !fill(b, sources)) {
      discard(b);
      continue;
    }
    b.taken = true;
    setHeld(b.child, true);
    // Written, not ended: the channel stays open for the holder (see runLine).
    (b.child.stdio as unknown as Writable[])[5]?.write(`${line}\n`);
    stats.served++;
    if (warmup) stats.warm++;
    return { pool, built: b, ...(warmup ? { warmup } : {}) };
  }
  stats.missed++;
  return { pool };
}

function poolFor(shape: Shape): Pool {
  const known = pools.get(shape.key);
  if (known) return known;
  // Forget shapes that have nothing waiting and nothing running, once there are many.
  if (pools.size >= MAX_POOLS)
    for (const [k, p] of pools) {
      if (p.ready.length > 0 || p.inFlight > 0) continue;
      if (p.idle) clearTimeout(p.idle);
      pools.delete(k);
    }
  const pool: Pool = {
    shape,
    ready: [],
    inFlight: 0,
    wanted: 0,
    demand: new Demand(),
    poolBytes: DEFAULT_WARM_POOL_BYTES,
    used: 0,
    warmFailures: 0,
    warmPausedUntil: 0,
  };
  pools.set(shape.key, pool);
  return pool;
}

/**
 * The pool's next sandbox for a run, taken out of it: one already up if there is one; else the
 * furthest along (a warm one: once it is up). Undefined when there is none.
 */
async function next(pool: Pool, signal: AbortSignal | undefined): Promise<Built | undefined> {
  for (;;) {
    if (signal?.aborted) return undefined;
    const up = pool.ready.findIndex((r) => r.up);
    if (up >= 0 || !pool.shape.warm) return pool.ready.splice(Math.max(0, up), 1)[0];
    // Warm, none up yet: the one warming up longest, unless it is stuck.
    const b = pool.ready.shift();
    if (!b) return undefined;
    const left = WARM_UP_MS - (performance.now() - b.launchedAt);
    if (left > 0 && (await b.upOrGone(left, signal))) {
      pool.warmFailures = 0;
      return b;
    }
    if (signal?.aborted && !gone(b)) {
      // The run was cancelled while this one warmed up: it stays for the next run.
      pool.ready.unshift(b);
      return undefined;
    }
    // It died or hung before its loader was up: a shape whose warm-ups keep failing pauses warming.
    if (++pool.warmFailures >= WARM_FAILURES) {
      pool.warmFailures = 0;
      pool.warmPausedUntil = performance.now() + WARM_PAUSE_MS;
    }
    discard(b);
  }
}

/**
 * What a warm sandbox's warm-up cost, read before its run's limits are set (which start its CPU
 * count again): the run's memory limit is on top of what the warm-up holds.
 */
function warmupOf(b: Built): Warmup {
  const cpu = b.cgroup ? runCpuUsec(b.cgroup) : undefined;
  const memory = b.cgroup ? memoryInUse(b.cgroup) : undefined;
  return {
    ms: Math.round(b.upAt - b.launchedAt),
    ...(cpu !== undefined ? { cpuMs: Math.round(cpu / 1000) } : {}),
    ...(memory !== undefined ? { memoryBytes: memory } : {}),
  };
}

/** Ends a claim once its run is over: gives back the sandbox's cgroup and placeholders. */
export function finishPrebuilt(claim: PrebuiltClaim): void {
  if (claim.done) return;
  claim.done = true;
  claim.pool.inFlight--;
  if (claim.built) cleanUp(claim.built);
  // The last run going has ended: a refill waiting for that may start once the process is quiet.
  if (pending.size > 0) armQuiet();
}

/**
 * Stops every sandbox waiting with placeholders under `stageDir` and removes this process's
 * directory there. For an embedding program that is done with that directory.
 */
export function discardPrebuilt(stageDir: string): void {
  let inFlight = 0;
  for (const [key, pool] of pools) {
    if (pool.shape.stageDir !== stageDir) continue;
    pools.delete(key);
    if (pool.idle) clearTimeout(pool.idle);
    inFlight += pool.inFlight;
    for (const b of pool.ready.splice(0)) discard(b);
  }
  // A run still under way keeps its placeholders (and its output) until it ends; the directory
  // then goes at exit.
  dropStageRoot(stageDir, inFlight > 0);
}
