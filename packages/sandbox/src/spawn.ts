import type { ChildProcess } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { type EnforcedLimits, enforcedBy, killRunCgroup, pidsLimitHit, type RunCgroup } from './cgroup.js';
import type { PreloadFile } from './egress/preload.js';
import type { NetworkUsage } from './egress/proxy.js';
import { SandboxError } from './errors.js';
import { type BindGrant, grantBinds } from './identity.js';
import { killSandboxTree } from './kill-tree.js';
import { argsFdFor, BIND_FD, finished, killLauncher, type Launched, launch } from './launcher.js';
import {
  assertHostReady,
  coverInherited,
  type Egress,
  type EndReason,
  egressKit,
  endOf,
  hostLayout,
  type MountPlan,
  perRunMounts,
  planMounts,
  processLimitBy,
  type ReadyHost,
  resolveNetwork,
  rlimitSteps,
  runProcessLimit,
  sandboxSeccomp,
  startEgress,
  Tail,
  watchCgroupLimits,
  withEgress,
} from './prepare.js';
import { probe } from './probe.js';
import { buildBwrapArgs, type Limits, type Mount, resolveLimits, type SandboxProfile } from './profile.js';
import type { Staged } from './staging.js';
import { launchFailure, StartWatch, startCommand, userTasks } from './start.js';

export interface SpawnOptions {
  /** Use this bwrap (default: the one `probe()` found on PATH). */
  bwrapPath?: string;
  /** Kills the sandbox when aborted (`exited` then says `signal`, SIGKILL). */
  signal?: AbortSignal;
}

/** How a spawned sandbox ended. */
export interface SpawnExit {
  /** A normal `exit`, a `signal` (kill(), the abort signal, or one the process got), or the limit that stopped it (`cpu`, `memory`, `file_size`). */
  reason: EndReason;
  /** The process's exit code (null when it died of a signal). */
  exitCode: number | null;
  /** The signal that ended it, when one did (`SIGKILL`, `SIGXCPU`, …). */
  signal: string | null;
  /** From the start of the sandbox to its end. */
  durationMs: number;
  /** The last `limits.stderrTailBytes` bytes of stderr, as UTF-8. */
  stderrTail: string;
  /** True when it tried to exceed `limits.processes` (known where a pids cgroup enforces it). */
  processLimitHit: boolean;
  /**
   * Set when the sandbox never started the process (bwrap, setpriv or the starting shell failed;
   * `stderrTail` is then theirs): the cause and its fix, in one sentence.
   */
  startFailure?: string;
}

/** A long-lived process in a sandbox, with its stdio open. See {@link spawnSandboxed}. */
export interface SpawnedSandbox {
  /** The process's stdin; stays open until the caller ends it (`end()` gives it end-of-file). */
  readonly stdin: Writable;
  /** The process's stdout, raw and not capped: the caller bounds what it reads. */
  readonly stdout: Readable;
  /** The last `limits.stderrTailBytes` bytes of stderr so far, as UTF-8. */
  stderrTail(): string;
  /**
   * The host pid of the sandbox's launcher, which leads its process group: every process of the
   * sandbox descends from it. For logs and manifests; once `exited` settled it may be another
   * process's, so never signal it (use `kill()`).
   */
  readonly pid: number | undefined;
  /** The host uid its processes run as: this process's, or the sandbox's own when this process is root (never 0). */
  readonly hostUid: number;
  /** How its memory, CPU and process limits are enforced (as {@link RunResult.enforced}). */
  readonly enforced: EnforcedLimits;
  /** What its network did so far; undefined when the profile granted none. */
  network(): NetworkUsage | undefined;
  /**
   * SIGKILLs every process of the sandbox (`exited` then settles with `signal`, or the limit it
   * was already ending for). `reason` is the caller's note for its own logs; it changes nothing.
   */
  kill(reason?: string): void;
  /** Settles (never rejects) once every process of the sandbox is gone and all it held is released. */
  readonly exited: Promise<SpawnExit>;
}

/**
 * Starts `profile` in a fresh bubblewrap sandbox, with the guarantees of `runSandboxed` (private
 * namespaces, no capabilities, the seccomp filter, never host root, binds by descriptor, the
 * curated /etc and /proc, network only through the egress proxy when granted, cgroup limits for
 * the whole sandbox where this process can make cgroups and rlimits otherwise, and death with
 * this process), and leaves its stdin and stdout open: for a server that speaks over stdio.
 *
 * There is no wall-clock limit: `limits.timeoutMs` does not apply (the process lives until it
 * exits, {@link SpawnedSandbox.kill}, the abort signal, or a limit ends it). Output caps
 * (`outputBytes`, `outputHardBytes`) do not apply either: stdout is the caller's to bound. No
 * sandbox built ahead serves it, and it has no events pipe. Per-run `rw` mounts (output
 * directories) are refused (`invalid_profile`); a per-run `ro` file is copied in as by
 * `runSandboxed`.
 *
 * Resolves once the process is started (with network: once the relay holds its sockets and
 * lets it start). Rejects with `SandboxError` where `runSandboxed` would (`sandbox_unavailable`,
 * `bind_denied`, `invalid_profile`), having started nothing. Once `exited` settles, every process
 * of it is gone, its staged files, proxy and sockets are removed, rw binds handed to the sandbox
 * uid are given back, and its cgroup (empty) is back in the pool runs share. The sandbox holds
 * this process's event loop while it lives (its stdio pipes do).
 */
