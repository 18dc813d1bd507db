import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A pids cgroup per run, for hosts where RLIMIT_NPROC does not hold: the kernel never applies it
 * to processes whose real user is root, and a sandbox started by root keeps root as its real user
 * outside the namespace. The cgroup's `pids.max` caps every process and thread of the run.
 */
export interface PidsCgroups {
  version: 1 | 2;
  /** Directory under which one child cgroup per run is made. */
  base: string;
}

const BASE_NAME = 'forge-sandbox';

function tryWrite(path: string, text: string): boolean {
  try {
    writeFileSync(path, text);
    return true;
  } catch {
    return false;
  }
}

/** Finds (and prepares) a writable pids cgroup hierarchy, or returns undefined. */
export function findPidsCgroups(): PidsCgroups | undefined {
  const v2root = '/sys/fs/cgroup';
  try {
    if (existsSync(join(v2root, 'cgroup.controllers'))) {
      const controllers = readFileSync(join(v2root, 'cgroup.controllers'), 'utf8').split(/\s+/);
      if (!controllers.includes('pids')) return undefined;
      const base = join(v2root, BASE_NAME);
      mkdirSync(base, { recursive: true });
      // Children of `base` get the pids controller only if both levels delegate it.
      tryWrite(join(v2root, 'cgroup.subtree_control'), '+pids');
      if (!tryWrite(join(base, 'cgroup.subtree_control'), '+pids')) return undefined;
      return check({ version: 2, base });
    }
    const v1 = join(v2root, 'pids');
    if (existsSync(join(v1, 'cgroup.procs'))) {
      const base = join(v1, BASE_NAME);
      mkdirSync(base, { recursive: true });
      return check({ version: 1, base });
    }
  } catch {
    // not writable (not root, or a read-only cgroupfs in a container)
  }
  return undefined;
}

function check(c: PidsCgroups): PidsCgroups | undefined {
  sweepStale(c.base);
  const dir = createRunCgroup(c, 1, 'probe');
  if (!dir) return undefined;
  rmdirSync(dir); // empty: no process ever joined it
  return c;
}

let counter = 0;
const idle: string[] = [];
/** Released cgroups whose processes the kernel has not finished reaping yet. */
const draining: string[] = [];

/**
 * A cgroup for one run with `pids.max = max`, reused from earlier runs when one is empty (making
 * and removing a cgroup costs more than the rest of a short run). Returns undefined when none can
 * be made. Give it back with {@link releaseRunCgroup}.
 */
export function acquireRunCgroup(c: PidsCgroups, max: number): RunCgroup | undefined {
  // Look at the oldest few draining cgroups only: checking each costs a read, and the list can
  // hold many while an init that is not ours takes its time reaping exited processes.
  for (let i = 0; i < 4 && draining.length > 0; i++) {
    const d = draining[0] as string;
    if (readCount(join(d, 'pids.current')) !== 0) break;
    draining.shift();
    if (idle.length < 8) idle.push(d);
    else void removeRunCgroup(d);
  }
  let dir: string | undefined;
  while (!dir && idle.length > 0) {
    const d = idle.pop() as string;
    if (readCount(join(d, 'pids.current')) === 0 && tryWrite(join(d, 'pids.max'), String(max))) dir = d;
  }
  dir ??= createRunCgroup(c, max);
  if (!dir) return undefined;
  return { dir, maxEventsBefore: maxEvents(dir) };
}

export interface RunCgroup {
  dir: string;
  maxEventsBefore: number;
}

/**
 * Sets a cgroup's process limit for the run about to use it (and starts counting limit hits from
 * now). False when the limit cannot be written.
 */
export function setPidsMax(cg: RunCgroup, max: number): boolean {
  if (!tryWrite(join(cg.dir, 'pids.max'), String(max))) return false;
  cg.maxEventsBefore = maxEvents(cg.dir);
  return true;
}

/**
 * SIGKILLs every process in a run's cgroup, a few passes over (a fork may land between reading
 * the list and the kill). Killing the launcher's process group is not always enough: if it lands
 * while bwrap is still setting up, the sandbox's first process can miss its parent-death signal
 * and live on; as a member of the cgroup it cannot escape this.
 */
export function killRunCgroup(cg: RunCgroup): void {
  for (let pass = 0; pass < 5; pass++) {
    let pids: number[];
    try {
      pids = readFileSync(join(cg.dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
    } catch {
      return;
    }
    if (pids.length === 0) return;
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // exited meanwhile
      }
    }
  }
}

/** Whether the run tried to pass its process limit (the cgroup's `max` event count grew). */
export function pidsLimitHit(cg: RunCgroup): boolean {
  return maxEvents(cg.dir) > cg.maxEventsBefore;
}

/**
 * Returns a run's cgroup to the pool: at once when it is empty, else it waits in a draining list
 * that later acquisitions check (exited processes can take a while to be reaped, by an init that
 * is not ours).
 */
export function releaseRunCgroup(cg: RunCgroup): void {
  if (readCount(join(cg.dir, 'pids.current')) === 0 && idle.length < 8) idle.push(cg.dir);
  else if (draining.length < 1024) draining.push(cg.dir);
  // Past that many, stop tracking: the directory stays until the next process's probe sweeps it.
}

/** Removes empty run cgroups left by processes that have exited (found at probe time). */
function sweepStale(base: string): void {
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

function readCount(path: string): number {
  try {
    return Number(readFileSync(path, 'utf8').trim());
  } catch {
    return Number.NaN;
  }
}

function maxEvents(dir: string): number {
  try {
    const m = /^max (\d+)/m.exec(readFileSync(join(dir, 'pids.events'), 'utf8'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

/** Makes the cgroup of one run with `pids.max = max`; returns its directory, or undefined. */
function createRunCgroup(c: PidsCgroups, max: number, tag = 'run'): string | undefined {
  const dir = join(c.base, `${tag}-${process.pid}-${++counter}`);
  try {
    mkdirSync(dir);
  } catch {
    return undefined;
  }
  if (!tryWrite(join(dir, 'pids.max'), String(max))) {
    rmdirSync(dir);
    return undefined;
  }
  return dir;
}

/** Removes a cgroup once its processes are gone (retrying briefly while the kernel reaps them). */
async function removeRunCgroup(dir: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    try {
      rmdirSync(dir);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      await sleep(5);
    }
  }
}
