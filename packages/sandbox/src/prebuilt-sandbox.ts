import type { StdioNull } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  fstatSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import type { Duplex, Writable } from 'node:stream';
import { acquireRunCgroup, type CgroupLimits, isAlive, type PidsCgroups, type RunCgroup, releaseRunCgroup } from './cgroup.js';
import { killSandboxTree } from './kill-tree.js';
import {
  argsFdFor,
  BIND_FD,
  controlLine,
  holdRun,
  joinCgroup,
  type Launched,
  PRELUDE,
  setHeld,
  shellQuote,
  startLauncher,
  streams,
  withPipeAt,
} from './launcher.js';
import { shellFor } from './shell.js';
import { START_FUNCTIONS } from './start.js';
import { processTempDir } from './tmp.js';

/**
 * Sandboxes built ahead of time. bwrap's own work (namespaces, mounts, the seccomp filter) takes
 * 2–3 ms of a run; a sandbox built ahead has done all of it and waits, as an unprivileged
 * `/bin/sh` inside, for one line on descriptor 5: its run's environment, rlimits and command.
 * The run pays for that line and one exec.
 *
 * Everything a run may vary must then reach the sandbox after it was built, so only runs that
 * fit are served this way: no binds (each is checked for its run and mounted by descriptor), no
 * network (the relay needs the run's IPC channel), and per-run mounts ({@link Mount.perRun})
 * that are a small file (its bytes are copied into a placeholder the sandbox already mounts) or
 * an empty directory (the sandbox's own tmpfs, copied out by its holder once the tool is done).
 * Sandboxes are pooled by the shape they were built for; every other run builds its own, as before.
 *
 * A sandbox serves one run only. Waiting ones never keep the process alive and die with it
 * (`--die-with-parent`); their placeholders live under the embedding program's stage directory,
 * one subdirectory per process, removed at exit (and by the next process, after a crash).
 */

// Descriptor 5 is a socket pair (as every piped descriptor of Node's children): the shell says
// it is up on it, then reads its run's line from it, and stays as the run's holder, on it (see
// {@link runLine}). The shell reads that line a byte at a time (as any shell reads a socket), so
// what every run's line would spell out the same is defined here, once, as functions.
//
// `forge_source` is the holder of a run that is a script for the waiting shell itself (see
// {@link sourcedCommand}): the script is read by a subshell of it (a fork, no exec), which first
// drops what the waiting shell defined, as a new shell would not have it.
const SOURCE = `( unset -f forge_hold forge_source forge_runnable forge_readable forge_started; unset line NL; set --; . "$0" )`;
const INNER = `${PRELUDE}; ${START_FUNCTIONS}; forge_hold() ${holdRun('command "$@" 5>&-', 5)}; forge_source() ${holdRun(`${SOURCE} 5>&-`, 5)}; echo >&5 && IFS= read -r line <&5 && eval "$line"`;
/** The command a sandbox built ahead is built with: say it is built, read one line, become the run. */
export const INNER_COMMAND: readonly string[] = ['/bin/sh', '-c', INNER, 'sandbox'];

/**
 * The script of a command `/bin/sh SCRIPT` (the shell a sandbox built ahead waits in, no option,
 * one operand that is an absolute path), which that shell can read itself; undefined for any other.
 */
export function sourcedScript(command: readonly string[]): string | undefined {
  const [sh, script, ...more] = command;
  return sh === INNER_COMMAND[0] && script?.startsWith('/') && more.length === 0 ? script : undefined;
}

/**
 * The command a sandbox built ahead for `script` ({@link sourcedScript}) is built with: the
 * waiting shell's `$0` is the script, as under `/bin/sh SCRIPT`.
 */
export function sourcedCommand(script: string): readonly string[] {
  return [...INNER_COMMAND.slice(0, -1), script];
}

/**
 * The line a sandbox built ahead runs: its steps (which may call the start functions,
 * `startCalls`), then the command behind the shell as its holder (launcher.ts, `holdRun`): it
 * runs the command (without the channel), says `done <status>` on descriptor 5 when it is done,
 * and waits there until its output directories, if any, have been copied out. The run is answered
 * at that word, not after the sandbox's teardown.
 */
export function runLine(steps: readonly string[], argv: readonly string[]): string {
  return [...steps, `forge_hold ${argv.map(shellQuote).join(' ')}`].join(' && ');
}

