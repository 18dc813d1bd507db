import type { ChildProcess } from 'node:child_process';
import { readSync } from 'node:fs';
import type { Duplex, Readable, Writable } from 'node:stream';
import { type EnforcedLimits, enforcedBy, killRunCgroup, pidsLimitHit, type RunCgroup, runCpuUsec } from './cgroup.js';
import type { NetworkUsage } from './egress/proxy.js';
import { SandboxError } from './errors.js';
import { killSandboxTree } from './kill-tree.js';
import { EVENTS_FD, finished, HOLDER_FD, killLauncher } from './launcher.js';
import { finishPrebuilt, type Warmup } from './prebuilt.js';
import { assertHostReady, type Egress, type EndReason, endOf, startEgress, Tail, watchCgroupLimits } from './prepare.js';
import { probe } from './probe.js';
import type { Limits, Mount, SandboxProfile } from './profile.js';
import { keepUntil, keptSandboxes, letKeptGo } from './run-keep.js';
import { OutputCopy, type RunOutput } from './run-outputs.js';
import { type ColdArgs, claimPrebuilt, launchRun, type PrebuildOptions, planRun, type StartedRun } from './run-start.js';
import { StdoutKeeper } from './run-stdout.js';
import { launchFailure, StartWatch, userTasks } from './start.js';

