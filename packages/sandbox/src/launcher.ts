import { type ChildProcess, type SpawnOptions, type StdioNull, type StdioPipe, spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import { acquireRunCgroup, type CgroupLimits, type PidsCgroups, type RunCgroup, releaseRunCgroup, setRunLimits } from './cgroup.js';
import { SandboxError } from './errors.js';
import { shellFor } from './shell.js';

/**
 * The launcher is a /bin/sh that sets the run's rlimits (its `ulimit` builtin is setrlimit, as
 * prlimit would do, without another program), joins the run's pids cgroup first when there is one
 * (root only: the kernel ignores RLIMIT_NPROC for root), then becomes bwrap.
 *
 * Joining a cgroup v1 hierarchy makes the kernel wait for an RCU grace period, about 10 ms on a
 * busy machine, which is most of the sandbox's cost on a short run. So when runs use cgroups a
 * few launchers are started ahead of need: each joins a cgroup of its own and then waits on
 * descriptor 5 for one line, the shell steps of the run that takes it. A run that finds one
 * ready pays only for that line and the exec.
 *
 * Descriptors, in both kinds: 3 is the run's events pipe ({@link EVENTS_FD}: the one descriptor
 * past stdio that reaches the tool, so bwrap is never given it for anything of its own), 4 the
 * seccomp program, 5 the control line (ready launchers) or the egress relay's IPC channel (runs
 * with network), 6 the channel of the holder (a run with a per-run output directory: the shell
 * inside that says when the tool is done and waits while its output is copied out), binds start
 * at {@link BIND_FD}, followed by the mounts made from descriptors, and bwrap's arguments come on
 * {@link ARGS_FD} or past all of those ({@link argsFdFor}).
 */
export const BIND_FD = 7;
/** The holder's channel in a run that builds its own sandbox. */
export const HOLDER_FD = 6;
/**
 * The tool's events pipe: bwrap passes on every descriptor it is not told about, and neither it,
 * setpriv, the staging shell, the holder nor the egress wrapper closes or reuses this one.
 */
export const EVENTS_FD = 3;
/**
 * bwrap's arguments (`--args`; bwrap reads and closes it before it builds the sandbox), in ready
 * launchers and sandboxes built ahead. Two digits: the shell steps that open or move descriptors
 * can name only 0–9 (dash's redirections), so none of them can ever take or close this one.
 */
export const ARGS_FD = 10;

/** Where a run puts bwrap's arguments when its binds and descriptor mounts use everything below `firstFree`. */
export function argsFdFor(firstFree: number): number {
  return Math.max(ARGS_FD, firstFree);
}

/** `stdio` padded to `fd` with `ignore` (keeping what is there), with a pipe at `fd`. */
export function withPipeAt<T>(stdio: (T | StdioPipe | StdioNull)[], fd: number): (T | StdioPipe | StdioNull)[] {
  const out = [...stdio];
  while (out.length < fd) out.push('ignore');
  out[fd] = 'pipe';
  return out;
}

/** Quotes `s` for /bin/sh on one line: newlines become "$NL", which the launcher defines. */
export function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`).replaceAll('\n', `'"$NL"'`)}'`;
}

/** The shell step that moves the launcher into each of a run's cgroups (one per v1 hierarchy). */
export function joinCgroup(cg: RunCgroup): string {
  return cg.procs.map((p) => `echo $$ > ${shellQuote(p)}`).join(' && ');
}

/** Defines NL for {@link shellQuote}d lines. */
export const PRELUDE = "NL='\n'";

/**
 * The holder's part of a run with output directories, as shell: runs `cmd`; once it has exited,
 * kills whatever it left running in the sandbox until the sandbox's init and the holder are its
 * only processes (counted from its own /proc, twice in a row: a listing of /proc is not a
 * snapshot, and a process that forks to a pid the listing has passed and exits before it is
 * reached cannot do so for two in a row); says `done <status> <processes>` on descriptor `fd`;
 * waits there until the host has copied the outputs; exits with the status. `<processes>` is 2
 * when the count was made (it is not when the sandbox has no /proc): from then on nothing of the
 * tool runs, and nothing can start again, since only a process in the sandbox could start one
 * (see `HolderDone`). All of it is the shell's own builtins: it starts no process. kill(-1)
 * reaches only the processes of the sandbox's own pid namespace, and never its init.
 */
