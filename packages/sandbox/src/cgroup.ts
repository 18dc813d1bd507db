/**
 * The cgroups of runs in one module: where they are made (cgroup-find.ts, which makes a trial
 * run's cgroup to know it can) and each run's own (cgroup-run.ts). The two import one way, find
 * on run; the rest of the package imports both from here.
 */

export {
  type CgroupSearch,
  describeRunLimits,
  type EnforcedLimits,
  enforcedBy,
  type FindCgroupsOptions,
  findPidsCgroups,
  findRunCgroups,
  type LimitMechanism,
  type PidsCgroups,
  type RunCgroups,
  type RunLimitsReport,
} from './cgroup-find.js';
export {
  acquireRunCgroup,
  BASE_NAME,
  type CgroupLimits,
  createRunCgroup,
  isAlive,
  killRunCgroup,
  memoryInUse,
  overRunLimit,
  pidsLimitHit,
  type RunCgroup,
  read,
  releaseRunCgroup,
  runCpuUsec,
  setRunLimits,
  sweepStale,
  tryWrite,
} from './cgroup-run.js';
