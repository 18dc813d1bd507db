import { type StdioNull, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  fstatSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import type { Duplex, Writable } from 'node:stream';
import {
  acquireRunCgroup,
  type CgroupLimits,
  isAlive,
  memoryInUse,
  type PidsCgroups,
  type RunCgroup,
  releaseRunCgroup,
  runCpuUsec,
  setRunLimits,
} from './cgroup.js';
import { DEFAULT_WARM_POOL_BYTES, DEMAND, Demand, WARM_BYTES_GUESS, warmBudget } from './demand.js';
import {
  argsFdFor,
  BIND_FD,
  controlLine,
  holdRun,
  joinCgroup,
  type Launched,
  notStarted,
  PRELUDE,
  setHeld,
  shellQuote,
  streams,
  withPipeAt,
} from './launcher.js';
import { shellFor } from './shell.js';
import { processTempDir } from './tmp.js';

/**
 * Sandboxes built ahead of time. bwrap's own work (namespaces, mounts, the seccomp filter) takes
 * 2–3 ms of a run; a sandbox built ahead has done all of it and waits, as an unprivileged
 * `/bin/sh` inside, for one line on descriptor 5: its run's environment, rlimits and command.
 * The run pays for that line and one exec.
 *
 * Everything a run may vary must then reach the sandbox after it was built, so only runs that
 * fit are served this way: no binds (each is checked for its run and mounted by descriptor), no
 * network (the relay needs the run's IPC channel), and per-run mounts ({@link Mount.perRun})
 * that are a small file (its bytes are copied into a placeholder the sandbox already mounts) or
 * an empty directory (the sandbox's own tmpfs, copied out by its holder once the tool is done).
 * Sandboxes are pooled by the shape they were built for; every other run builds its own, as before.
 *
 * A sandbox serves one run only. Waiting ones never keep the process alive and die with it
 * (`--die-with-parent`); their placeholders live under the embedding program's stage directory,
 * one subdirectory per process, removed at exit (and by the next process, after a crash).
 */

// Descriptor 5 is a socket pair (as every piped descriptor of Node's children): the shell says
// it is up on it, then reads its run's line from it. The line closes it for the tool; a run with
// an output directory keeps it as the holder's channel (see {@link runLine}).
const INNER = `${PRELUDE}; echo >&5 && IFS= read -r line <&5 && eval "$line"`;
/** The command a sandbox built ahead is built with: say it is built, read one line, become the run. */
export const INNER_COMMAND: readonly string[] = ['/bin/sh', '-c', INNER, 'sandbox'];

/**
 * The line a sandbox built ahead runs: its steps, then the command. With `hold`, the shell stays
 * as the run's holder: it runs the command (without the channel), says `done <status>` on descriptor
 * 5 when it is done, and waits there until its output directories have been copied out.
 */
export function runLine(steps: readonly string[], argv: readonly string[], hold: boolean): string {
  if (!hold) return controlLine([...steps, 'exec 5<&-'], argv);
  const cmd = argv.map(shellQuote).join(' ');
  return `${[...steps].join(' && ')}${steps.length ? ' && ' : ''}${holdRun(`${cmd} 5>&-`, 5)}`;
}

/** Largest per-run read-only file copied into a sandbox built ahead. */
export const MAX_STAGED_FILE = 1 << 20;
/** Shapes remembered (with how many of each to keep) before idle ones are forgotten. */
const MAX_POOLS = 32;

/** What a pool's sandboxes are built for. */
export interface Shape {
  /** Equal keys, interchangeable sandboxes. */
  key: string;
  /** What it runs, for diagnostics: the command's program name. */
  label: string;
  /** Where the per-run mounts' placeholders are made (see {@link RunOptions.prebuild}). */
  stageDir: string;
  /** The per-run read-only files, in the order of the profile's mounts (each gets a placeholder). */
  slots: readonly 'ro'[];
  /** bwrap, behind what drops root when this process is root (see `SandboxIdentity`). */
  bwrap: readonly string[];
  /**
   * bwrap's options (all before `--`) for a sandbox whose slots are at `paths`, and the shell
   * steps that open the sources of the mounts made from descriptors (run before root is dropped).
   */
  options: (paths: readonly string[]) => { options: string[]; opens: string[]; prefix: string[]; remove: () => void };
  cgroups?: PidsCgroups;
  seccomp: Buffer;
  cover: (fd: number) => (number | StdioNull)[];
  /**
   * A warm shape (warm.ts): the command the sandbox is built with, which starts the run's own
   * interpreter, and the loader's bytes, put in the script's slot until a run takes it.
   */
  warm?: { inner: readonly string[]; slot: number; loader: string; poolBytes?: number };
}

/** What the warm-up of the sandbox that served a run cost (see {@link WarmOptions}). */
export interface Warmup {
  /** From the sandbox's launch until its loader said it was ready. */
  ms: number;
  /** CPU time its processes used meanwhile, where a cgroup measured it. */
  cpuMs?: number;
  /** Memory they held when the run took it, where a cgroup measured it (added to the run's memory limit). */
  memoryBytes?: number;
}

interface Built extends Launched {
  /** This sandbox's placeholders: one entry per slot, under `dir`, and the inode of each. */
  dir: string;
  paths: string[];
  inodes: number[];
  /** Its shell (a warm one: its loader) has started inside the finished sandbox. */
  up: boolean;
  /** performance.now() at its launch, and when it said it was up. */
  launchedAt: number;
  upAt: number;
  /** Resolves true once it is up, false when it exits first, `ms` pass or `signal` aborts. */
  upOrGone: (ms: number, signal?: AbortSignal) => Promise<boolean>;
  /** A run has it (and ends it with {@link finishPrebuilt}). */
  taken: boolean;
  cleaned: boolean;
  /** Removes the mount points its sources were staged on (see staging.ts). */
  unstage: () => void;
}

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

const roots = new Map<string, string>(); // stage directory → this process's directory in it
const made = new Set<string>(); // every such directory not yet removed, for the exit
let cleanupAtExit = false;

/** This process's directory under `stageDir`; made on first use, after removing those of dead processes. */
function stageRoot(stageDir: string): string {
  const known = roots.get(stageDir);
  if (known) return known;
  mkdirSync(stageDir, { recursive: true, mode: 0o700 });
  for (const name of readdirSync(stageDir)) {
    const pid = /^(\d+)-[0-9a-f]+$/.exec(name)?.[1];
    if (pid && Number(pid) !== process.pid && !isAlive(Number(pid))) rmSync(join(stageDir, name), { recursive: true, force: true });
  }
  const root = join(stageDir, `${process.pid}-${randomBytes(4).toString('hex')}`);
  mkdirSync(root, { mode: 0o700 });
  roots.set(stageDir, root);
  made.add(root);
  if (!cleanupAtExit) {
    cleanupAtExit = true;
    process.once('exit', () => {
      for (const r of made) rmSync(r, { recursive: true, force: true });
    });
  }
  return root;
}

let serial = 0;

/** Gives back a sandbox's cgroup and placeholders, once (from whichever of its endings comes first). */
function cleanUp(b: Built): void {
  if (b.cleaned) return;
  b.cleaned = true;
  if (b.cgroup) releaseRunCgroup(b.cgroup);
  if (b.dir) rmSync(b.dir, { recursive: true, force: true });
  b.unstage();
}

/** Drops a sandbox that will serve no run: its processes, cgroup and placeholders. */
function discard(b: Built): void {
  try {
    if (b.child.pid && b.child.exitCode === null && b.child.signalCode === null) process.kill(-b.child.pid, 'SIGKILL');
  } catch {
    // already gone
  }
  cleanUp(b);
}

/** Builds one sandbox for `pool`'s shape; false when it cannot (no cgroup left, stage not writable). */
function build(pool: Pool): boolean {
  const { shape } = pool;
  let dir = '';
  const paths: string[] = [];
  const inodes: number[] = [];
  try {
    try {
      dir = join(stageRoot(shape.stageDir), String(++serial));
      mkdirSync(dir, { mode: 0o700 });
    } catch {
      // This process's directory was removed from under it: make it again.
      roots.delete(shape.stageDir);
      dir = join(stageRoot(shape.stageDir), String(++serial));
      mkdirSync(dir, { mode: 0o700 });
    }
    shape.slots.forEach((mode, i) => {
      const p = join(dir, String(i));
      // Readable by the sandbox's uid, which may not be this process's: the directories above
      // it stay 0700, and the sandbox reaches it by descriptor.
      if (mode === 'ro') writeFileSync(p, shape.warm?.slot === i ? shape.warm.loader : '', { mode: 0o644, flag: 'wx' });
      paths.push(p);
      inodes.push(statSync(p).ino);
    });
  } catch {
    if (dir) rmSync(dir, { recursive: true, force: true });
    return false;
  }
  let cgroup: RunCgroup | undefined;
  if (shape.cgroups) {
    // Room for what building takes (bwrap, its namespace's init, the waiting shell); the run's
    // own limit is set when a run takes it.
    cgroup = acquireRunCgroup(shape.cgroups, { processes: 8 });
    if (!cgroup) {
      rmSync(dir, { recursive: true, force: true });
      return false;
    }
  }
  let planned: ReturnType<Shape['options']>;
  try {
    planned = shape.options(paths);
  } catch {
    if (cgroup) releaseRunCgroup(cgroup);
    rmSync(dir, { recursive: true, force: true });
    return false;
  }
  const { options, opens, prefix } = planned;
  const steps = [...(cgroup ? [joinCgroup(cgroup)] : []), ...opens];
  // 3: the run's events pipe (made now: the sandbox is built with it), 4: seccomp, 5: control,
  // the descriptor mounts' sources from BIND_FD (opened by `opens`), then bwrap's arguments.
  const argsFd = argsFdFor(BIND_FD + opens.length);
  const inner = shape.warm?.inner ?? INNER_COMMAND;
  const script = `${PRELUDE}; ${controlLine(steps, [...prefix, ...shape.bwrap, '--args', String(argsFd), '--', ...inner])}`;
  const child = spawn(shellFor(argsFd - 1), ['-c', script, 'sandbox-launcher'], {
    stdio: withPipeAt<number>(['pipe', 'pipe', 'pipe', 'pipe', 'pipe', 'pipe', ...shape.cover(6)], argsFd),
    detached: true, // its own process group, as every launcher
    env: {},
  });
  if (notStarted(child)) {
    // The system would not start it (out of descriptors or processes): runs start cold.
    planned.remove();
    if (cgroup) releaseRunCgroup(cgroup);
    rmSync(dir, { recursive: true, force: true });
    return false;
  }
  const { settle, wait } = upWatch();
  const built: Built = {
    child,
    ...(cgroup ? { cgroup } : {}),
    dir,
    paths,
    inodes,
    up: false,
    launchedAt: performance.now(),
    upAt: 0,
    upOrGone: wait,
    taken: false,
    cleaned: false,
    unstage: planned.remove,
  };
  child.on('error', () => {}); // one that cannot start exits, below
  for (const s of streams(child)) s.on('error', () => {});
  child.once('exit', () => {
    settle(false);
    if (built.taken) return; // its run cleans up
    const i = pool.ready.indexOf(built);
    if (i >= 0) pool.ready.splice(i, 1);
    cleanUp(built);
  });
  const control = (child.stdio as unknown as Duplex[])[5] as Duplex;
  control.once('data', () => {
    built.up = true;
    built.upAt = performance.now();
    pool.demand.built(built.upAt - built.launchedAt);
    settle(true);
  });
  ((child.stdio as unknown as Writable[])[argsFd] as Writable).end(`${options.join('\0')}\0`);
  (child.stdio[4] as Writable).end(shape.seccomp);
  setHeld(child, false);
  pool.ready.push(built);
  return true;
}

/** Whether a sandbox came up: settled by its first word on the channel, or by its exit. */
function upWatch(): { settle: (up: boolean) => void; wait: Built['upOrGone'] } {
  let settle: (up: boolean) => void = () => {};
  const came = new Promise<boolean>((resolve) => {
    settle = resolve;
  });
  // The timer is not unref'd: a run waiting here is work in progress, and the process must not
  // exit under it (the waiting sandbox itself never holds it).
  const wait = (ms: number, signal?: AbortSignal) =>
    new Promise<boolean>((resolve) => {
      const done = (up: boolean) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', aborted);
        resolve(up);
      };
      const aborted = () => done(false);
      const timer = setTimeout(done, ms, false);
      signal?.addEventListener('abort', aborted, { once: true });
      void came.then(done);
    });
  return { settle, wait };
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
 * Copies the read-only slots' `sources` into `b`'s placeholders, and checks that every placeholder
 * is still the inode the sandbox mounted (the stage directory may have been removed or replaced
 * meanwhile). False when one is not, or a source cannot be read: that sandbox cannot serve the run.
 */
function fill(b: Built, sources: readonly string[]): boolean {
  try {
    return b.paths.every((p, i) => {
      const bytes = readFileSync(sources[i] as string);
      const fd = openSync(p, 'r+'); // never creates: a new file would not be the one mounted
      try {
        if (fstatSync(fd).ino !== b.inodes[i]) return false;
        ftruncateSync(fd, 0);
        writeSync(fd, bytes, 0, bytes.length, 0);
        return true;
      } finally {
        closeSync(fd);
      }
    });
  } catch {
    return false;
  }
}

/**
 * Takes a sandbox built for `shape`, copies the read-only slots' `sources` into it and sends it
 * `line`; or, when none is waiting, returns a claim without one (the run then builds its own).
 * Either way another is built for the next run. A warm shape's sandbox is taken only once its
 * loader is up; when none is but one is warming up, the run waits for it (it started before a
 * cold run would), unless it has been warming up for longer than {@link WARM_UP_MS}.
 */
export async function takePrebuilt(
  shape: Shape,
  sources: readonly string[],
  line: string,
  limits: CgroupLimits,
  signal?: AbortSignal,
): Promise<PrebuiltClaim> {
  const pool = poolFor(shape);
  const now = performance.now();
  pool.used = ++clock;
  pool.poolBytes = shape.warm?.poolBytes ?? DEFAULT_WARM_POOL_BYTES;
  pool.inFlight++;
  pool.demand.take(now);
  pool.wanted = Math.max(pool.wanted, pool.demand.wanted(now, pool.inFlight));
  watchIdle(pool);
  // A refill owed (or none waiting at all): this run shows there is demand now, so at once.
  if (pending.delete(pool) || pool.ready.length === 0) setImmediate(() => refill(pool));
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

const gone = (b: Built) => b.child.exitCode !== null || b.child.signalCode !== null || !b.child.pid;

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
 * A new stage directory for {@link RunOptions.prebuild} under the system's temporary directory
 * (0700, this process's; removed at exit, and by a later process when this one died without its
 * exit handlers). Its path tells a tool nothing about the host: a sandbox's mount table shows it.
 */
export function makeStageDir(): string {
  return processTempDir('prebuilt');
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
  const root = roots.get(stageDir);
  if (!root) return;
  roots.delete(stageDir);
  // A run still under way keeps its placeholders (and its output) until it ends; the directory
  // then goes at exit.
  if (inFlight === 0) {
    made.delete(root);
    rmSync(root, { recursive: true, force: true });
  }
}
