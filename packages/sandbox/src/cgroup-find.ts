import { accessSync, constants, existsSync, mkdirSync, rmdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { CgroupFiles, RunCgroups } from './cgroup-host.js';
import { BASE_NAME, createRunCgroup, read, sweepStale, tryWrite } from './cgroup-run.js';

export type { CgroupFiles, PidsCgroups, RunCgroups, Where } from './cgroup-host.js';

interface CgroupMount {
  fstype: 'cgroup' | 'cgroup2';
  path: string;
  /** v1: the controllers bound to it. */
  controllers: string[];
}

/** cgroup mounts of this process's mount namespace, from /proc/self/mountinfo. */
function cgroupMounts(mountinfo = read('/proc/self/mountinfo') ?? ''): CgroupMount[] {
  const out: CgroupMount[] = [];
  for (const line of mountinfo.split('\n')) {
    const [left, right] = line.split(' - ');
    if (!left || !right) continue;
    const [fstype, , superOptions = ''] = right.split(' ');
    if (fstype !== 'cgroup' && fstype !== 'cgroup2') continue;
    const path = (left.split(' ')[4] ?? '').replace(/\\(\d{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));
    out.push({ fstype, path, controllers: fstype === 'cgroup' ? superOptions.split(',') : [] });
  }
  return out;
}

/** What {@link findRunCgroups} found: the cgroups, or why there are none. */
export type CgroupSearch = { ok: true; cgroups: RunCgroups } | { ok: false; why: string };

export interface FindCgroupsOptions {
  /** Look only at this cgroup2 mount (tests, or a host with cgroup2 mounted elsewhere). */
  v2Mount?: string;
  /** Whether to try the top of the hierarchies (default: when running as root). */
  root?: boolean;
}

/**
 * Finds (and prepares) where this process can make a cgroup per run: v1 hierarchies with the
 * memory, cpu, cpuacct or pids controllers (root); else a cgroup2 hierarchy, from its top
 * (root) or under a delegated subtree this process owns. In the delegated case this process is
 * moved into a `forge-main` child of its own cgroup, once.
 */
export function findRunCgroups(options: FindCgroupsOptions = {}): CgroupSearch {
  const root = options.root ?? process.getuid?.() === 0;
  const mounts = cgroupMounts();
  const why: string[] = [];
  if (!options.v2Mount) {
    const v1 = mounts.filter((m) => m.fstype === 'cgroup' && m.controllers.some((c) => WANTED_V1.includes(c)));
    if (v1.length > 0) {
      // Not root: a hybrid host's cgroup2 hierarchy may still give a delegated subtree (below).
      if (!root) why.push('cgroup v1 hierarchies need root to make a cgroup per run, and this process is not root');
      else {
        const found = prepareV1(v1);
        if (found.ok) return found;
        why.push(found.why);
      }
    }
  }
  const v2 = options.v2Mount ?? mounts.find((m) => m.fstype === 'cgroup2')?.path;
  if (!v2) return { ok: false, why: why[0] ?? 'no cgroup hierarchy is mounted' };
  if (root) {
    const found = prepareV2Root(v2);
    if (found.ok) return found;
    why.push(found.why);
  }
  const found = prepareV2Delegated(v2);
  if (found.ok) return found;
  why.push(found.why);
  return { ok: false, why: why.join('; ') };
}

const WANTED_V1 = ['memory', 'cpu', 'cpuacct', 'pids'];

function prepareV1(mounts: CgroupMount[]): CgroupSearch {
  const bases: string[] = [];
  const files: CgroupFiles = {};
  for (const m of mounts) {
    const base = join(m.path, BASE_NAME);
    try {
      mkdirSync(base, { recursive: true });
    } catch (err) {
      return { ok: false, why: `cannot make ${base}: ${(err as Error).message}` };
    }
    const i = bases.push(base) - 1;
    const has = (c: string) => m.controllers.includes(c);
    if (has('pids')) {
      files.pidsMax = [i, 'pids.max'];
      files.pidsCurrent = [i, 'pids.current'];
      files.pidsEvents = [i, 'pids.events'];
    }
    if (has('memory')) {
      files.memoryMax = [i, 'memory.limit_in_bytes'];
      files.memoryCurrent = [i, 'memory.usage_in_bytes'];
      if (existsSync(join(m.path, 'memory.memsw.limit_in_bytes'))) files.swapMax = [i, 'memory.memsw.limit_in_bytes'];
      files.oomEvents = [i, 'memory.oom_control'];
    }
    if (has('cpu')) {
      files.cpuMax = [i, 'cpu.cfs_quota_us'];
      files.cpuPeriod = [i, 'cpu.cfs_period_us'];
    }
    if (has('cpuacct')) files.cpuUsage = [i, 'cpuacct.usage'];
  }
  return check(describe(1, 'root', bases, files));
}

/** The controllers a v2 cgroup offers its children (`cgroup.subtree_control`). */
function subtreeControllers(dir: string): string[] {
  return (read(join(dir, 'cgroup.subtree_control')) ?? '').split(/\s+/).filter(Boolean);
}

/** Enables what it can of memory, cpu and pids for `dir`'s children; returns what is enabled. */
function enableV2(dir: string, available: readonly string[]): string[] {
  for (const c of ['memory', 'cpu', 'pids']) if (available.includes(c)) tryWrite(join(dir, 'cgroup.subtree_control'), `+${c}`);
  return subtreeControllers(dir);
}

function v2Files(enabled: readonly string[], base: string): CgroupFiles {
  const files: CgroupFiles = { cpuUsage: [0, 'cpu.stat'], kill: [0, 'cgroup.kill'], populated: [0, 'cgroup.events'] };
  if (enabled.includes('pids')) {
    files.pidsMax = [0, 'pids.max'];
    files.pidsCurrent = [0, 'pids.current'];
    files.pidsEvents = [0, 'pids.events'];
  }
  if (enabled.includes('memory')) {
    files.memoryMax = [0, 'memory.max'];
    files.memoryCurrent = [0, 'memory.current'];
    files.oomEvents = [0, 'memory.events'];
    files.oomGroup = [0, 'memory.oom.group'];
    // memory.swap.max exists only with swap accounting; without it swap is not charged at all.
    if (existsSync(join(base, 'memory.swap.max'))) files.swapMax = [0, 'memory.swap.max'];
  }
  if (enabled.includes('cpu')) files.cpuMax = [0, 'cpu.max'];
  return files;
}

function prepareV2Root(mount: string): CgroupSearch {
  const available = (read(join(mount, 'cgroup.controllers')) ?? '').split(/\s+/).filter(Boolean);
  // The top may refuse (a container's namespace root holds processes): the base then gets
  // whatever the top already delegates.
  enableV2(mount, available);
  const base = join(mount, BASE_NAME);
  try {
    mkdirSync(base, { recursive: true });
  } catch (err) {
    return { ok: false, why: `cannot make ${base}: ${(err as Error).message}` };
  }
  const offered = (read(join(base, 'cgroup.controllers')) ?? '').split(/\s+/).filter(Boolean);
  const enabled = enableV2(base, offered);
  return check(describe(2, 'root', [base], v2Files(enabled, base)));
}

/**
 * A delegated v2 subtree: this process's own cgroup, if this process may write its
 * `cgroup.procs` and `cgroup.subtree_control` and no other process lives in it (v2 lets a
 * cgroup with processes have no controllers for its children, so this one moves to a child).
 */
function prepareV2Delegated(mount: string): CgroupSearch {
  const rel = /^0::(.*)$/m.exec(read('/proc/self/cgroup') ?? '')?.[1];
  if (rel === undefined) return { ok: false, why: 'this process is in no cgroup v2 (no 0:: line in /proc/self/cgroup)' };
  let own = join(mount, rel);
  // Moved here by an earlier search of this process: the subtree is the parent.
  if (rel !== '/' && own.endsWith('/forge-main') && existsSync(join(dirname(own), BASE_NAME))) own = dirname(own);
  try {
    accessSync(own, constants.W_OK);
    accessSync(join(own, 'cgroup.procs'), constants.W_OK);
    accessSync(join(own, 'cgroup.subtree_control'), constants.W_OK);
  } catch {
    return {
      ok: false,
      why: `this process's cgroup ${own} is not delegated to it (not writable): start forge in a delegated cgroup, e.g. systemd-run --user -p Delegate=yes --scope forge …`,
    };
  }
  const main = join(own, 'forge-main');
  const others = (read(join(own, 'cgroup.procs')) ?? '')
    .split('\n')
    .filter(Boolean)
    .filter((p) => Number(p) !== process.pid);
  if (others.length > 0) {
    return {
      ok: false,
      why: `${own} also holds other processes (${others.slice(0, 3).join(', ')}), so its children cannot have controllers`,
    };
  }
  try {
    mkdirSync(main, { recursive: true });
    if ((read(join(own, 'cgroup.procs')) ?? '').split('\n').includes(String(process.pid))) {
      writeFileSync(join(main, 'cgroup.procs'), String(process.pid));
    }
  } catch (err) {
    return { ok: false, why: `cannot move this process into ${main}: ${(err as Error).message}` };
  }
  const available = (read(join(own, 'cgroup.controllers')) ?? '').split(/\s+/).filter(Boolean);
  enableV2(own, available);
  const base = join(own, BASE_NAME);
  try {
    mkdirSync(base, { recursive: true });
  } catch (err) {
    return { ok: false, why: `cannot make ${base}: ${(err as Error).message}` };
  }
  const offered = (read(join(base, 'cgroup.controllers')) ?? '').split(/\s+/).filter(Boolean);
  return check(describe(2, 'delegated', [base], v2Files(enableV2(base, offered), base)));
}

function describe(version: 1 | 2, mode: 'root' | 'delegated', bases: string[], files: CgroupFiles): RunCgroups {
  return {
    version,
    mode,
    bases,
    base: bases[0] as string,
    pids: files.pidsMax !== undefined,
    memory: files.memoryMax !== undefined,
    cpuRate: files.cpuMax !== undefined,
    cpuBudget: files.cpuUsage !== undefined,
    files,
  };
}

/** Makes (and removes) one run cgroup, to know runs can have one. */
function check(c: RunCgroups): CgroupSearch {
  for (const b of c.bases) sweepStale(b);
  const cg = createRunCgroup(c, { processes: 1, memoryBytes: 64 << 20, cpuCores: 1 }, 'probe');
  if (!cg) return { ok: false, why: `cannot make a cgroup under ${c.bases.join(', ')} and set its limits` };
  for (const d of cg.dirs) rmdirSync(d); // empty: no process ever joined it
  return { ok: true, cgroups: c };
}

/** Finds a writable pids cgroup hierarchy (as root), or returns undefined. See {@link findRunCgroups}. */
export function findPidsCgroups(): RunCgroups | undefined {
  const found = findRunCgroups();
  return found.ok && found.cgroups.pids ? found.cgroups : undefined;
}

/**
 * How a limit holds: for the whole run (`cgroup`); for the run's own tasks by RLIMIT_NPROC in its
 * own user namespace (`userns`, processes only: Linux 5.14+ counts that limit per namespace);
 * per process, or for processes per user (`rlimit`).
 */
export type LimitMechanism = 'cgroup' | 'userns' | 'rlimit';

/** How a run's memory, CPU-time and process limits hold. */
export interface EnforcedLimits {
  memory: 'cgroup' | 'rlimit';
  cpu: 'cgroup' | 'rlimit';
  pids: LimitMechanism;
}

/**
 * How the limits of a run with these cgroups (or none) hold. `processes`: how the process limit
 * holds without a pids cgroup (what `probe()` found: `HostInfo.processLimit`).
 */
export function enforcedBy(c: RunCgroups | undefined, processes: 'userns' | 'rlimit' = 'rlimit'): EnforcedLimits {
  return {
    memory: c?.memory ? 'cgroup' : 'rlimit',
    cpu: c?.cpuBudget ? 'cgroup' : 'rlimit',
    pids: c?.pids ? 'cgroup' : processes,
  };
}

/** Which per-run limits apply on this host, for a diagnostic such as `forge doctor`. */
export interface RunLimitsReport extends EnforcedLimits {
  /** The cgroups each run gets, when it gets any. */
  cgroup?: { version: 1 | 2; mode: 'root' | 'delegated'; bases: string[]; cpuRate: boolean };
  /** Why runs get no cgroup here, when they get none. */
  cgroupsWhy?: string;
  /** One sentence per limit: what holds it, for what (the whole run, each process), and where. */
  explain: { memory: string; cpu: string; cpuRate: string; pids: string };
  /** One sentence for each limit that does not hold for the whole run: what applies instead, and the fix. */
  notes: string[];
}

/**
 * Says which limits hold for a whole run on this host and which only per process, from what
 * `probe()` found (`HostInfo.cgroups`, `HostInfo.cgroupsUnavailable`, `HostInfo.processLimit`).
 */
export function describeRunLimits(host: {
  cgroups?: RunCgroups;
  cgroupsUnavailable?: string;
  processLimit?: 'userns' | 'rlimit' | { cgroup: RunCgroups };
}): RunLimitsReport {
  const c = host.cgroups;
  const e = enforcedBy(c, host.processLimit === 'userns' ? 'userns' : 'rlimit');
  const why = c ? `the run's cgroup has no such controller (${c.bases.join(', ')})` : (host.cgroupsUnavailable ?? 'no cgroup');
  const fix =
    'fix: run forge as root, or start it in a delegated cgroup v2 subtree with the memory, cpu and pids controllers (systemd-run --user -p Delegate=yes --scope …)';
  const where = c ? `its cgroup (v${c.version}, ${c.mode === 'root' ? 'made as root' : 'in the delegated subtree'})` : '';
  // Without the cgroup the sentences are short: `why` is said once (RunLimitsReport.cgroupsWhy).
  const none = c ? `: no such controller in ${where}` : ': no cgroup per run';
  const notes: string[] = [];
  const explain = {
    memory: e.memory === 'cgroup' ? `whole run, by ${where}` : `per process only, by the address-space guard (RLIMIT_AS)${none}`,
    cpu: e.cpu === 'cgroup' ? `whole run (CPU time of all its processes), by ${where}` : `per process only (RLIMIT_CPU)${none}`,
    cpuRate: c?.cpuRate ? `whole run (limits.cpuCores), by ${where}` : `not limited${none}`,
    pids:
      e.pids === 'cgroup'
        ? `whole run (every process and thread), by ${where}`
        : e.pids === 'userns'
          ? "the run's own processes and threads, by RLIMIT_NPROC set inside its own user namespace (the kernel counts it per namespace, so the user's other processes do not count)"
          : "RLIMIT_NPROC set above this user's task count when the run starts (this kernel counts it per user, not per run: a backstop, not a budget)",
  };
  if (e.memory === 'rlimit') {
    notes.push(
      `memory: limits.memoryBytes is not enforced; each process only has the address-space guard (RLIMIT_AS, limits.addressSpaceBytes), so several processes of one run can together use more. Why: ${why}; ${fix}`,
    );
  }
  if (e.cpu === 'rlimit') {
    notes.push(
      `cpu: limits.cpuSeconds holds per process only (RLIMIT_CPU), so several processes of one run can together use more. Why: ${why}; ${fix}`,
    );
  }
  if (c && !c.cpuRate) notes.push(`cpu rate: limits.cpuCores is not enforced: the cpu controller is not enabled for ${c.base}`);
  if (e.pids === 'rlimit') {
    notes.push(
      `pids: limits.processes holds only as a backstop above this user's task count (this kernel counts RLIMIT_NPROC per user; Linux 5.14 and later count it per run's namespace). Why no pids cgroup: ${why}; ${fix}`,
    );
  }
  return {
    ...e,
    ...(c ? { cgroup: { version: c.version, mode: c.mode, bases: c.bases, cpuRate: c.cpuRate } } : { cgroupsWhy: why }),
    explain,
    notes,
  };
}
