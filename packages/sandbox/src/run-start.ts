/**
 * A run's start (runSandboxed's first steps): its plan (the profile as bwrap will be told it, and
 * what the launch needs), a sandbox built ahead when one of its shape waits, and the launch, which
 * gives back everything taken for it when it fails.
 */
import { basename } from 'node:path';
import type { CheckedBind } from './binds.js';
import type { CgroupLimits, RunCgroups } from './cgroup.js';
import { DEFAULT_WARM_POOL_BYTES } from './demand.js';
import type { Substitution } from './egress/intercept.js';
import type { PreloadFile } from './egress/preload.js';
import { SandboxError } from './errors.js';
import { type BindGrant, grantBinds } from './identity.js';
import {
  ARGS_FD,
  argsFdFor,
  BIND_FD,
  descriptorsShort,
  HOLDER_FD,
  holdRun,
  type Launched,
  launch,
  launcherRefused,
  PRELUDE,
  shellQuote,
} from './launcher.js';
import {
  finishPrebuilt,
  INNER_COMMAND,
  type PrebuiltClaim,
  runLine,
  type Shape,
  sourcedCommand,
  sourcedLine,
  sourcedScript,
  takePrebuilt,
} from './prebuilt.js';
import {
  coverInherited,
  egressKit,
  hostLayout,
  type ProcessLimitBy,
  perRunMounts,
  planMounts,
  processLimitBy,
  type ReadyHost,
  resolveNetwork,
  rlimitSteps,
  runProcessLimit,
  sandboxSeccomp,
  withEgress,
} from './prepare.js';
import type { SandboxIdentity } from './probe.js';
import { buildBwrapArgs, type HostLayout, type Limits, type Mount, resolveLimits, type SandboxProfile, sandboxEnv } from './profile.js';
import type { Staged } from './staging.js';
import { startCalls, startCommand, startSteps } from './start.js';
import {
  checkPreload,
  defaultPreload,
  NODE_WARM_CPU_SECONDS,
  pythonLoader,
  startVariables,
  WARM_CPU_SECONDS,
  WARM_FD,
  type WarmOptions,
  warmFit,
  warmLine,
} from './warm.js';
import { nodeLoader, nodeStartOptions } from './warm-node.js';

/** What a run is, once planned: everything its launch and its watch need. */
export interface RunPlan {
  /** The profile as bwrap is told it: command behind its start shell (or holder), per-run mounts, egress. */
  profile: SandboxProfile;
  /** The caller's command. */
  toolCommand: readonly string[];
  /** The caller's mounts, and {@link profile}'s (a per-run file too large to copy in is bound as it is). */
  given: readonly Mount[];
  mounts: readonly Mount[];
  /**
   * The output directories ({@link Mount.perRun} `rw`); a run with any runs behind a holder, as
   * does every run a sandbox built ahead serves (prebuilt-sandbox.ts, `runLine`).
   */
  outputs: Mount[];
  hold: boolean;
  limits: Limits;
  network: ReturnType<typeof resolveNetwork>;
  pidsBy: ProcessLimitBy;
  processes: number | undefined;
  /** The egress preload's host file, for a run with network. */
  preload: PreloadFile | undefined;
  /** What its egress proxy substitutes, for a run with placeholder secrets. */
  substitution?: Substitution;
  binds: readonly CheckedBind[];
  identity: SandboxIdentity;
  layout: HostLayout;
  seccomp: Buffer;
  /** bwrap, behind setpriv when this process is root. */
  bwrapArgv: string[];
  cgroupLimits: CgroupLimits;
  cgroups: { base: RunCgroups; limits: CgroupLimits } | undefined;
  /** The launcher's rlimit steps. */
  steps: string[];
  /** Whether the tool gets an events pipe. */
  events: boolean;
}

