import { mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { RunCgroups, Where } from './cgroup-host.js';

/**
 * The cgroups of one run: made (or reused) with the run's limits, joined by its launcher, watched
 * while it runs, and given back. Where they are made is found by `findRunCgroups` (cgroup-find.ts).
 */

/** The limits a run's cgroup is given. Undefined ones are left unlimited. */
export interface CgroupLimits {
  processes: number;
  memoryBytes?: number;
  /** Cores' worth of CPU time per wall-clock second (the rate; the budget is enforced by polling). */
  cpuCores?: number;
}

/** One run's cgroup: a directory per hierarchy. Give it back with {@link releaseRunCgroup}. */
export interface RunCgroup {
  host: RunCgroups;
  /** One directory per {@link RunCgroups.bases} entry. */
  dirs: string[];
  /** The first of {@link dirs}. */
  dir: string;
  /** The `cgroup.procs` files the run's launcher writes its pid into, each in turn. */
  procs: string[];
  /** Counters when the run took it: the limits hit and the CPU used before are not the run's. */
  maxEventsBefore: number;
  oomKillsBefore: number;
  cpuUsecBefore: number;
  /** What was last written to each limit file (a reused cgroup skips unchanged writes). */
  written: Map<string, string>;
}

/** The directory, in each hierarchy, under which the runs' cgroups are made. */
export const BASE_NAME = 'forge-sandbox';
const CPU_PERIOD_US = 100_000;

export function tryWrite(path: string, text: string): boolean {
  try {
    writeFileSync(path, text);
    return true;
  } catch {
    return false;
  }
}

export function read(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

let counter = 0;

interface Pool {
  idle: string[][];
  /** Released cgroups whose processes the kernel has not finished reaping yet. */
  draining: string[][];
}
const pools = new Map<string, Pool>();

function poolOf(c: RunCgroups): Pool {
  const key = c.bases.join('\0');
  let p = pools.get(key);
  if (!p) {
    p = { idle: [], draining: [] };
    pools.set(key, p);
  }
  return p;
}

function path(dirs: readonly string[], w: Where): string {
  return join(dirs[w[0]] as string, w[1]);
}

/** Whether no process (not even an exited one the kernel still counts) is left in `dirs`. */
function isEmpty(c: RunCgroups, dirs: readonly string[]): boolean {
  const f = c.files;
  if (f.pidsCurrent) return readCount(path(dirs, f.pidsCurrent)) === 0;
  if (f.populated) return /^populated 0$/m.test(read(path(dirs, f.populated)) ?? '');
  return dirs.every((d) => read(join(d, 'cgroup.procs')) === '');
}

/**
 * A cgroup for one run with `limits`, reused from earlier runs when one is empty (making and
 * removing a cgroup costs more than the rest of a short run). Returns undefined when none can
 * be made. Give it back with {@link releaseRunCgroup}.
 */
export function acquireRunCgroup(c: RunCgroups, limits: CgroupLimits): RunCgroup | undefined {
  const pool = poolOf(c);
  // Look at the oldest few draining cgroups only: checking each costs a read, and the list can
  // hold many while an init that is not ours takes its time reaping exited processes.
  for (let i = 0; i < 4 && pool.draining.length > 0; i++) {
    const d = pool.draining[0] as string[];
    if (!isEmpty(c, d)) break;
    pool.draining.shift();
    if (pool.idle.length < 8) pool.idle.push(d);
    else void removeRunCgroup(d);
  }
  while (pool.idle.length > 0) {
    const dirs = pool.idle.pop() as string[];
    const cg = runCgroup(c, dirs, idleWritten.get(dirs) ?? new Map());
    if (isEmpty(c, dirs) && setRunLimits(cg, limits)) return cg;
    void removeRunCgroup(dirs);
  }
  return createRunCgroup(c, limits);
}

/** What was written to an idle cgroup's limit files, kept while it waits to be reused. */
const idleWritten = new WeakMap<string[], Map<string, string>>();

function runCgroup(c: RunCgroups, dirs: string[], written: Map<string, string>): RunCgroup {
  return {
    host: c,
    dirs,
    dir: dirs[0] as string,
    procs: dirs.map((d) => join(d, 'cgroup.procs')),
    maxEventsBefore: 0,
    oomKillsBefore: 0,
    cpuUsecBefore: 0,
    written,
  };
}

function writeLimit(cg: RunCgroup, w: Where | undefined, value: string): boolean {
  if (!w) return true;
  const p = path(cg.dirs, w);
  if (cg.written.get(p) === value) return true;
  if (!tryWrite(p, value)) return false;
  cg.written.set(p, value);
  return true;
}

/**
 * Sets a run cgroup's limits for the run about to use it, and starts counting from now: limit
 * hits, OOM kills and CPU time before this call are not the run's. False when a limit cannot
 * be written (the cgroup must then not be used).
 */
export function setRunLimits(cg: RunCgroup, limits: CgroupLimits): boolean {
  const f = cg.host.files;
  const v1 = cg.host.version === 1;
  const mem = limits.memoryBytes === undefined ? (v1 ? '-1' : 'max') : String(limits.memoryBytes);
  let ok = writeLimit(cg, f.pidsMax, String(limits.processes));
  if (f.memoryMax) {
    if (v1 && f.swapMax) {
      // memsw (memory + swap) may never be below the memory limit: raise it first when growing,
      // lower it last when shrinking. Equal to the memory limit: no swap at all.
      ok &&=
        (writeLimit(cg, f.memoryMax, mem) && writeLimit(cg, f.swapMax, mem)) ||
        (writeLimit(cg, f.swapMax, mem) && writeLimit(cg, f.memoryMax, mem));
    } else {
      ok &&= writeLimit(cg, f.memoryMax, mem);
      if (f.swapMax) ok &&= writeLimit(cg, f.swapMax, limits.memoryBytes === undefined ? 'max' : '0');
    }
    // v2: an OOM kill takes the whole run, not one process of it.
    if (f.oomGroup) ok &&= writeLimit(cg, f.oomGroup, '1');
  }
  if (f.cpuMax) {
    const quota = limits.cpuCores === undefined ? undefined : limits.cpuCores * CPU_PERIOD_US;
    if (v1) ok &&= writeLimit(cg, f.cpuPeriod, String(CPU_PERIOD_US)) && writeLimit(cg, f.cpuMax, String(quota ?? -1));
    else ok &&= writeLimit(cg, f.cpuMax, `${quota ?? 'max'} ${CPU_PERIOD_US}`);
  }
  if (!ok) return false;
  cg.maxEventsBefore = maxEvents(cg);
  cg.oomKillsBefore = oomKills(cg);
  cg.cpuUsecBefore = cpuUsec(cg) ?? 0;
  return true;
}

/**
 * SIGKILLs every process in a run's cgroup: with `cgroup.kill` (v2, Linux 5.14+) at once, else a
 * few passes over each directory's process list (a fork may land between reading the list and
 * the kill). Killing the launcher's process group is not always enough: if it lands while bwrap
 * is still setting up, the sandbox's first process can miss its parent-death signal and live
 * on; as a member of the cgroup it cannot escape this.
 */
export function killRunCgroup(cg: RunCgroup): void {
  const k = cg.host.files.kill;
  if (k && tryWrite(path(cg.dirs, k), '1')) return;
  for (const dir of cg.dirs) {
    for (let pass = 0; pass < 5; pass++) {
      const text = read(join(dir, 'cgroup.procs'));
      if (!text) break;
      for (const pid of text.split('\n').filter(Boolean).map(Number)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // exited meanwhile
        }
      }
    }
  }
}

/** Memory the cgroup's processes use now, in bytes; undefined when unknown. */
export function memoryInUse(cg: RunCgroup): number | undefined {
  const w = cg.host.files.memoryCurrent;
  if (!w) return undefined;
  const n = Number(read(path(cg.dirs, w))?.trim());
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

/** Whether the run tried to pass its process limit (the cgroup's `max` event count grew). */
export function pidsLimitHit(cg: RunCgroup): boolean {
  return maxEvents(cg) > cg.maxEventsBefore;
}

/** CPU time the run's processes used since it took the cgroup, in µs; undefined when unknown. */
export function runCpuUsec(cg: RunCgroup): number | undefined {
  const now = cpuUsec(cg);
  return now === undefined ? undefined : Math.max(0, now - cg.cpuUsecBefore);
}

/**
 * Which run-wide limit the run has passed, if any: `memory` when the kernel OOM-killed one of
 * its processes (the caller then ends the whole run), `cpu` when its processes together used
 * more than `cpuBudgetUsec` of CPU time.
 */
export function overRunLimit(cg: RunCgroup, cpuBudgetUsec: number): 'memory' | 'cpu' | undefined {
  if (oomKills(cg) > cg.oomKillsBefore) return 'memory';
  const used = runCpuUsec(cg);
  if (used !== undefined && used > cpuBudgetUsec) return 'cpu';
  return undefined;
}

/**
 * Returns a run's cgroup to the pool: at once when it is empty, else it waits in a draining list
 * that later acquisitions check (exited processes can take a while to be reaped, by an init that
 * is not ours).
 */
export function releaseRunCgroup(cg: RunCgroup): void {
  const pool = poolOf(cg.host);
  idleWritten.set(cg.dirs, cg.written);
  if (isEmpty(cg.host, cg.dirs) && pool.idle.length < 8) pool.idle.push(cg.dirs);
  else if (pool.draining.length < 1024) pool.draining.push(cg.dirs);
  // Past that many, stop tracking: the directories stay until the next process's probe sweeps them.
}

/** Removes empty run cgroups left by processes that have exited (found at probe time). */
export function sweepStale(base: string): void {
  let names: string[];
  try {
    names = readdirSync(base);
  } catch {
    return;
  }
  for (const name of names) {
    const pid = Number(/^(?:run|probe)-(\d+)-\d+$/.exec(name)?.[1]);
    if (!pid || pid === process.pid || isAlive(pid)) continue;
    try {
      rmdirSync(join(base, name)); // fails, harmlessly, while it still holds a process
    } catch {
      // busy or gone
    }
  }
}

/** Whether a process of that id exists (one of another user's counts). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function readCount(p: string): number {
  const t = read(p);
  return t === undefined ? Number.NaN : Number(t.trim());
}

function maxEvents(cg: RunCgroup): number {
  const w = cg.host.files.pidsEvents;
  const m = w ? /^max (\d+)/m.exec(read(path(cg.dirs, w)) ?? '') : null;
  return m ? Number(m[1]) : 0;
}

/** OOM kills in the cgroup so far (v1 `memory.oom_control`, v2 `memory.events`: `oom_kill N`). */
function oomKills(cg: RunCgroup): number {
  const w = cg.host.files.oomEvents;
  if (!w) return 0;
  const text = read(path(cg.dirs, w)) ?? '';
  const m = /^oom_kill (\d+)/m.exec(text);
  if (m) return Number(m[1]);
  // Kernels before 4.13 (v1) report no kill count: a hit of the limit stands in for it.
  const failcnt = cg.host.version === 1 ? readCount(join(cg.dirs[w[0]] as string, 'memory.failcnt')) : Number.NaN;
  return Number.isNaN(failcnt) ? 0 : failcnt;
}

/** CPU time the cgroup's processes used, in µs (v1 `cpuacct.usage` is in ns). */
function cpuUsec(cg: RunCgroup): number | undefined {
  const w = cg.host.files.cpuUsage;
  if (!w) return undefined;
  const text = read(path(cg.dirs, w));
  if (text === undefined) return undefined;
  if (cg.host.version === 1) return Math.floor(Number(text.trim()) / 1000);
  const m = /^usage_usec (\d+)/m.exec(text);
  return m ? Number(m[1]) : undefined;
}

/** Makes the directories of one run with `limits`; returns its cgroup, or undefined. */
export function createRunCgroup(c: RunCgroups, limits: CgroupLimits, tag = 'run'): RunCgroup | undefined {
  const name = `${tag}-${process.pid}-${++counter}`;
  const dirs: string[] = [];
  for (const b of c.bases) {
    const dir = join(b, name);
    try {
      mkdirSync(dir);
    } catch {
      for (const d of dirs) rmdirSync(d);
      return undefined;
    }
    dirs.push(dir);
  }
  const cg = runCgroup(c, dirs, new Map());
  if (!setRunLimits(cg, limits)) {
    for (const d of dirs) rmdirSync(d);
    return undefined;
  }
  return cg;
}

/** Removes a cgroup once its processes are gone (retrying briefly while the kernel reaps them). */
async function removeRunCgroup(dirs: readonly string[]): Promise<void> {
  for (const dir of dirs) {
    for (let i = 0; i < 100; i++) {
      try {
        rmdirSync(dir);
        break;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') break;
        await sleep(5);
      }
    }
  }
}