/** The line of a run whose script the waiting shell reads itself ({@link sourcedCommand}). */
export function sourcedLine(steps: readonly string[]): string {
  return [...steps, 'forge_source'].join(' && ');
}

/** Largest per-run read-only file copied into a sandbox built ahead. */
export const MAX_STAGED_FILE = 1 << 20;

/** Processes (and threads) a sandbox built ahead may have while it is built and waits: bwrap, its namespace's init, the shell. */
const BUILD_PROCESSES = 8;
/** What a pool's sandboxes are built for. */
export interface Shape {
  /** Equal keys, interchangeable sandboxes. */
  key: string;
  /** What it runs, for diagnostics: the command's program name. */
  label: string;
  /** Where the per-run mounts' placeholders are made (see {@link RunOptions.prebuild}). */
  stageDir: string;
  /** The per-run read-only files, in the order of the profile's mounts (each gets a placeholder). */
  slots: readonly 'ro'[];
  /** bwrap, behind what drops root when this process is root (see `SandboxIdentity`). */
  bwrap: readonly string[];
  /**
   * bwrap's options (all before `--`) for a sandbox whose slots are at `paths`, and the shell
   * steps that open the sources of the mounts made from descriptors (run before root is dropped).
   */
  options: (paths: readonly string[]) => { options: string[]; opens: string[]; prefix: string[]; remove: () => void };
  cgroups?: PidsCgroups;
  seccomp: Buffer;
  cover: (fd: number) => (number | StdioNull)[];
  /**
   * A warm shape (warm.ts): the command the sandbox is built with, which starts the run's own
   * interpreter, and the loader's bytes, put in the script's slot until a run takes it.
   */
  warm?: { inner: readonly string[]; slot: number; loader: string; poolBytes?: number; processes?: number };
  /** The command it is built with, when not {@link INNER_COMMAND} ({@link sourcedCommand}). */
  inner?: readonly string[];
}

/** What the warm-up of the sandbox that served a run cost (see {@link WarmOptions}). */
export interface Warmup {
  /** From the sandbox's launch until its loader said it was ready. */
  ms: number;
  /** CPU time its processes used meanwhile, where a cgroup measured it. */
  cpuMs?: number;
  /** Memory they held when the run took it, where a cgroup measured it (added to the run's memory limit). */
  memoryBytes?: number;
}

export interface Built extends Launched {
  /** This sandbox's placeholders: one entry per slot, under `dir`, and the inode of each. */
  dir: string;
  paths: string[];
  inodes: number[];
  /** Its shell (a warm one: its loader) has started inside the finished sandbox. */
  up: boolean;
  /** performance.now() at its launch, and when it said it was up. */
  launchedAt: number;
  upAt: number;
  /** Resolves true once it is up, false when it exits first, `ms` pass or `signal` aborts. */
  upOrGone: (ms: number, signal?: AbortSignal) => Promise<boolean>;
  /** A run has it (and ends it with {@link finishPrebuilt}). */
  taken: boolean;
  cleaned: boolean;
  /** Removes the mount points its sources were staged on (see staging.ts). */
  unstage: () => void;
}

const roots = new Map<string, string>(); // stage directory → this process's directory in it
const made = new Set<string>(); // every such directory not yet removed, for the exit
let cleanupAtExit = false;

/** This process's directory under `stageDir`; made on first use, after removing those of dead processes. */
function stageRoot(stageDir: string): string {
  const known = roots.get(stageDir);
  if (known) return known;
  mkdirSync(stageDir, { recursive: true, mode: 0o700 });
  for (const name of readdirSync(stageDir)) {
    const pid = /^(\d+)-[0-9a-f]+$/.exec(name)?.[1];
    if (pid && Number(pid) !== process.pid && !isAlive(Number(pid))) rmSync(join(stageDir, name), { recursive: true, force: true });
  }
  const root = join(stageDir, `${process.pid}-${randomBytes(4).toString('hex')}`);
  mkdirSync(root, { mode: 0o700 });
  roots.set(stageDir, root);
  made.add(root);
  if (!cleanupAtExit) {
    cleanupAtExit = true;
    process.once('exit', () => {
      for (const r of made) rmSync(r, { recursive: true, force: true });
    });
  }
  return root;
}