export type { EndReason, RunOutput };

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
   * latency, and so is the sandbox's teardown (the run is behind a holder, answered once its tool
   * is done). Applies to runs without binds or network whose {@link Mount.perRun} mounts fit (a
   * `ro` regular file of at most 1 MiB, a `rw` empty directory); any other run builds its own,
   * which is also what the first run of a shape does. `stageDir` holds the waiting sandboxes'
   * placeholders of per-run files (a directory per process, 0700); a sandbox's mount table shows
   * it, so `makeStageDir()` makes a neutral one.
   *
   * `warm`: a Python 3 run whose script is a per-run file is served by a sandbox whose
   * interpreter is already running, its preload imported (warm.ts): the run pays for neither
   * bwrap nor the interpreter's start. Limits count from the run: its CPU budget and memory
   * limit are the run's own, on top of what the warm-up used ({@link RunResult.warmup}). Other
   * runs are served as without it.
   */
  prebuild?: PrebuildOptions;
  /**
   * Keeps the sandbox of a run answered at its holder's word (its tool done, nothing of it left
   * but the holder and the sandbox's init) until this settles, and lets it go then: its teardown,
   * which the kernel does on this host's CPUs, then comes after what this settles on instead of
   * beside the caller's next run (a call's hooks and its tool run one after another for one
   * answer: settle it with that answer). At most 4 are kept at once, each for at most 5 s
   * (run-keep.ts); past that, and for a run answered with its sandbox's end, it goes at
   * once. A kept sandbox holds its processes (waiting), its cgroup and one descriptor of this
   * process. {@link sandboxesGone} lets every kept one go.
   */
  teardownAfter?: PromiseLike<unknown>;
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
  /** When a warm sandbox served the run: what its warm-up cost (not counted against the run's limits). */
  warmup?: Warmup;
  /** The host uid the tool's processes ran as: this process's, or the sandbox's own when this process is root (never 0). */
  hostUid: number;
  /** Bytes the tool wrote to its events pipe; present when {@link RunOptions.events} was given. */
  eventsBytes?: number;
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
  const plan = planRun(host, profile, Boolean(options.events));
  const claim = options.prebuild ? await claimPrebuilt(plan, options.prebuild, options.signal) : undefined;
  const run = launchRun(host, plan, claim);
  const { child, cgroup } = run.launched;
  // The relay sends the two listening sockets; once both are held here, it may let the tool start.
  const egress = plan.network
    ? startEgress(child, plan.network, () => plan.preload?.remove(), plan.substitution) // the relay runs: bwrap has mounted everything
    : undefined;
  feed(child, run.cold, options.stdin ?? '');
  // The holder says `done <status> <processes>` on its channel once the tool has exited; its
  // output directories are then copied out, and the holder released (which ends the sandbox). A
  // sandbox built ahead always runs the tool behind one.
  const copy = plan.hold || claim?.built ? new OutputCopy(child, plan.outputs, plan.limits.outputDirBytes) : undefined;
  const closed = exitOf(child, run, plan.identity.uid);
  const sinks: Sinks = {};
  const over = copy ? holderOver(child, copy, claim?.built ? 5 : HOLDER_FD, sinks, options.teardownAfter) : undefined;
  const watch = watchRun(child, cgroup, plan.limits, options.signal, () => copy?.copy());
  const stdout = new StdoutKeeper(child.stdout, plan.limits, options.stdoutFile, () => watch.kill('output_cap'));
  const events = relayEvents(child, options.events);
  const stderr = new Tail(plan.limits.stderrTailBytes);
  const start = new StartWatch();
  const onStderr = (chunk: Buffer) => stderr.push(start.push(chunk));
  child.stderr?.on('data', onStderr);
  Object.assign(sinks, { stdout: stdout.take, stderr: onStderr, events: events?.take });

  // The run is over when its launcher has closed, or, behind a holder, as soon as the holder says
  // the tool is done and nothing else of it is left: the sandbox's teardown (its namespaces going
  // away, most of a short run's tail) then goes on after the answer, and what the run held is given
  // back once it is through.
  const { code, signal, early, kept } = await (over ? Promise.race([closed, over]) : closed).finally(async () => {
    watch.stop();
    plan.preload?.remove();
    // The tool is gone: so are its connections, and the sockets in its namespace. Each has
    // reported (network.closed) before the run's result is made.
    await egress?.proxy.close();
  });
  stdout.seal();
  events?.seal();
  stderr.push(start.flush());
  const stderrTail = stderr.text();
  const ended = watch.ended();
  const end = endOf({ code, signal, ended, cgroup, cpuBudgetUsec: watch.cpuBudgetUsec, stderrTail });
  const processLimitHit = cgroup ? pidsLimitHit(cgroup) : false;
  const cpuUsec = cgroup ? runCpuUsec(cgroup) : undefined;
  if (early) {
    ends.early++;
    // Kept: everything the tool wrote has been read, and nothing of it is left to write more; of
    // its pipes only the holder's channel stays open here until it goes.
    if (kept) for (const p of [child.stdout, child.stderr, child.stdio[EVENTS_FD] as Readable | null]) p?.destroy();
    // The binds go back now, before the answer: nothing of the tool is left to write to them, the
    // caller may use them as soon as it has the answer, and they are named by this run's
    // descriptors (of the checked binds), which the caller closes once it has it.
    run.grant.restore();
    const gone = closed.then(
      () => release(run),
      () => {},
    );
    tearing.add(gone);
    gone.finally(() => tearing.delete(gone));
  } else release(run);
  await refuseUnstarted({ egress, start, ended, end, stderrTail, stdout, uid: plan.identity.uid });
  if (copy?.unmoved) {
    throw new SandboxError(
      'output_unmoved',
      `the run ended, but its output could not be copied out of the sandbox into ${plan.outputs.map((m) => m.source).join(', ')}: ${copy.unmoved.message}`,
    );
  }
  const stdoutFile = await stdout.finish();
  return {
    ...end,
    stdout: stdout.kept(),
    stdoutBytes: stdout.bytes,
    stdoutTruncated: stdout.truncated,
    ...(stdoutFile ? { stdoutFile } : {}),
    stderrTail,
    durationMs: Math.round(performance.now() - run.started),
    processLimitHit,
    enforced: enforcedBy(cgroup?.host, plan.pidsBy === 'userns' ? 'userns' : 'rlimit'),
    ...(cpuUsec !== undefined ? { usage: { cpuMs: Math.round(cpuUsec / 1000) } } : {}),
    limits: plan.limits,
    ...(egress ? { network: egress.proxy.usage } : {}),
    ...(copy && plan.hold ? { outputs: copy.results() } : {}),
    prebuilt: claim?.built !== undefined,
    ...(claim?.warmup ? { warmup: claim.warmup } : {}),
    hostUid: plan.identity.uid,
    ...(events ? { eventsBytes: events.bytes } : {}),
  };
}

const ends = { early: 0 };
/** The teardowns of sandboxes whose runs were answered at their holder's word, until each is through. */
const tearing = new Set<Promise<void>>();

/**
 * How many runs were answered at their holder's word, before their sandbox's teardown, how many
 * of those teardowns are not through yet, and how many of those sandboxes are kept (for tests and
 * diagnostics).
 */
export function runEnds(): { early: number; tearing: number; kept: number } {
  return { ...ends, tearing: tearing.size, kept: keptSandboxes() };
}

/**
 * Resolves once the sandbox of every run answered so far has gone, and what it held (its cgroup,
 * its staged files, its place in a pool) has been given back (its binds were given back before
 * its answer). A run behind a holder is answered as soon as its tool is done and nothing of it is
 * left; its sandbox's namespaces go away after that. An embedding program that is closing awaits
 * this first.
 */
