/**
 * A cgroup per run, so that limits hold for the whole run rather than per process: rlimits are
 * per process (three processes under an 8 GiB address-space limit held 9 GiB between them), and
 * RLIMIT_NPROC never applies to processes whose real user is root, as a sandbox started by root
 * stays outside its namespace.
 *
 * Per run: `pids.max` (every process and thread), a memory limit with swap shut off
 * (v2 `memory.max` + `memory.swap.max = 0`, v1 `memory.limit_in_bytes` + `memory.memsw.limit_in_bytes`),
 * a CPU rate (v2 `cpu.max`, v1 `cpu.cfs_quota_us`) and a CPU-time budget for all processes
 * together, read from v2 `cpu.stat` `usage_usec` or v1 `cpuacct.usage` and enforced by the caller
 * (it polls {@link overRunLimit} and kills the run).
 *
 * Where the cgroups are made:
 * - v1 (separate hierarchies): one `forge-sandbox` directory per hierarchy, a run has one
 *   directory in each and its launcher joins each. Needs root.
 * - v2 as root: `<cgroup2 mount>/forge-sandbox`, with the controllers enabled from the top.
 * - v2 delegated (a non-root user given a writable subtree, as systemd's `Delegate=yes` does):
 *   the process moves itself into `<own cgroup>/forge-main` (v2 lets only leaves hold
 *   processes) and makes runs under `<own cgroup>/forge-sandbox`.
 */
export interface RunCgroups {
  version: 1 | 2;
  /** `root`: made at the top of each hierarchy; `delegated`: under this process's own v2 cgroup. */
  mode: 'root' | 'delegated';
  /** One directory per hierarchy (v1) or the one v2 directory, under which each run gets a child. */
  bases: string[];
  /** The first of {@link bases} (named in messages and in the key of sandboxes built ahead). */
  base: string;
  /** What a run's cgroup enforces. `cpuBudget`: CPU time of the whole run can be read. */
  pids: boolean;
  memory: boolean;
  cpuRate: boolean;
  cpuBudget: boolean;
  /** Internal: the per-run files, resolved once. */
  files: CgroupFiles;
}

/** @deprecated the name of {@link RunCgroups} before it held more than pids. */
export type PidsCgroups = RunCgroups;

/** Where each limit lives, as (base index, file name); undefined when the host lacks it. */
export interface CgroupFiles {
  pidsMax?: Where;
  pidsCurrent?: Where;
  pidsEvents?: Where;
  memoryMax?: Where;
  /** Memory the cgroup's processes use now (v1 `memory.usage_in_bytes`, v2 `memory.current`). */
  memoryCurrent?: Where;
  /** v1 memsw or v2 swap file (written with the memory limit, or 0 for v2 swap). */
  swapMax?: Where;
  oomEvents?: Where;
  oomGroup?: Where;
  cpuMax?: Where;
  cpuPeriod?: Where;
  cpuUsage?: Where;
  kill?: Where;
  populated?: Where;
}
export type Where = [number, string];
