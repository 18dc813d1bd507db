/**
 * @forge/sandbox — run a command in a minimal bubblewrap jail, failing closed.
 *
 * Public API. Everything exported here is a deliberate, documented decision.
 */
export {
  type BindCheck,
  type BindRequest,
  type BindRules,
  type CanonicalPath,
  type CheckedBind,
  CODE_PATH_NAMES,
  canonicalBindPath,
  checkBind,
  closeBinds,
  defaultDenyList,
} from './binds.js';
export {
  describeRunLimits,
  type EnforcedLimits,
  type LimitMechanism,
  type RunCgroups,
  type RunLimitsReport,
} from './cgroup-find.js';
export { DEFAULT_WARM_POOL_BYTES, warmBudget } from './demand.js';
export { type AddressClass, type AddressKind, classifyAddress } from './egress/address.js';
export type { AllowRule, DenyRule, NetworkGrant, Resolver } from './egress/guard.js';
export { EGRESS_PORTS } from './egress/inside.js';
export { newPlaceholder, type SecretEvent, type SecretRule } from './egress/intercept.js';
export type { EgressProtocol, NetworkEvent, NetworkUsage } from './egress/proxy.js';
export { SANDBOX_ERROR_CODES, SandboxError, type SandboxErrorCode } from './errors.js';
export { EVENTS_FD } from './launcher.js';
export { discardPrebuilt, makeStageDir, type PrebuiltStats, prebuiltStats, type Warmup } from './prebuilt.js';
export {
  type HostInfo,
  type HostProblem,
  type ProbeOptions,
  probe,
  ROOT_SANDBOX_UID,
  type RootEntry,
  type SandboxIdentity,
} from './probe.js';
export {
  buildBwrapArgs,
  DEFAULT_LIMITS,
  ETC_DIRS,
  ETC_FILES,
  type FdPlan,
  type HostLayout,
  type Limits,
  type Mount,
  type NetworkAccess,
  PROC_MASKED,
  PROC_READ_ONLY,
  type ProcCover,
  resolveLimits,
  SANDBOX_UID,
  type SandboxProfile,
} from './profile.js';
export { type EndReason, type RunOptions, type RunOutput, type RunResult, runSandboxed, sandboxesGone } from './run.js';
export type { PrebuildOptions } from './run-start.js';
export { type ResolveRuntimesOptions, type Runtime, type RuntimeTable, resolveRuntimes, runtimeNames } from './runtimes.js';
export { buildSeccompFilter, hostSeccompArch, SECCOMP_RULES, type SeccompArch, type SeccompRule } from './seccomp.js';
export { type SpawnExit, type SpawnedSandbox, type SpawnOptions, spawnSandboxed } from './spawn.js';
export { type LaunchFailure, launchFailure, userTasks } from './start.js';
export { DEFAULT_NODE_PRELOAD, DEFAULT_PYTHON_PRELOAD, type WarmOptions } from './warm.js';