let serial = 0;

/** Gives back a sandbox's cgroup and placeholders, once (from whichever of its endings comes first). */
export function cleanUp(b: Built): void {
  if (b.cleaned) return;
  b.cleaned = true;
  if (b.cgroup) releaseRunCgroup(b.cgroup);
  if (b.dir) rmSync(b.dir, { recursive: true, force: true });
  b.unstage();
}

/** Drops a sandbox that will serve no run: its processes, cgroup and placeholders. */
export function discard(b: Built): void {
  // One still being built may be where a kill of its process group alone misses (kill-tree.ts).
  if (b.child.pid && b.child.exitCode === null && b.child.signalCode === null) killSandboxTree(b.child);
  cleanUp(b);
}

/**
 * Forgets this process's directory under `stageDir`; removes it now unless runs are still under
 * way with placeholders in it (it then goes at exit).
 */
export function dropStageRoot(stageDir: string, inUse: boolean): void {
  const root = roots.get(stageDir);
  if (!root) return;
  roots.delete(stageDir);
  if (!inUse) {
    made.delete(root);
    rmSync(root, { recursive: true, force: true });
  }
}

/**
 * Builds one sandbox of `shape`; undefined when it cannot (no cgroup left, stage not writable).
 * `up` is told how long it took to be up; `exited`, that it exited before a run took it.
 */
export function buildSandbox(shape: Shape, on: { up(ms: number): void; exited(b: Built): void }, last?: CgroupLimits): Built | undefined {
  let dir = '';
  const paths: string[] = [];
  const inodes: number[] = [];
  try {
    try {
      dir = join(stageRoot(shape.stageDir), String(++serial));
      mkdirSync(dir, { mode: 0o700 });
    } catch {
      // This process's directory was removed from under it: make it again.
      roots.delete(shape.stageDir);
      dir = join(stageRoot(shape.stageDir), String(++serial));
      mkdirSync(dir, { mode: 0o700 });
    }
    shape.slots.forEach((mode, i) => {
      const p = join(dir, String(i));
      // Readable by the sandbox's uid, which may not be this process's: the directories above
      // it stay 0700, and the sandbox reaches it by descriptor.
      if (mode === 'ro') writeFileSync(p, shape.warm?.slot === i ? shape.warm.loader : '', { mode: 0o644, flag: 'wx' });
      paths.push(p);
      inodes.push(statSync(p).ino);
    });
  } catch {
    if (dir) rmSync(dir, { recursive: true, force: true });
    return undefined;
  }
  let cgroup: RunCgroup | undefined;
  if (shape.cgroups) {
    cgroup = acquireRunCgroup(shape.cgroups, buildLimits(shape, last));
    if (!cgroup) {
      rmSync(dir, { recursive: true, force: true });
      return undefined;
    }
  }
  let planned: ReturnType<Shape['options']>;
  try {
    planned = shape.options(paths);
  } catch {
    if (cgroup) releaseRunCgroup(cgroup);
    rmSync(dir, { recursive: true, force: true });
    return undefined;
  }
  const { options, opens, prefix } = planned;
  const steps = [...(cgroup ? [joinCgroup(cgroup)] : []), ...opens];
  // 3: the run's events pipe (made now: the sandbox is built with it), 4: seccomp, 5: control,
  // the descriptor mounts' sources from BIND_FD (opened by `opens`), then bwrap's arguments.
  const argsFd = argsFdFor(BIND_FD + opens.length);
  const inner = shape.warm?.inner ?? shape.inner ?? INNER_COMMAND;
  const script = `${PRELUDE}; ${controlLine(steps, [...prefix, ...shape.bwrap, '--args', String(argsFd), '--', ...inner])}`;
  const child = startLauncher(shellFor(argsFd - 1), ['-c', script, 'sandbox-launcher'], {
    stdio: withPipeAt<number>(['pipe', 'pipe', 'pipe', 'pipe', 'pipe', 'pipe', ...shape.cover(6)], argsFd),
    detached: true, // its own process group, as every launcher
    env: {},
  });
  if (!child) {
    // The system would not start it (out of descriptors or processes): runs start cold.
    planned.remove();
    if (cgroup) releaseRunCgroup(cgroup);
    rmSync(dir, { recursive: true, force: true });
    return undefined;
  }
  const { settle, wait } = upWatch();
  const built: Built = {
    child,
    ...(cgroup ? { cgroup } : {}),
    dir,
    paths,
    inodes,
    up: false,
    launchedAt: performance.now(),
    upAt: 0,
    upOrGone: wait,
    taken: false,
    cleaned: false,
    unstage: planned.remove,
  };
  child.on('error', () => {}); // one that cannot start exits, below
  for (const s of streams(child)) s.on('error', () => {});
  child.once('exit', () => {
    settle(false);
    if (built.taken) return; // its run cleans up
    on.exited(built);
    cleanUp(built);
  });
  const control = (child.stdio as unknown as Duplex[])[5] as Duplex;
  control.once('data', () => {
    built.up = true;
    built.upAt = performance.now();
    on.up(built.upAt - built.launchedAt);
    settle(true);
  });
  ((child.stdio as unknown as Writable[])[argsFd] as Writable).end(`${options.join('\0')}\0`);
  (child.stdio[4] as Writable).end(shape.seccomp);
  setHeld(child, false);
  return built;
}