/** Plans a run of `profile` on `host` (throws `invalid_profile` for a per-run mount it cannot use). */
export function planRun(host: ReadyHost, profile: SandboxProfile, events: boolean): RunPlan {
  const limits = resolveLimits(profile.limits);
  const network = resolveNetwork(profile.network);
  // The tool's command starts behind the shell that sets its process limit inside its own user
  // namespace and marks the start on stderr (start.ts); a sandbox built ahead runs those steps itself.
  const pidsBy = processLimitBy(host);
  const processes = runProcessLimit(limits, pidsBy);
  const toolCommand = profile.command;
  // A run with output directories runs behind a holder: a shell inside that says when the tool is
  // done and keeps the sandbox (its tmpfs) alive while the host copies them out. It takes the
  // start steps too; any other run gets a shell of its own for them.
  const hold = (profile.mounts ?? []).some((m) => m.perRun && m.mode === 'rw');
  if (!hold) profile = { ...profile, command: startCommand(toolCommand, processes) };
  // The preload's host file exists only from just before the launch until the sandbox has mounted it.
  const kit = network ? egressKit(network) : undefined;
  const preload = kit?.preload;
  if (preload) profile = withEgress(profile, preload);
  const given = profile.mounts ?? [];
  profile = { ...profile, mounts: perRunMounts(given) };
  const mounts = profile.mounts ?? [];
  if (hold) profile = { ...profile, command: [...holderCommand(startSteps('"$1"', processes)), ...profile.command] };
  const cgroupLimits = { processes: limits.processes, memoryBytes: limits.memoryBytes, cpuCores: limits.cpuCores };
  return {
    profile,
    toolCommand,
    given,
    mounts,
    outputs: mounts.filter((m) => m.perRun && m.mode === 'rw'),
    hold,
    limits,
    network,
    pidsBy,
    processes,
    preload,
    ...(kit?.substitution ? { substitution: kit.substitution } : {}),
    binds: profile.binds ?? [],
    identity: host.identity,
    layout: hostLayout(host),
    seccomp: sandboxSeccomp(host.arch),
    // bwrap, behind setpriv when this process is root: the sandbox then runs as an unprivileged
    // host uid, so no uid of it maps to host root.
    bwrapArgv: [...host.identity.drop, host.bwrap.path],
    cgroupLimits,
    cgroups: host.cgroups ? { base: host.cgroups, limits: cgroupLimits } : undefined,
    // Root without a pids cgroup does not get this far (see probe()).
    steps: rlimitSteps(limits, { events }),
    events,
  };
}

/**
 * The holder of a run with output directories that builds its own sandbox: takes the start steps
 * (start.ts: it is the shell that starts the command, so no other is needed), runs the command
 * without the channel, says `done <status>` on it, waits there for the host, exits with the status.
 */
function holderCommand(start: readonly string[]): string[] {
  const run = holdRun(`"$@" ${HOLDER_FD}>&-`, HOLDER_FD);
  return ['/bin/sh', '-c', `${start.join(' && ')} && ${run}`, 'sandbox'];
}

/** How a run is served by a sandbox built ahead (see {@link RunOptions.prebuild}). */
export interface PrebuildOptions {
  stageDir: string;
  warm?: WarmOptions;
  /**
   * Keep at least this many sandboxes of the run's shape waiting (at most four), for a caller
   * that runs the shape several times in a row, faster than one is built (a call's hooks).
   */
  ready?: number;
  /**
   * A run whose command is `/bin/sh SCRIPT` (no option, SCRIPT an absolute path) is read by the
   * shell already waiting in its sandbox, in a subshell of it, instead of by a new shell: one
   * exec less. The script runs as under `/bin/sh SCRIPT` (`$0` is SCRIPT, no positional
   * parameters, nothing the waiting shell defined, the run's environment, limits and
   * descriptors), except that `$$` and `$PPID` are the waiting shell's (a subshell keeps its
   * parent's). For short scripts run often (a call's hooks). Ignored with `warm`.
   */
  shell?: boolean;
}

/**
 * A sandbox built ahead for the run, when it fits one: its shape is everything bwrap is told but
 * the command, the environment and the per-run mounts' sources. Undefined when the run does not
 * fit (network, binds, or a per-run file too large to copy in, which is bound as it is: a sandbox
 * built ahead would keep the inode it was built with, not this run's).
 */