export async function spawnSandboxed(profile: SandboxProfile, options: SpawnOptions = {}): Promise<SpawnedSandbox> {
  const host = await probe(options.bwrapPath ? { bwrapPath: options.bwrapPath } : {});
  assertHostReady(host);
  const limits = resolveLimits(profile.limits);
  refuseOutputDirs(profile.mounts ?? []);
  const network = resolveNetwork(profile.network);
  profile = { ...profile, mounts: perRunMounts(profile.mounts ?? []) };
  // The process starts behind the shell that sets its process limit in its own user namespace (start.ts).
  const pidsBy = processLimitBy(host);
  profile = { ...profile, command: startCommand(profile.command, runProcessLimit(limits, pidsBy)) };
  // The preload's host file exists only from just before the launch until the sandbox has mounted it.
  const kit = network ? egressKit(network) : undefined;
  const preload = kit?.preload;
  if (preload) profile = withEgress(profile, preload);
  const spawned = launchSpawn(host, profile, limits, { preload, ipc: network !== undefined });
  const { child, cgroup } = spawned.launched;
  const started = performance.now();
  const argsPipe = (child.stdio as unknown as (Writable | null)[])[spawned.argsFd];
  argsPipe?.on('error', () => {});
  argsPipe?.end(spawned.options);
  const stdin = child.stdin as Writable;
  const stdout = child.stdout as Readable;
  stdin.on('error', () => {}); // the process may exit without reading: the caller sees `exited`

  let relayUp: () => void = () => {};
  const relayed = new Promise<void>((resolve) => {
    relayUp = resolve;
  });
  const egress: Egress | undefined = network
    ? startEgress(
        child,
        network,
        () => {
          preload?.remove(); // the relay runs: bwrap has mounted everything
          relayUp();
        },
        kit?.substitution,
      )
    : undefined;

  const watch = new SpawnWatch(child, cgroup, limits.cpuSeconds * 1e6, options.signal);
  const stderr = new Tail(limits.stderrTailBytes);
  const start = new StartWatch();
  child.stderr?.on('data', (chunk: Buffer) => stderr.push(start.push(chunk)));

  let failed: Error | undefined;
  child.on('error', (err) => {
    failed ??= err;
  });
  const exited = new Promise<SpawnExit>((resolve) => {
    child.on('close', (code, signal) => {
      watch.close();
      // The process is gone: so are its connections, and the sockets in its namespace.
      void egress?.proxy.close();
      preload?.remove();
      stderr.push(start.flush());
      const stderrTail = stderr.text();
      const end = endOf({ code, signal, ended: watch.ended, cgroup, cpuBudgetUsec: watch.cpuBudgetUsec, stderrTail });
      const processLimitHit = cgroup ? pidsLimitHit(cgroup) : false;
      finished(spawned.launched);
      spawned.grant.restore();
      spawned.staged.remove();
      relayUp(); // a relay that never started: the start below sees it from `exited`
      const why =
        !start.started && !watch.ended
          ? launchFailure(start.before, `exited ${end.exitCode ?? end.signal}`, { tasks: () => userTasks(host.identity.uid) })
          : undefined;
      resolve({
        ...end,
        durationMs: Math.round(performance.now() - started),
        stderrTail,
        processLimitHit,
        ...(why ? { startFailure: `${why.message}; fix: ${why.fix}` } : {}),
      });
    });
  });
  watch.armAbort();

  if (egress) {
    await relayed;
    if (!egress.started() && !watch.ended) {
      const end = await exited;
      throw new SandboxError(
        'sandbox_unavailable',
        `the sandbox's network relay did not start, so the process did not run (exit ${end.exitCode ?? end.signal}): ${failed?.message ?? (end.stderrTail.trim() || 'no message')}`,
      );
    }
  } else if (child.pid === undefined) {
    // (A launcher started ahead, one of runSandboxed's ready ones, has long since spawned; a new
    // one has a pid from the moment it did.)
    const end = await exited;
    throw new SandboxError(
      'sandbox_unavailable',
      `the sandbox's launcher (/bin/sh) could not start, so nothing ran: ${failed?.message ?? end.stderrTail}`,
    );
  }

  return {
    stdin,
    stdout,
    stderrTail: () => stderr.text(),
    pid: child.pid,
    hostUid: host.identity.uid,
    enforced: enforcedBy(cgroup?.host, pidsBy === 'userns' ? 'userns' : 'rlimit'),
    network: () => egress?.proxy.usage,
    kill: () => watch.kill('signal'),
    exited,
  };
}