/**
 * The cgroup limits a sandbox is built and waits under: room for what building takes (bwrap, its
 * namespace's init, the waiting shell) and, warm, for the interpreter's threads under the run's own
 * limit (Node starts several). A run sets its own when it takes one; when the shape's last run had
 * limits that leave that room (a call's hooks always do), the sandbox is built with them, and a
 * run with the same limits then has none to write. Nothing of a run executes before it takes the
 * sandbox, so its limits are not loosened by this: they are in place before its line is sent.
 */
function buildLimits(shape: Shape, last: CgroupLimits | undefined): CgroupLimits {
  const processes = BUILD_PROCESSES + (shape.warm?.processes ?? 0);
  const roomy =
    last !== undefined &&
    !shape.warm &&
    last.processes >= processes &&
    (last.memoryBytes === undefined || last.memoryBytes >= BUILD_MEMORY) &&
    (last.cpuCores === undefined || last.cpuCores >= 1);
  return roomy ? last : { processes };
}

/** The least memory limit a sandbox is built under (see buildLimits; and at least a core of CPU): bwrap and a shell take far less. */
const BUILD_MEMORY = 64 << 20;

/** Whether a sandbox came up: settled by its first word on the channel, or by its exit. */
function upWatch(): { settle: (up: boolean) => void; wait: Built['upOrGone'] } {
  let settle: (up: boolean) => void = () => {};
  const came = new Promise<boolean>((resolve) => {
    settle = resolve;
  });
  // The timer is not unref'd: a run waiting here is work in progress, and the process must not
  // exit under it (the waiting sandbox itself never holds it).
  const wait = (ms: number, signal?: AbortSignal) =>
    new Promise<boolean>((resolve) => {
      const done = (up: boolean) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', aborted);
        resolve(up);
      };
      const aborted = () => done(false);
      const timer = setTimeout(done, ms, false);
      signal?.addEventListener('abort', aborted, { once: true });
      void came.then(done);
    });
  return { settle, wait };
}

/**
 * Copies the read-only slots' `sources` into `b`'s placeholders, and checks that every placeholder
 * is still the inode the sandbox mounted (the stage directory may have been removed or replaced
 * meanwhile). False when one is not, or a source cannot be read: that sandbox cannot serve the run.
 */
export function fill(b: Built, sources: readonly string[]): boolean {
  try {
    return b.paths.every((p, i) => {
      const bytes = readFileSync(sources[i] as string);
      const fd = openSync(p, 'r+'); // never creates: a new file would not be the one mounted
      try {
        if (fstatSync(fd).ino !== b.inodes[i]) return false;
        ftruncateSync(fd, 0);
        writeSync(fd, bytes, 0, bytes.length, 0);
        return true;
      } finally {
        closeSync(fd);
      }
    });
  } catch {
    return false;
  }
}

export const gone = (b: Built): boolean => b.child.exitCode !== null || b.child.signalCode !== null || !b.child.pid;

/**
 * A new stage directory for {@link RunOptions.prebuild} under the system's temporary directory
 * (0700, this process's; removed at exit, and by a later process when this one died without its
 * exit handlers). Its path tells a tool nothing about the host: a sandbox's mount table shows it.
 */
export function makeStageDir(): string {
  return processTempDir('prebuilt');
}