export async function sandboxesGone(): Promise<void> {
  letKeptGo();
  while (tearing.size > 0) await Promise.all([...tearing]);
}

/** Sends bwrap its options (a sandbox of the run's own) and the tool its stdin, which is then closed. */
function feed(child: ChildProcess, cold: ColdArgs | undefined, stdin: string | Uint8Array): void {
  const write = (stream: Writable | null | undefined, data: string | Uint8Array) => {
    if (!stream) return;
    stream.on('error', () => {}); // the tool may exit without reading: not an error of ours
    stream.end(data);
  };
  if (cold) write((child.stdio as unknown as Writable[])[cold.argsFd], `${cold.args.slice(0, cold.optionCount).join('\0')}\0`);
  write(child.stdin, stdin);
}

/** The run's ends other than its own exit: the wall clock, the cgroup's limits, the abort signal, a cap. */
interface RunWatch {
  /** Kills the whole sandbox for `why` (the first reason given is kept). */
  kill(why: EndReason): void;
  /** Why the run was killed, when it was. */
  ended(): EndReason | undefined;
  cpuBudgetUsec: number;
  /** Stops watching (the run is over). */
  stop(): void;
}

/** Starts the run's timers and watches; `onKill` runs first on every kill (what the tool wrote so far is kept). */
function watchRun(
  child: ChildProcess,
  cgroup: RunCgroup | undefined,
  limits: Limits,
  signal: AbortSignal | undefined,
  onKill: () => void,
): RunWatch {
  let ended: EndReason | undefined;
  const kill = (why: EndReason) => {
    ended ??= why;
    onKill(); // as a run that ends by itself keeps its output
    if (cgroup) {
      killLauncher(child);
      killRunCgroup(cgroup);
    } else killSandboxTree(child); // what a process group kill can miss (kill-tree.ts)
  };
  const timer = setTimeout(() => kill('timeout'), limits.timeoutMs);
  const cpuBudgetUsec = limits.cpuSeconds * 1e6;
  const watch = watchCgroupLimits(cgroup, cpuBudgetUsec, kill);
  const onAbort = () => kill('signal');
  signal?.addEventListener('abort', onAbort);
  if (signal?.aborted) onAbort();
  return {
    kill,
    ended: () => ended,
    cpuBudgetUsec,
    stop() {
      clearTimeout(timer);
      clearInterval(watch);
      signal?.removeEventListener('abort', onAbort);
    },
  };
}

/** Where each of a run's pipes' bytes go: what its stream delivers, and what the end of the run reads straight from it. */
interface Sinks {
  stdout?: (chunk: Buffer) => void;
  stderr?: (chunk: Buffer) => void;
  events?: ((chunk: Buffer) => void) | undefined;
}

/**
 * The end of a run behind a holder, when it comes before the launcher's: the holder said the tool
 * is done and it and the sandbox's init are all that is left (run-outputs.ts, {@link HolderDone}).
 * Everything the tool wrote is then in its pipes, but not necessarily read yet: this process's
 * event loop reads each pipe when it gets to it, in no order with the holder's channel (a busy
 * server has hundreds of descriptors ready at once). So what is left in each is read here, at
 * once, straight from its descriptor until it is empty, and handed to where the stream's bytes go,
 * after all the stream delivered: nothing that stays alive can write to them any more. A pipe
 * this process has paused or whose stream holds bytes not yet delivered (a stdout spilling to disk
 * faster than the disk takes it), or whose descriptor is not known, leaves the run to end with its
 * launcher, as does a holder not alone.
 */
function holderOver(
  child: ChildProcess,
  copy: OutputCopy,
  fd: number,
  sinks: Sinks,
  keep: PromiseLike<unknown> | undefined,
): Promise<Exit> {
  return new Promise((resolve) => {
    copy.listen((child.stdio as unknown as (Duplex | null)[])[fd], (done) => {
      if (!done.alone) return;
      const pipes: [Readable | null | undefined, ((chunk: Buffer) => void) | undefined][] = [
        [child.stdout, sinks.stdout],
        [child.stderr, sinks.stderr],
        // Without an events sink, the run's pipe (a sandbox built ahead has one) was closed before
        // its tool started: nothing in it is the tool's, and it is read only to find it empty.
        [child.stdio[EVENTS_FD] as Readable | null | undefined, sinks.events ?? ignore],
      ];
      const open = pipes.filter(([p]) => p && !p.readableEnded && !p.destroyed) as [Readable, ((chunk: Buffer) => void) | undefined][];
      if (open.some(([p, sink]) => !sink || p.isPaused() || p.readableLength > 0 || descriptorOf(p) === undefined)) return;
      for (const [p, sink] of open) drain(descriptorOf(p) as number, sink as (chunk: Buffer) => void);
      const kept = keepUntil(keep);
      resolve({ code: done.status, signal: null, early: true, kept: kept !== undefined });
      return kept;
    });
  });
}