export function holdRun(cmd: string, fd: number): string {
  const more = '{ set -- /proc/[0-9]*; [ $# -gt 2 ]; }';
  const left = `${more} || ${more}`;
  return `{ ${cmd}; s=$?; while ${left}; do kill -9 -1 2>/dev/null; done; echo "done $s $#" >&${fd}; IFS= read -r x <&${fd}; exit "$s"; }`;
}

/** What a run's launcher does, as one line of shell: its steps, then `exec` of argv. */
export function controlLine(steps: readonly string[], argv: readonly string[]): string {
  return [...steps, `exec ${argv.map(shellQuote).join(' ')}`].join(' && ');
}

export interface Launched {
  child: ChildProcess;
  cgroup?: RunCgroup;
}

interface Ready {
  child: ChildProcess;
  cgroup: RunCgroup;
}

const ready: Ready[] = [];
let inFlight = 0;
let wanted = 0;
const MAX_READY = 4;
const stats = { warm: 0, cold: 0 };

/** How many launchers wait ready, and how runs started so far (for tests and diagnostics). */
export function launcherStats(): { ready: number; warmStarts: number; coldStarts: number } {
  return { ready: ready.length, warmStarts: stats.warm, coldStarts: stats.cold };
}

/** Stdio streams of a launcher, to hold (ref) or let go (unref) of the event loop. */
export function streams(child: ChildProcess): (Readable | Writable)[] {
  return (child.stdio ?? []).filter((s): s is Readable | Writable => s !== null && s !== undefined);
}

/**
 * Whether the fork of `child` failed at once: no pid, and Node emits the reason (EMFILE, ENFILE,
 * EAGAIN) on the next tick, before even its pipes exist. The error is absorbed here (an
 * `'error'` with no listener would end this process); the caller refuses the run.
 */
export function notStarted(child: ChildProcess): boolean {
  if (child.pid !== undefined) return false;
  child.on('error', () => {});
  return true;
}

/**
 * Starts a launcher process: `spawn`, or undefined when the system would not start it. Node
 * reports some refusals later (EMFILE, ENFILE, EAGAIN: see notStarted) and throws others at once
 * (EINVAL when descriptors run short while the child's are set up); both are a launcher that
 * never ran, never an exception out of a background refill. `refused.code` keeps a thrown one's.
 */
export function startLauncher(
  file: string,
  args: string[],
  options: SpawnOptions,
  refused: { code?: string } = {},
): ChildProcess | undefined {
  let child: ChildProcess;
  try {
    child = spawn(file, args, options);
  } catch (err) {
    const e = err as { syscall?: string; code?: string };
    if (typeof e.syscall !== 'string' || !e.syscall.startsWith('spawn')) throw err;
    if (e.code !== undefined) refused.code = e.code;
    return undefined;
  }
  return notStarted(child) ? undefined : child;
}

/** 'EMFILE' or 'ENFILE' when this process cannot open one more file right now, else undefined. */
export function descriptorsShort(): 'EMFILE' | 'ENFILE' | undefined {
  try {
    closeSync(openSync('/dev/null', 'r'));
    return undefined;
  } catch (err) {
    const code = (err as { code?: string }).code;
    return code === 'EMFILE' || code === 'ENFILE' ? code : undefined;
  }
}

/** The refusal of a run whose launcher the system would not start (`code`: the system's reason, when known). */
export function launcherRefused(code?: string): SandboxError {
  if (code === 'EINVAL') {
    // Not a shortage: a descriptor this process holds (inherited, most often) is numbered at or
    // above its open-files limit, where the launcher's cover of it cannot be placed.
    return new SandboxError(
      'sandbox_unavailable',
      `the system would not start the sandbox (EINVAL: this process holds a file descriptor numbered at or above its open-files limit, which a sandbox's launcher cannot cover); nothing was run — fix: start forge without that descriptor (close it in the program or shell that starts forge: \`ls /proc/<pid>/fd\` lists them) or with an open-files limit above it (\`ulimit -n\`)`,
      { transient: false },
    );
  }
  return new SandboxError(
    'sandbox_unavailable',
    `the system would not start the sandbox (no new process or no free file descriptor: ${code ?? 'EMFILE, ENFILE or EAGAIN'}); nothing was run — fix: raise the open-files limit (\`ulimit -n\`) or the process limit of the user running forge, or lower the calls running at once (maxConcurrentRuns)`,
    // Out of descriptors or processes for now: other runs' ends free them. Another reason stays.
    { transient: code === undefined || code === 'EMFILE' || code === 'ENFILE' || code === 'EAGAIN' },
  );
}