export async function claimPrebuilt(plan: RunPlan, prebuild: PrebuildOptions, signal?: AbortSignal): Promise<PrebuiltClaim | undefined> {
  const { stageDir, warm, ready } = prebuild;
  const { profile, mounts, given, cgroups } = plan;
  if (plan.network || plan.binds.length > 0 || !mounts.every((m, i) => m.perRun === given[i]?.perRun)) return undefined;
  const perRun = mounts.filter((m) => m.perRun && m.mode === 'ro');
  const staged = perRun.map((m) => m.source);
  const slots = staged.map(() => 'ro' as const);
  const optionsFor = shapeOptions(profile, mounts, plan.layout, plan.limits, plan.identity);
  const keyOf = optionsFor(
    slots.map((_, i) => `/\0slot${i}`),
    true,
  );
  const warmShape = warm ? warmFor(plan, perRun, warm) : undefined;
  // A `/bin/sh SCRIPT` run its waiting shell reads itself, when asked: its sandboxes are built
  // with the script as the shell's $0.
  const script = prebuild.shell && !warmShape ? sourcedScript(plan.toolCommand) : undefined;
  const shape: Shape = {
    key: [
      ...plan.bwrapArgv,
      stageDir,
      cgroups?.base.bases.join(':') ?? '',
      ...keyOf.options,
      ...keyOf.opens,
      ...(warmShape
        ? ['\0warm', String(warmShape.shape.slot), String(warmShape.shape.processes), ...warmShape.preload, '\0', ...warmShape.shape.inner]
        : []),
      ...(script !== undefined ? ['\0sourced', script] : []),
    ].join('\0'),
    label: basename(plan.toolCommand[0] ?? ''),
    stageDir,
    slots,
    bwrap: plan.bwrapArgv,
    options: optionsFor,
    ...(cgroups ? { cgroups: cgroups.base } : {}),
    seccomp: plan.seccomp,
    cover: coverInherited,
    ...(warmShape ? { warm: warmShape.shape } : {}),
    ...(script !== undefined ? { inner: sourcedCommand(script) } : {}),
  };
  if (warmShape) {
    const line = warmLine(warmShape.startKeys, sandboxEnv(profile), plan.limits.cpuSeconds);
    return takePrebuilt(shape, staged, line, plan.cgroupLimits, signal, ready);
  }
  const env = Object.entries(sandboxEnv(profile)).map(([k, v]) => `${k}=${shellQuote(v)}`);
  // The waiting shell started with bwrap's environment (only PWD, from --chdir), as a command
  // bwrap starts itself does; it adds the run's own.
  const start = startCalls(shellQuote(plan.toolCommand[0] as string), plan.processes, script && shellQuote(script));
  const steps = [`export ${env.join(' ')}`, ...plan.steps, ...start];
  const line = script !== undefined ? sourcedLine(steps) : runLine(steps, plan.toolCommand);
  return takePrebuilt(shape, staged, line, plan.cgroupLimits, undefined, ready);
}

/**
 * The warm shape of a run, when its command can start warm (warm.ts): the sandbox is built with
 * the run's start steps and its own command line (whose script holds the loader until a run
 * takes it), behind the holder when the run has output directories. Everything that differs by
 * run is left out of it: the environment (the interpreter starts with `warm.env` only, on top of
 * the sandbox's base variables; the run's replaces it), and the per-run files' bytes.
 */