const ignore = (_chunk: Buffer): void => {};

/** The descriptor under a pipe's stream (Node's libuv handle), when it says. */
function descriptorOf(stream: Readable): number | undefined {
  const fd = (stream as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : undefined;
}

/** Reads a non-blocking descriptor until it is empty (or at its end), handing each chunk to `sink`. */
function drain(fd: number, sink: (chunk: Buffer) => void): void {
  const buf = Buffer.allocUnsafe(64 * 1024);
  for (;;) {
    let n: number;
    try {
      n = readSync(fd, buf, 0, buf.length, null);
    } catch {
      return; // EAGAIN: empty (any other error: nothing more to read either)
    }
    if (n === 0) return;
    sink(Buffer.from(buf.subarray(0, n)));
  }
}

/** Events: handed on as read, never kept, never paused (the tool must not block on them); none once sealed (the run has been answered). */
function relayEvents(
  child: ChildProcess,
  events: ((chunk: Buffer) => void) | undefined,
): { bytes: number; seal(): void; take(chunk: Buffer): void } | undefined {
  if (!events) return undefined;
  let sealed = false;
  const counted = {
    bytes: 0,
    seal() {
      sealed = true;
    },
    take(chunk: Buffer) {
      if (sealed) return;
      counted.bytes += chunk.length;
      events(chunk);
    },
  };
  const pipe = child.stdio[EVENTS_FD] as Duplex | null | undefined;
  if (!pipe) return counted;
  pipe.on('error', () => {}); // the tool's end closing early is its business
  pipe.on('data', counted.take);
  pipe.end(); // nothing goes the other way: a tool reading it sees end-of-file
  return counted;
}

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The run ended at its holder's word, before its launcher closed ({@link holderOver}). */
  early?: boolean;
  /** Its sandbox is kept until {@link RunOptions.teardownAfter} settles. */
  kept?: boolean;
}

/**
 * How the launcher ended. Rejects with `sandbox_unavailable`, having given back what the run
 * held, when the launcher itself could not be started (spawn's EAGAIN when this user is at its limit).
 */
function exitOf(child: ChildProcess, run: StartedRun, uid: number): Promise<Exit> {
  return new Promise((resolve, reject) => {
    child.on('error', (err) => {
      if (run.claim) finishPrebuilt(run.claim);
      run.grant.restore();
      run.cold?.staged.remove();
      const why = launchFailure(`the launcher: ${err.message}`, 'did not start', { tasks: () => userTasks(uid) });
      reject(new SandboxError('sandbox_unavailable', `${why.message}; nothing was run — fix: ${why.fix}`, { cause: err }));
    });
    child.on('close', (c, s) => resolve({ code: c, signal: s }));
  });
}

/** Gives back what the ended run held: its sandbox built ahead or launcher, its binds (once: restore is idempotent), its staged files. */
function release(run: StartedRun): void {
  if (run.claim) finishPrebuilt(run.claim);
  if (!run.claim?.built) finished(run.launched);
  run.grant.restore();
  run.cold?.staged.remove();
}

/**
 * Refuses (`sandbox_unavailable`) a run whose tool never started, with the launch's account of
 * why: its network relay did not start, or nothing of it ran (no start mark) and nothing here
 * ended it. A run killed for a limit, or cancelled, before its tool started keeps that reason:
 * the limit covers the start too.
 */
async function refuseUnstarted(r: {
  egress: Egress | undefined;
  start: StartWatch;
  ended: EndReason | undefined;
  end: ReturnType<typeof endOf>;
  stderrTail: string;
  stdout: StdoutKeeper;
  uid: number;
}): Promise<void> {
  const exit = r.end.exitCode ?? r.end.signal;
  if (r.egress && !r.egress.started() && !r.ended) {
    await r.stdout.abandon();
    throw new SandboxError(
      'sandbox_unavailable',
      `the sandbox's network relay did not start, so the tool did not run (exit ${exit}): ${r.stderrTail.trim() || 'no message'}`,
    );
  }
  if (!r.start.started && !r.ended) {
    await r.stdout.abandon();
    const why = launchFailure(r.start.before, `exited ${exit}`, { tasks: () => userTasks(r.uid) });
    throw new SandboxError('sandbox_unavailable', `${why.message}; nothing was run — fix: ${why.fix}`);
  }
}