/** Refuses output directories: nothing copies them out of a process that lives on. */
function refuseOutputDirs(mounts: readonly Mount[]): void {
  const outputs = mounts.filter((m) => m.perRun && m.mode === 'rw');
  if (outputs.length > 0) {
    throw new SandboxError(
      'invalid_profile',
      `spawnSandboxed does not support per-run rw mounts (output directories): ${outputs.map((m) => m.source).join(', ')}; mount a directory with perRun unset, or use runSandboxed, which copies output directories out when the run ends`,
    );
  }
}

/** A launched sandbox of spawnSandboxed, with what it holds on the host until it ends. */
interface Spawned {
  launched: Launched;
  grant: BindGrant;
  staged: Staged;
  argsFd: number;
  /** bwrap's options, NUL-separated, for `argsFd`. */
  options: string;
}

/**
 * Launches `profile` (its command behind its start shell, its egress mounted). Writes the egress
 * preload first; `ipc`: the launcher gets the channel the egress relay hands its sockets over.
 * Throws (`sandbox_unavailable`, `bind_denied`, …) having started nothing and given back
 * everything taken for it.
 */
function launchSpawn(
  host: ReadyHost,
  profile: SandboxProfile,
  limits: Limits,
  { preload, ipc }: { preload: PreloadFile | undefined; ipc: boolean },
): Spawned {
  const binds = profile.binds ?? [];
  const identity = host.identity;
  let grant: BindGrant | undefined;
  let plan: MountPlan | undefined;
  let args: string[];
  try {
    grant = grantBinds(binds, identity);
    plan = planMounts(profile.mounts ?? [], binds, identity);
    args = buildBwrapArgs({ ...profile, mounts: plan.mounts }, hostLayout(host), plan.fds, limits);
  } catch (err) {
    plan?.staged.remove();
    grant?.restore();
    preload?.remove();
    throw err;
  }
  // bwrap takes the command only from its real command line; its options, with the environment
  // (which may hold secrets), go through argsFd, out of the host's process list.
  const optionCount = args.length - profile.command.length - 1;
  const argsFd = argsFdFor(BIND_FD + binds.length + plan.opens.length);
  const cgroupLimits = { processes: limits.processes, memoryBytes: limits.memoryBytes, cpuCores: limits.cpuCores };
  const cgroups = host.cgroups ? { base: host.cgroups, limits: cgroupLimits } : undefined;
  preload?.write();
  let launched: Launched | undefined;
  try {
    launched = launch({
      steps: [...rlimitSteps(limits, { events: false }), ...plan.opens],
      // bwrap, behind setpriv when this process is root: no uid of the sandbox maps to host root.
      argv: [...plan.staged.prefix, ...identity.drop, host.bwrap.path, '--args', String(argsFd), ...args.slice(optionCount)],
      argsFd,
      bindFds: binds.map((b) => b.fd),
      ...(cgroups ? { cgroups } : {}),
      seccomp: sandboxSeccomp(host.arch),
      cover: coverInherited,
      ...(ipc ? { ipc: true } : {}),
      // A server holds its launcher for as long as it lives: none is started ahead for its sake.
      refill: false,
    });
  } catch (err) {
    // The system would not start the launcher (launcherRefused): nothing was started.
    plan.staged.remove();
    grant.restore();
    preload?.remove();
    throw err;
  }
  if (!launched) {
    plan.staged.remove();
    grant.restore();
    preload?.remove();
    const bases = host.cgroups?.bases.join(', ') ?? 'the cgroup hierarchies';
    throw new SandboxError(
      'sandbox_unavailable',
      `cannot create the sandbox's cgroups under ${bases}, so its memory, CPU and process limits cannot be enforced; nothing was started (check that the directories are writable and not full: cgroup.max.descendants)`,
    );
  }
  return { launched, grant, staged: plan.staged, argsFd, options: `${args.slice(0, optionCount).join('\0')}\0` };
}

/** A spawned sandbox's ends other than its own exit: kill(), the abort signal, the cgroup's limits. */
class SpawnWatch {
  /** Why it was killed, when it was (the first reason given). */
  ended: EndReason | undefined;
  #closed = false;
  readonly #timer: ReturnType<typeof setInterval> | undefined;
  readonly #onAbort = () => this.kill('signal');

  constructor(
    readonly child: ChildProcess,
    readonly cgroup: RunCgroup | undefined,
    readonly cpuBudgetUsec: number,
    readonly signal: AbortSignal | undefined,
  ) {
    this.#timer = watchCgroupLimits(cgroup, cpuBudgetUsec, (why) => this.kill(why));
    signal?.addEventListener('abort', this.#onAbort);
  }

  /** Kills it now if the signal was aborted before the start. */
  armAbort(): void {
    if (this.signal?.aborted) this.#onAbort();
  }

  kill(why: EndReason): void {
    // Once bwrap is reaped its pid (the launcher's process group) may be another process's.
    if (this.#closed) return;
    this.ended ??= why;
    if (this.cgroup) {
      killLauncher(this.child);
      killRunCgroup(this.cgroup);
    } else killSandboxTree(this.child); // what a process group kill can miss (kill-tree.ts)
  }

  /** The sandbox is gone: stops watching. */
  close(): void {
    this.#closed = true;
    clearInterval(this.#timer);
    this.signal?.removeEventListener('abort', this.#onAbort);
  }
}