function warmFor(
  plan: RunPlan,
  perRun: readonly Mount[],
  warm: WarmOptions,
): { shape: NonNullable<Shape['warm']>; startKeys: string[]; preload: readonly string[] } | undefined {
  const fit = warmFit(plan.toolCommand, perRun);
  if (typeof fit === 'string') return undefined;
  const preload = warm.preload ?? defaultPreload(fit.kind);
  const bad = checkPreload(fit.kind, preload);
  if (bad) throw new SandboxError('invalid_profile', `prebuild.warm: ${bad}`);
  if (warm.poolBytes !== undefined && !(Number.isSafeInteger(warm.poolBytes) && warm.poolBytes >= 0)) {
    throw new SandboxError(
      'invalid_profile',
      `prebuild.warm.poolBytes must be a whole number of bytes, 0 or more (got ${String(warm.poolBytes)}); leave it out for ${DEFAULT_WARM_POOL_BYTES >> 20} MiB`,
    );
  }
  // A run that would not start as the warm interpreter started is served cold.
  const [runStart, warmStart] = [plan.profile.env ?? {}, warm.env ?? {}].map((e) => startVariables(fit, plan.toolCommand, e));
  if (runStart !== warmStart) return undefined;
  let env = warm.env;
  if (fit.kind === 'node') {
    // The loader is required ahead of the main module (warm-node.ts).
    const options = nodeStartOptions(env?.NODE_OPTIONS, fit.script);
    if (options === undefined) return undefined;
    env = { ...env, NODE_OPTIONS: options };
  }
  const start = sandboxEnv({ command: plan.toolCommand, ...(env ? { env } : {}) });
  const exports = `export ${Object.entries(start)
    .map(([k, v]) => `${k}=${shellQuote(v)}`)
    .join(' ')}`;
  // Room for the warm-up's CPU time; Python's loader takes it back when its run comes (warm.ts).
  const room = fit.kind === 'python' ? WARM_CPU_SECONDS : NODE_WARM_CPU_SECONDS;
  const rlimits = rlimitSteps({ ...plan.limits, cpuSeconds: plan.limits.cpuSeconds + room }, { events: plan.events });
  const steps = [exports, ...rlimits, ...startSteps('"$1"', plan.processes)];
  // The holder keeps the channel (the loader closes its own copy once it has read its run).
  const run = holdRun('"$@"', WARM_FD);
  const inner = ['/bin/sh', '-c', `${PRELUDE}; ${steps.join(' && ')} && ${run}`, 'sandbox', ...plan.toolCommand];
  const shape = {
    inner,
    slot: fit.slot,
    loader: fit.kind === 'python' ? pythonLoader(preload) : nodeLoader(preload, WARM_FD),
    ...(plan.cgroupLimits.processes !== undefined ? { processes: plan.cgroupLimits.processes } : {}),
    ...(warm.poolBytes !== undefined ? { poolBytes: warm.poolBytes } : {}),
  };
  return { shape, startKeys: Object.keys(start), preload };
}

/**
 * The options of a sandbox built ahead in `profile`'s shape, given its per-run files'
 * placeholders: each is bound like any other mount, and its bytes are copied in when a run takes
 * it. Made out of runSandboxed's scope, from the profile without its environment: the shape is
 * kept by its pool for as long as the process lives, and must not keep a run's secrets, its
 * events sink or its caller's session alive with it.
 */
function shapeOptions(
  profile: SandboxProfile,
  mounts: readonly Mount[],
  layout: HostLayout,
  limits: Limits,
  identity: SandboxIdentity,
): (paths: readonly string[], dry?: boolean) => ReturnType<Shape['options']> {
  const { env: _env, ...bare } = profile;
  return (paths, dry = false) => {
    let i = 0;
    const ms = mounts.map((m) => (m.perRun && m.mode === 'ro' ? { ...m, source: paths[i++] as string, perRun: false } : m));
    const p = planMounts(ms, [], identity, dry);
    const a = buildBwrapArgs({ ...bare, command: INNER_COMMAND, mounts: p.mounts }, layout, p.fds, limits, { setenv: false });
    return { options: a.slice(0, a.length - INNER_COMMAND.length - 1), opens: p.opens, prefix: p.staged.prefix, remove: p.staged.remove };
  };
}

/**
 * The run's own sandbox, when none built ahead serves it: bwrap takes the command only from its
 * real command line; its options, with the environment (which may hold secrets), go through
 * `argsFd`, out of the host's process list.
 */
export interface ColdArgs {
  args: string[];
  /** How many of {@link args} are options (sent through `argsFd`); the rest is the command. */
  optionCount: number;
  opens: string[];
  staged: Staged;
  argsFd: number;
}

