import { readdirSync, readFileSync } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import type { Duplex, Writable } from 'node:stream';
import type { CheckedBind } from './binds.js';
import { type EnforcedLimits, enforcedBy, killRunCgroup, pidsLimitHit, runCpuUsec } from './cgroup.js';
import { COPY_LIMITS, type CopiedOutput, copyOut } from './copyout.js';
import { EGRESS_PORTS } from './egress/inside.js';
import { preloadFile } from './egress/preload.js';
import type { EgressProxy, NetworkUsage } from './egress/proxy.js';
import { SandboxError } from './errors.js';
import { type BindGrant, grantBinds } from './identity.js';
import {
  ARGS_FD,
  argsFdFor,
  BIND_FD,
  EVENTS_FD,
  finished,
  HOLDER_FD,
  killLauncher,
  type Launched,
  launch,
  shellQuote,
} from './launcher.js';
import { finishPrebuilt, INNER_COMMAND, type PrebuiltClaim, runLine, type Shape, takePrebuilt } from './prebuilt.js';
import {
  assertHostReady,
  coverInherited,
  type EndReason,
  endOf,
  hostLayout,
  perRunMounts,
  planMounts,
  processLimitBy,
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
import { buildBwrapArgs, type Limits, type Mount, resolveLimits, type SandboxProfile, sandboxEnv } from './profile.js';
import type { Staged } from './staging.js';
import { launchFailure, StartWatch, startCommand, startSteps, userTasks } from './start.js';

export type { EndReason };

export interface RunOptions {
  /** Bytes written to the tool's stdin, which is then closed. */
  stdin?: string | Uint8Array;
  /** Where to write the whole stdout when it passes `limits.outputBytes` (created, mode 0600). */
  stdoutFile?: string;
  /** Kills the sandbox when aborted (the result then says `signal`, SIGKILL). */
  signal?: AbortSignal;
  /** Use this bwrap (default: the one `probe()` found on PATH). */
  bwrapPath?: string;
  /**
   * Serve the run from a sandbox built ahead of time, when one of its shape is waiting, and
   * build one for the next such run meanwhile: bwrap's setup (2–3 ms) is then off the run's
   * latency. Applies to runs without binds or network whose {@link Mount.perRun} mounts fit (a
   * `ro` regular file of at most 1 MiB, a `rw` empty directory); any other run builds its own,
   * which is also what the first run of a shape does. `stageDir` holds the waiting sandboxes'
   * placeholders of per-run files (a directory per process, 0700); a sandbox's mount table shows
   * it, so `makeStageDir()` makes a neutral one.
   */
  prebuild?: { stageDir: string };
  /**
   * Gives the tool descriptor {@link EVENTS_FD} (3) as the write end of a pipe this process reads,
   * and calls this with each chunk written to it, as it arrives. Chunks are not split at line or
   * character boundaries, and nothing of them is kept here: the pipe is read for as long as the
   * run lasts, so a tool that writes to it never blocks on it. Without it, the tool has no
   * descriptor 3. Must not throw.
   */
  events?: (chunk: Buffer) => void;
}

export interface RunResult {
  /** Why it ended: a normal `exit`, a `signal`, or the limit that stopped it. */
  reason: EndReason;
  /** The tool's exit code (null when it died of a signal). */
  exitCode: number | null;
  /** The signal that ended the tool, when one did (`SIGKILL`, `SIGXCPU`, …). */
  signal: string | null;
  /** Stdout, at most `limits.outputBytes`. */
  stdout: Buffer;
  /** All bytes the tool wrote to stdout. */
  stdoutBytes: number;
  /** True when `stdout` holds only the first `limits.outputBytes` bytes. */
  stdoutTruncated: boolean;
  /** The file holding the whole stdout, when it was truncated and `stdoutFile` was given. */
  stdoutFile?: string;
  /** The last `limits.stderrTailBytes` bytes of stderr, as UTF-8. */
  stderrTail: string;
  durationMs: number;
  /** True when the tool tried to exceed `limits.processes` (known where a pids cgroup enforces it). */
  processLimitHit: boolean;
  /**
   * How this run's memory, CPU and process limits were enforced: `cgroup`, for the whole run;
   * `rlimit`, per process only (so several processes together could use more).
   */
  enforced: EnforcedLimits;
  /** What the whole run used, where its cgroup measured it: CPU time of all its processes. */
  usage?: { cpuMs: number };
  /** The limits that applied. */
  limits: Limits;
  /** What the run's network did; present when the profile granted network. */
  network?: NetworkUsage;
  /**
   * The per-run output directories ({@link Mount.perRun} `rw`), in the profile's order: what was
   * copied out of each, or why nothing was (`lost`). `full` says the tool filled it
   * (`limits.outputDirBytes`); `truncated`, that the copy stopped at its entry or depth limit.
   */
  outputs?: RunOutput[];
  /** True when the run was served by a sandbox built ahead ({@link RunOptions.prebuild}). */
  prebuilt: boolean;
  /** The host uid the tool's processes ran as: this process's, or the sandbox's own when this process is root (never 0). */
  hostUid: number;
  /** Bytes the tool wrote to its events pipe; present when {@link RunOptions.events} was given. */
  eventsBytes?: number;
}

/** What became of one per-run output directory. */
export type RunOutput = ({ path: string; lost?: undefined } & CopiedOutput) | { path: string; lost: string };

const SPILL_BACKLOG = 8 << 20;

/**
 * The holder of a run with output directories that builds its own sandbox: takes the start steps
 * (start.ts: it is the shell that starts the command, so no other is needed), runs the command
 * without the channel, says `done <status>` on it, waits there for the host, exits with the status.
 */
function holderCommand(start: readonly string[]): string[] {
  const run = `{ "$@" ${HOLDER_FD}>&-; s=$?; echo "done $s" >&${HOLDER_FD}; IFS= read -r x <&${HOLDER_FD}; exit "$s"; }`;
  return ['/bin/sh', '-c', `${start.join(' && ')} && ${run}`, 'sandbox'];
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
  layout: ReturnType<typeof hostLayout>,
  limits: ReturnType<typeof resolveLimits>,
  identity: Parameters<typeof planMounts>[2],
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
 * Runs `profile` in a fresh bubblewrap sandbox: private user, pid, network, ipc and uts
 * namespaces, no capabilities, the seccomp filter, rlimits, a wall-clock kill of the
 * whole namespace, and only what the profile mounts. Never runs anything when the host cannot
 * sandbox (`sandbox_unavailable`). Stdout past `outputBytes` keeps being drained (and spilled to
 * `stdoutFile`), so a tool that prints forever cannot block; past `outputHardBytes` it is killed.
 */
export async function runSandboxed(profile: SandboxProfile, options: RunOptions = {}): Promise<RunResult> {
  const host = await probe(options.bwrapPath ? { bwrapPath: options.bwrapPath } : {});
  assertHostReady(host);
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
  const preload = network ? preloadFile(EGRESS_PORTS.http) : undefined;
  if (preload) profile = withEgress(profile, preload.path);
  const binds = profile.binds ?? [];
  const identity = host.identity;
  const given = profile.mounts ?? [];
  profile = { ...profile, mounts: perRunMounts(given) };
  const mounts = profile.mounts ?? [];
  const outputs = mounts.filter((m) => m.perRun && m.mode === 'rw');
  if (hold) profile = { ...profile, command: [...holderCommand(startSteps('"$1"', processes)), ...profile.command] };
  const layout = hostLayout(host);
  const seccomp = sandboxSeccomp(host.arch);
  // bwrap, behind setpriv when this process is root: the sandbox then runs as an unprivileged
  // host uid, so no uid of it maps to host root.
  const bwrapArgv = [...identity.drop, host.bwrap.path];
  const plan = (ms: readonly Mount[], bs: readonly CheckedBind[], dry = false) => planMounts(ms, bs, identity, dry);

  // bwrap takes the command only from its real command line; its options, with the environment
  // (which may hold secrets), go through ARGS_FD, out of the host's process list.
  const cgroupLimits = { processes: limits.processes, memoryBytes: limits.memoryBytes, cpuCores: limits.cpuCores };
  const cgroups = host.cgroups ? { base: host.cgroups, limits: cgroupLimits } : undefined;
  // Root without a pids cgroup does not get this far (see probe()).
  const steps = rlimitSteps(limits, { events: Boolean(options.events) });

  // A sandbox built ahead, when the run fits one: its shape is everything bwrap is told but the
  // command, the environment and the per-run mounts' sources.
  const staged =
    // A per-run file too large to copy in is bound as it is: a sandbox built ahead would keep the
    // inode it was built with, not this run's.
    options.prebuild && !network && binds.length === 0 && mounts.every((m, i) => m.perRun === given[i]?.perRun)
      ? mounts.filter((m) => m.perRun && m.mode === 'ro').map((m) => m.source)
      : undefined;
  let claim: PrebuiltClaim | undefined;
  if (options.prebuild && staged) {
    const slots = staged.map(() => 'ro' as const);
    const optionsFor = shapeOptions(profile, mounts, layout, limits, identity);
    const keyOf = optionsFor(
      slots.map((_, i) => `/\0slot${i}`),
      true,
    );
    const shape: Shape = {
      key: [...bwrapArgv, options.prebuild.stageDir, cgroups?.base.bases.join(':') ?? '', ...keyOf.options, ...keyOf.opens].join('\0'),
      stageDir: options.prebuild.stageDir,
      slots,
      bwrap: bwrapArgv,
      options: optionsFor,
      ...(cgroups ? { cgroups: cgroups.base } : {}),
      seccomp,
      cover: coverInherited,
    };
    const env = Object.entries(sandboxEnv(profile)).map(([k, v]) => `${k}=${shellQuote(v)}`);
    // The waiting shell started with bwrap's environment (only PWD, from --chdir), as a command
    // bwrap starts itself does; it adds the run's own.
    const start = startSteps(shellQuote(toolCommand[0] as string), processes);
    const line = runLine([`export ${env.join(' ')}`, ...steps, ...start], toolCommand, hold);
    claim = takePrebuilt(shape, staged, line, cgroupLimits);
  }
  preload?.write(); // (a run with network is never served by a sandbox built ahead: no claim to end)
  // rw binds are handed to the sandbox's uid for the run when it is not this process's (root).
  let grant: BindGrant;
  try {
    grant = grantBinds(binds, identity);
  } catch (err) {
    if (claim) finishPrebuilt(claim);
    preload?.remove();
    throw err;
  }
  // The run's own sandbox, when no sandbox built ahead serves it.
  let cold: { args: string[]; optionCount: number; opens: string[]; staged: Staged; argsFd: number } | undefined;
  if (!claim?.built) {
    try {
      const p = plan(mounts, binds);
      const args = buildBwrapArgs({ ...profile, mounts: p.mounts }, layout, p.fds, limits);
      const argsFd = argsFdFor(BIND_FD + binds.length + p.opens.length);
      cold = { args, optionCount: args.length - profile.command.length - 1, opens: p.opens, staged: p.staged, argsFd };
    } catch (err) {
      if (claim) finishPrebuilt(claim);
      grant.restore();
      preload?.remove();
      throw err;
    }
  }
  const started = performance.now();
  let launched: Launched | undefined;
  try {
    launched =
      claim?.built ??
      launch({
        // The holder's channel is closed for the tool by the holder, or here when there is none.
        steps: [...steps, ...(cold?.opens ?? []), ...(hold ? [] : [`exec ${HOLDER_FD}<&-`])],
        argv: [
          ...(cold?.staged.prefix ?? []),
          ...bwrapArgv,
          '--args',
          String(cold?.argsFd ?? ARGS_FD),
          ...(cold?.args.slice(cold.optionCount) ?? []),
        ],
        argsFd: cold?.argsFd ?? ARGS_FD,
        bindFds: binds.map((b) => b.fd),
        ...(cgroups ? { cgroups } : {}),
        seccomp,
        cover: coverInherited,
        ...(network ? { ipc: true } : {}),
        ...(options.events ? { events: true } : {}),
        ...(claim ? { refill: false } : {}),
      });
  } catch (err) {
    // The system would not start the launcher (launcherRefused): nothing ran, nothing is left.
    if (claim) finishPrebuilt(claim);
    grant.restore();
    cold?.staged.remove();
    preload?.remove();
    throw err;
  }
  if (!launched) {
    if (claim) finishPrebuilt(claim);
    grant.restore();
    cold?.staged.remove();
    preload?.remove();
    const bases = host.cgroups?.bases.join(', ') ?? 'the cgroup hierarchies';
    throw new SandboxError(
      'sandbox_unavailable',
      `cannot create the run's cgroups under ${bases}, so its memory, CPU and process limits cannot be enforced; nothing was run (check that the directories are writable and not full: cgroup.max.descendants)`,
    );
  }
  const { child, cgroup } = launched;

  // The relay sends the two listening sockets; once both are held here, it may let the tool start.
  const egress = network
    ? startEgress(child, network, () => preload?.remove()) // the relay runs: bwrap has mounted everything
    : undefined;
  const proxy: EgressProxy | undefined = egress?.proxy;

  const write = (stream: Writable | null | undefined, data: string | Uint8Array) => {
    if (!stream) return;
    stream.on('error', () => {}); // the tool may exit without reading: not an error of ours
    stream.end(data);
  };
  if (cold) write((child.stdio as unknown as Writable[])[cold.argsFd], `${cold.args.slice(0, cold.optionCount).join('\0')}\0`);
  write(child.stdin, options.stdin ?? '');

  // The holder says `done <status>` on its channel once the tool has exited; its output
  // directories are then copied out, and the holder released (which ends the sandbox).
  let copied: RunOutput[] | undefined;
  let unmoved: Error | undefined;
  const copyOutputs = () => {
    if (!hold || copied) return;
    const pid = child.pid ? sandboxPid(child.pid) : undefined;
    if (!pid) return;
    copied = outputs.map((m) => {
      try {
        const got = copyOut(`/proc/${pid}/root${m.target ?? m.source}`, m.source, { ...COPY_LIMITS, bytes: limits.outputDirBytes });
        return got ? { path: m.source, ...got } : { path: m.source, lost: 'the sandbox was not set up yet' };
      } catch (err) {
        unmoved ??= err as Error;
        return { path: m.source, lost: (err as Error).message };
      }
    });
  };
  const channel = hold ? (child.stdio as unknown as (Duplex | null)[])[claim?.built ? 5 : HOLDER_FD] : undefined;
  if (channel) {
    let heard = '';
    channel.on('error', () => {});
    const onData = (chunk: Buffer) => {
      // Only the end is kept: the tool may write to this channel too (through /proc), and what it
      // writes must cost this process nothing.
      heard = (heard + chunk.toString('latin1')).slice(-64);
      if (!/(^|\n)done \d+\n/.test(heard)) return;
      channel.off('data', onData);
      copyOutputs();
      channel.end('\n');
    };
    channel.on('data', onData);
  }

  let ended: EndReason | undefined;
  const kill = (why: EndReason) => {
    ended ??= why;
    copyOutputs(); // what the tool wrote so far is kept, as a run that ends by itself keeps it
    killLauncher(child);
    if (cgroup) killRunCgroup(cgroup);
  };
  const timer = setTimeout(() => kill('timeout'), limits.timeoutMs);
  const cpuBudgetUsec = limits.cpuSeconds * 1e6;
  const watch = watchCgroupLimits(cgroup, cpuBudgetUsec, kill);
  const onAbort = () => kill('signal');
  options.signal?.addEventListener('abort', onAbort);
  if (options.signal?.aborted) onAbort();

  // Stdout: keep the first outputBytes; spill everything once past it; kill past outputHardBytes.
  const kept: Buffer[] = [];
  let keptBytes = 0;
  let total = 0;
  let spill: Promise<FileHandle> | undefined;
  let spillWrites: Promise<void> = Promise.resolve();
  let pending = 0;
  const stdout = child.stdout;
  stdout?.on('data', (chunk: Buffer) => {
    total += chunk.length;
    if (options.stdoutFile && total > limits.outputBytes) {
      // The first time: everything so far (all of it was kept); afterwards: each chunk.
      const data = spill ? chunk : Buffer.concat([...kept, chunk]);
      spill ??= open(options.stdoutFile, 'wx', 0o600);
      const handle = spill;
      pending += data.length;
      if (pending > SPILL_BACKLOG) stdout.pause(); // let the disk catch up before reading more
      spillWrites = spillWrites.then(async () => {
        await (await handle).write(data);
        pending -= data.length;
        if (pending <= SPILL_BACKLOG) stdout.resume();
      });
    }
    if (keptBytes < limits.outputBytes) {
      const take = chunk.subarray(0, limits.outputBytes - keptBytes);
      kept.push(take);
      keptBytes += take.length;
    }
    if (total > limits.outputHardBytes) kill('output_cap');
  });
  // Events: handed on as read, never kept, never paused (the tool must not block on them).
  let eventsBytes = 0;
  const events = options.events;
  const eventsPipe = child.stdio[EVENTS_FD] as Duplex | null | undefined;
  if (events && eventsPipe) {
    eventsPipe.on('error', () => {}); // the tool's end closing early is its business
    eventsPipe.on('data', (chunk: Buffer) => {
      eventsBytes += chunk.length;
      events(chunk);
    });
    eventsPipe.end(); // nothing goes the other way: a tool reading it sees end-of-file
  }
  const stderr = new Tail(limits.stderrTailBytes);
  const start = new StartWatch();
  child.stderr?.on('data', (chunk: Buffer) => stderr.push(start.push(chunk)));

  const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
    child.on('error', (err) => {
      if (claim) finishPrebuilt(claim);
      grant.restore();
      cold?.staged.remove();
      // The launcher itself could not be started (spawn's EAGAIN when this user is at its limit).
      const why = launchFailure(`the launcher: ${err.message}`, 'did not start', { tasks: () => userTasks(identity.uid) });
      reject(new SandboxError('sandbox_unavailable', `${why.message}; nothing was run — fix: ${why.fix}`, { cause: err }));
    });
    child.on('close', (c, s) => resolve({ code: c, signal: s }));
  }).finally(() => {
    clearTimeout(timer);
    clearInterval(watch);
    options.signal?.removeEventListener('abort', onAbort);
    // The tool is gone: so are its connections, and the sockets in its namespace.
    proxy?.close();
    preload?.remove();
  });
  stderr.push(start.flush());
  const stderrTail = stderr.text();
  const { reason, exitCode, signal: sig } = endOf({ code, signal, ended, cgroup, cpuBudgetUsec, stderrTail });
  const processLimitHit = cgroup ? pidsLimitHit(cgroup) : false;
  const cpuUsec = cgroup ? runCpuUsec(cgroup) : undefined;
  if (claim) finishPrebuilt(claim);
  if (!claim?.built) finished(launched);
  grant.restore();
  cold?.staged.remove();
  if (egress && !egress.started() && !ended) {
    await spillWrites.catch(() => {});
    if (spill) await (await spill).close();
    throw new SandboxError(
      'sandbox_unavailable',
      `the sandbox's network relay did not start, so the tool did not run (exit ${exitCode ?? sig}): ${stderrTail.trim() || 'no message'}`,
    );
  }
  // Nothing of the tool ran (no start mark) and nothing here ended it: what stderr holds is the
  // launch's own account of why. (A run killed for a limit, or cancelled, before its tool started
  // keeps that reason: the limit covers the start too.)
  if (!start.started && !ended) {
    await spillWrites.catch(() => {});
    if (spill) await (await spill).close();
    const why = launchFailure(start.before, `exited ${exitCode ?? sig}`, { tasks: () => userTasks(identity.uid) });
    throw new SandboxError('sandbox_unavailable', `${why.message}; nothing was run — fix: ${why.fix}`);
  }
  if (unmoved) {
    throw new SandboxError(
      'output_unmoved',
      `the run ended, but its output could not be copied out of the sandbox into ${outputs.map((m) => m.source).join(', ')}: ${unmoved.message}`,
    );
  }
  let stdoutFile: string | undefined;
  if (spill) {
    await spillWrites;
    const h = await spill;
    await h.close();
    stdoutFile = options.stdoutFile;
  }
  return {
    reason,
    exitCode,
    signal: sig,
    stdout: Buffer.concat(kept),
    stdoutBytes: total,
    stdoutTruncated: total > keptBytes,
    ...(stdoutFile ? { stdoutFile } : {}),
    stderrTail,
    durationMs: Math.round(performance.now() - started),
    processLimitHit,
    enforced: enforcedBy(cgroup?.host, pidsBy === 'userns' ? 'userns' : 'rlimit'),
    ...(cpuUsec !== undefined ? { usage: { cpuMs: Math.round(cpuUsec / 1000) } } : {}),
    limits,
    ...(proxy ? { network: proxy.usage } : {}),
    ...(hold ? { outputs: copied ?? outputs.map((m) => ({ path: m.source, lost: LOST })) } : {}),
    prebuilt: claim?.built !== undefined,
    hostUid: identity.uid,
    ...(events ? { eventsBytes } : {}),
  };
}

const LOST = 'the sandbox ended before its holder said the tool was done (the tool may have killed it), so nothing was copied out';

/**
 * The process of a sandbox whose root is read through /proc: the command bwrap started (the
 * holder), else bwrap's init in the sandbox. Found from the launcher, which became bwrap.
 */
function sandboxPid(bwrap: number): number | undefined {
  const init = childrenOf(bwrap)[0];
  return init === undefined ? undefined : (childrenOf(init)[0] ?? init);
}

function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
  } catch {
    // No /proc/<pid>/task/<pid>/children on this kernel: every process's parent, from its stat.
    const out: number[] = [];
    for (const p of readdirSync('/proc')) {
      if (!/^\d+$/.test(p)) continue;
      try {
        const st = readFileSync(`/proc/${p}/stat`, 'utf8');
        if (Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]) === pid) out.push(Number(p));
      } catch {
        // gone meanwhile
      }
    }
    return out.sort((a, b) => a - b);
  }
}