export function setHeld(child: ChildProcess, held: boolean): void {
  for (const s of streams(child)) {
    const h = s as unknown as { ref?: () => void; unref?: () => void };
    held ? h.ref?.() : h.unref?.();
  }
  held ? child.ref() : child.unref();
}

/**
 * SIGKILLs a launcher's process group (bwrap and the sandbox's init: the whole sandbox goes with
 * them), and the launcher itself. The launcher becomes its group's leader only once it ran
 * setsid(), just after the fork: a kill that comes before finds no group (ESRCH), and without a
 * cgroup to kill nothing else would stop it from going on to start the sandbox. Its own pid is
 * signalled only while it has not been reaped (after that the number may be another process's).
 */
export function killLauncher(child: ChildProcess): void {
  if (!child.pid) return;
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {
    // no such group (yet, or any more)
  }
  if (child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(child.pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

/** Starts one ready launcher in a cgroup of its own; false when none could be made. */
function prepare(cg: PidsCgroups, limits: CgroupLimits, seccomp: Buffer, extra: (number | StdioNull)[]): boolean {
  const cgroup = acquireRunCgroup(cg, limits);
  if (!cgroup) return false;
  const script = `${PRELUDE}; ${joinCgroup(cgroup)} && IFS= read -r line <&5 && exec 5<&- && eval "$line"`;
  const stdio = withPipeAt<number>(['pipe', 'pipe', 'pipe', 'pipe', 'pipe', 'pipe', 'pipe', ...extra], ARGS_FD);
  const child = startLauncher('/bin/sh', ['-c', script, 'sandbox-launcher'], { stdio, detached: true, env: {} });
  if (!child) {
    releaseRunCgroup(cgroup);
    return false;
  }
  const entry: Ready = { child, cgroup };
  child.on('error', () => {}); // a launcher that cannot start is dropped below
  for (const s of streams(child)) s.on('error', () => {});
  child.once('exit', () => {
    // Died while waiting (killed from outside): forget it.
    const i = ready.indexOf(entry);
    if (i >= 0) {
      ready.splice(i, 1);
      releaseRunCgroup(cgroup);
    }
  });
  (child.stdio[4] as Writable).end(seccomp);
  setHeld(child, false); // a waiting launcher never keeps this process alive; it exits with it
  ready.push(entry);
  return true;
}

/** What one run needs from its launcher. */
export interface LaunchSpec {
  /** The run's rlimit steps (shell). */
  steps: string[];
  /** bwrap and its command line. */
  argv: string[];
  /** Checked bind descriptors, in order (they become BIND_FD, BIND_FD + 1, …). */
  bindFds: number[];
  /** The run's cgroups, with its limits; undefined when rlimits are all there is. */
  cgroups?: { base: PidsCgroups; limits: CgroupLimits };
  seccomp: Buffer;
  /** What each launcher gets past the fixed descriptors: /dev/null over inherited descriptors. */
  cover: (fd: number) => (number | StdioNull)[];
  /**
   * Give the launcher a Node IPC channel as descriptor 5 (`child.send`, `'message'`): the egress
   * relay hands its listening sockets over it. Such a run always starts a new launcher, since a
   * ready one uses descriptor 5 for its control line.
   */
  ipc?: boolean;
  /** Give the launcher an events pipe as {@link EVENTS_FD} (else it has none; see RunOptions.events). */
  events?: boolean;
  /** The descriptor `argv` tells bwrap to read its arguments from ({@link argsFdFor}); a ready launcher has them on {@link ARGS_FD} only. */
  argsFd: number;
  /**
   * Whether this run counts towards how many launchers wait ready (default true). False for a
   * run whose kind is served by sandboxes built ahead (prebuilt.ts) and that found none waiting:
   * it may take a ready launcher, but none is started for its sake.
   */
  refill?: boolean;
}

/**
 * Starts the launcher of one run: a ready one when the run uses cgroups and one is waiting, else
 * a new one. Returns undefined when a needed cgroup cannot be made. Call {@link finished} when
 * the run is over.
 */
export function launch(spec: LaunchSpec): Launched | undefined {
  if (spec.cgroups) {
    inFlight++;
    const grow = spec.refill !== false;
    if (grow) wanted = Math.min(MAX_READY, Math.max(wanted, inFlight));
    const warm = spec.ipc ? undefined : takeReady(spec);
    if (grow) setImmediate(() => refill(spec));
    if (warm) {
      stats.warm++;
      return warm;
    }
  }
  stats.cold++;
  let cgroup: RunCgroup | undefined;
  const steps = [...spec.steps];
  if (spec.cgroups) {
    cgroup = acquireRunCgroup(spec.cgroups.base, spec.cgroups.limits);
    if (!cgroup) {
      inFlight--;
      return undefined;
    }
    steps.unshift(joinCgroup(cgroup));
  }
  const script = `${PRELUDE}; ${controlLine(steps, spec.argv)}`;
  const fixed: (StdioPipe | StdioNull | 'ipc' | number)[] = [
    'pipe',
    'pipe',
    'pipe',
    spec.events ? 'pipe' : 'ignore',
    'pipe',
    spec.ipc ? 'ipc' : 'ignore',
    'pipe',
    ...spec.bindFds,
  ];
  // The steps name descriptors up to the one below bwrap's arguments.
  const refused: { code?: string } = {};
  const child = startLauncher(
    shellFor(spec.argsFd - 1),
    ['-c', script, 'sandbox-launcher'],
    {
      stdio: withPipeAt([...fixed, ...spec.cover(fixed.length)], spec.argsFd),
      detached: true, // its own process group: the wall-clock kill reaches everything
      env: {},
    },
    refused,
  );
  if (!child) {
    if (spec.cgroups) inFlight--;
    if (cgroup) releaseRunCgroup(cgroup);
    throw launcherRefused(refused.code);
  }
  (child.stdio[4] as Writable).on('error', () => {});
  (child.stdio[4] as Writable).end(spec.seccomp);
  return { child, ...(cgroup ? { cgroup } : {}) };
}

function takeReady(spec: LaunchSpec): Launched | undefined {
  const cg = spec.cgroups;
  if (!cg || spec.argsFd !== ARGS_FD) return undefined;
  while (ready.length > 0) {
    const r = ready.shift() as Ready;
    const { child, cgroup } = r;
    if (child.exitCode !== null || child.signalCode !== null || !child.pid || !setRunLimits(cgroup, cg.limits)) {
      releaseRunCgroup(cgroup);
      continue;
    }
    // The checked bind descriptors are reopened through this process's /proc entry: the same
    // open file, so the inode checked is still the one mounted.
    const reopen = spec.bindFds.map((fd, i) => `exec ${BIND_FD + i}<'/proc/${process.pid}/fd/${fd}'`);
    setHeld(child, true);
    const control = (child.stdio as unknown as Writable[])[5] as Writable;
    control.end(`${controlLine([...spec.steps, ...reopen], spec.argv)}\n`);
    return { child, cgroup };
  }
  return undefined;
}

function refill(spec: LaunchSpec): void {
  const cg = spec.cgroups;
  if (!cg) return;
  while (ready.length < wanted) {
    // A waiting launcher may start one process (itself); the run's own limits come when it is taken.
    if (!prepare(cg.base, { ...cg.limits, processes: 1 }, spec.seccomp, spec.cover(BIND_FD))) return;
  }
}

/** Ends a run's hold on the launcher pool (call once per {@link launch} that returned one). */
export function finished(launched: Launched): void {
  if (launched.cgroup) {
    inFlight--;
    releaseRunCgroup(launched.cgroup);
  }
}