/** What a launched run holds on the host until it ends. */
export interface Holdings {
  claim: PrebuiltClaim | undefined;
  /** rw binds handed to the sandbox's uid for the run, when it is not this process's (root). */
  grant: BindGrant;
  cold: ColdArgs | undefined;
}

/** A launched run: its launcher (or the sandbox built ahead that serves it) and what it holds. */
export interface StartedRun extends Holdings {
  launched: Launched;
  /** performance.now() just before the launch. */
  started: number;
}

/**
 * Launches the planned run, from the sandbox built ahead when `claim` holds one. Writes the egress
 * preload first. Throws (`sandbox_unavailable`, `bind_denied`, …) having run nothing and given
 * back everything taken for the run, the claim included.
 */
export function launchRun(host: ReadyHost, plan: RunPlan, claim: PrebuiltClaim | undefined): StartedRun {
  const { binds, preload } = plan;
  preload?.write(); // (a run with network is never served by a sandbox built ahead: no claim to end)
  const held: Partial<Holdings> = { claim };
  try {
    held.grant = grantBinds(binds, plan.identity);
    if (!claim?.built) held.cold = coldArgs(plan);
  } catch (err) {
    giveBack(held, preload);
    throw err;
  }
  const holdings = held as Holdings;
  const started = performance.now();
  let launched: Launched | undefined;
  try {
    launched = claim?.built ?? launchCold(plan, holdings.cold, claim);
  } catch (err) {
    // The system would not start the launcher (launcherRefused): nothing ran, nothing is left.
    giveBack(holdings, preload);
    throw err;
  }
  if (!launched) {
    // Out of descriptors right now (looked at before the run's own are given back): the run's
    // cgroup files could not be opened, a shortage like a launcher the system would not start.
    const short = descriptorsShort();
    giveBack(holdings, preload);
    if (short) throw launcherRefused(short);
    const bases = host.cgroups?.bases.join(', ') ?? 'the cgroup hierarchies';
    throw new SandboxError(
      'sandbox_unavailable',
      `cannot create the run's cgroups under ${bases}, so its memory, CPU and process limits cannot be enforced; nothing was run (check that the directories are writable and not full: cgroup.max.descendants)`,
    );
  }
  return { ...holdings, launched, started };
}

function coldArgs(plan: RunPlan): ColdArgs {
  const { profile, binds } = plan;
  const p = planMounts(plan.mounts, binds, plan.identity);
  const args = buildBwrapArgs({ ...profile, mounts: p.mounts }, plan.layout, p.fds, plan.limits);
  const argsFd = argsFdFor(BIND_FD + binds.length + p.opens.length);
  return { args, optionCount: args.length - profile.command.length - 1, opens: p.opens, staged: p.staged, argsFd };
}

function launchCold(plan: RunPlan, cold: ColdArgs | undefined, claim: PrebuiltClaim | undefined): Launched | undefined {
  return launch({
    // The holder's channel is closed for the tool by the holder, or here when there is none.
    steps: [...plan.steps, ...(cold?.opens ?? []), ...(plan.hold ? [] : [`exec ${HOLDER_FD}<&-`])],
    argv: [
      ...(cold?.staged.prefix ?? []),
      ...plan.bwrapArgv,
      '--args',
      String(cold?.argsFd ?? ARGS_FD),
      ...(cold?.args.slice(cold.optionCount) ?? []),
    ],
    argsFd: cold?.argsFd ?? ARGS_FD,
    bindFds: plan.binds.map((b) => b.fd),
    ...(plan.cgroups ? { cgroups: plan.cgroups } : {}),
    seccomp: plan.seccomp,
    cover: coverInherited,
    ...(plan.network ? { ipc: true } : {}),
    ...(plan.events ? { events: true } : {}),
    ...(claim ? { refill: false } : {}),
  });
}

/** Gives back what a run that did not start took, in the order it was taken. */
function giveBack(held: Partial<Holdings>, preload: PreloadFile | undefined): void {
  if (held.claim) finishPrebuilt(held.claim);
  held.grant?.restore();
  held.cold?.staged.remove();
  preload?.remove();
}
