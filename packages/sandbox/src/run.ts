import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import { Server } from 'node:net';
import { constants } from 'node:os';
import { basename, join } from 'node:path';
import type { Duplex, Writable } from 'node:stream';
import type { CheckedBind } from './binds.js';
import { type EnforcedLimits, enforcedBy, killRunCgroup, overRunLimit, pidsLimitHit, runCpuUsec } from './cgroup.js';
import { COPY_LIMITS, type CopiedOutput, copyOut } from './copyout.js';
import { checkGrant, hostAddresses } from './egress/guard.js';
import { EGRESS_PORTS, egressEnv, isRelayMessage, PRELOAD_PATH, READY, wrapCommand } from './egress/inside.js';
import { preloadFile } from './egress/preload.js';
import { EgressProxy, type NetworkUsage } from './egress/proxy.js';
import { SandboxError } from './errors.js';
import { type BindGrant, grantBinds } from './identity.js';
import { ARGS_FD, argsFdFor, BIND_FD, EVENTS_FD, finished, HOLDER_FD, type Launched, launch, shellQuote } from './launcher.js';
import { finishPrebuilt, INNER_COMMAND, MAX_STAGED_FILE, type PrebuiltClaim, runLine, type Shape, takePrebuilt } from './prebuilt.js';
import { type HostInfo, probe, type SandboxIdentity } from './probe.js';
import {
  buildBwrapArgs,
  ETC_DIRS,
  ETC_FILES,
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
  sandboxEnv,
} from './profile.js';
import { buildSeccompFilter } from './seccomp.js';
import { reachable, type Staged, type StageRequest, stage } from './staging.js';
import { processTempDir } from './tmp.js';

/** Why a run ended. */
export type EndReason = 'exit' | 'signal' | 'timeout' | 'cpu' | 'memory' | 'file_size' | 'output_cap';

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

let etcDir: string | undefined;
const etcCopies = new Map<string, string>(); // host file → identity of the copy made
let seccomp: Buffer | undefined;

/**
 * The directory shown as /etc: made once per process (0700, removed at exit) with synthesized
 * passwd, group and hosts and mount points for ETC_DIRS; the copies of ETC_FILES are refreshed
 * whenever the host file changes (one stat each per run), written by rename so a running
 * sandbox never sees half a file.
 */
function prepareEtc(id?: SandboxIdentity): string {
  if (!etcDir) {
    const dir = processTempDir('etc', id);
    // Readable by the sandbox's uid, which is not this process's when this process is root: it
    // holds nothing that is not public (synthesized users, copies of public /etc files).
    chmodSync(dir, 0o755);
    writeFileSync(join(dir, '.empty'), '', { mode: 0o444 }); // bound over the masked /proc files
    const u = SANDBOX_UID;
    writeFileSync(
      join(dir, 'passwd'),
      `root:x:0:0:root:/root:/bin/sh\nsandbox:x:${u}:${u}:sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n`,
      { mode: 0o644 },
    );
    writeFileSync(join(dir, 'group'), `root:x:0:\nsandbox:x:${u}:\nnogroup:x:65534:\n`, { mode: 0o644 });
    writeFileSync(join(dir, 'hosts'), '127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n', { mode: 0o644 });
    for (const d of ETC_DIRS) mkdirSync(join(dir, basename(d)), { mode: 0o755 });
    etcDir = dir;
  }
  for (const f of ETC_FILES) {
    const st = statSync(f, { throwIfNoEntry: false }); // follows /etc/localtime's symlink
    const id = st?.isFile() ? `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}` : '';
    if (etcCopies.get(f) === id) continue;
    const target = join(etcDir, basename(f));
    if (id) {
      writeFileSync(`${target}.tmp`, readFileSync(f), { mode: 0o644 });
      renameSync(`${target}.tmp`, target);
    } else {
      rmSync(target, { force: true });
    }
    etcCopies.set(f, id);
  }
  return etcDir;
}

let etcDirs: string[] | undefined;

/**
 * Descriptors of this process, from `first` up, that lack close-on-exec: a child would inherit
 * them. Read from /proc/self/fdinfo (the `flags` field is octal; O_CLOEXEC is 02000000).
 *
 * Found once per process: Node opens every descriptor of its own with close-on-exec, so the
 * ones without it are those inherited at start. Covering one that was closed since (or whose
 * number now holds a close-on-exec descriptor) with /dev/null in the child is harmless.
 */
function inheritedDescriptors(first: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc/self/fdinfo')) {
    const fd = Number(name);
    if (!(fd >= first)) continue;
    try {
      const flags = /^flags:\s+([0-7]+)/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'))?.[1];
      if (flags && (Number.parseInt(flags, 8) & 0o2000000) === 0) out.push(fd);
    } catch {
      // closed meanwhile (the readdir's own descriptor, for one)
    }
  }
  return out;
}

let devNull: number | undefined;
let hardLimits: Map<string, number> | undefined;

/** This process's hard rlimits by their /proc/self/limits name (unlimited ones are left out). */
function readHardLimits(): Map<string, number> {
  const out = new Map<string, number>();
  try {
    for (const line of readFileSync('/proc/self/limits', 'utf8').split('\n').slice(1)) {
      const m = /^(.+?)\s{2,}(\S+)\s+(\S+)/.exec(line);
      if (m && /^\d+$/.test(m[3] as string)) out.set(m[1] as string, Number(m[3]));
    }
  } catch {
    // no /proc: ask for the limits as given
  }
  return out;
}
let leakedFds: number[] | undefined;

/**
 * Stdio entries from position `from` on that put /dev/null over every descriptor this process
 * inherited without close-on-exec (Node marks its own, but not those of whoever started it):
 * otherwise they would reach the tool.
 */
function coverInherited(from: number): (number | 'ignore')[] {
  leakedFds ??= inheritedDescriptors(3).sort((a, b) => a - b);
  const out: (number | 'ignore')[] = [];
  for (const fd of leakedFds) {
    if (fd < from) continue;
    devNull ??= openSync('/dev/null', 'r');
    while (from + out.length < fd) out.push('ignore');
    out[fd - from] = devNull;
  }
  return out;
}

const NETWORK_DEFAULTS = { maxConnections: 64, idleTimeoutMs: 30_000, connectTimeoutMs: 10_000 };

/** The network of a profile with its defaults, or undefined when it has none; throws `invalid_profile`. */
function resolveNetwork(access: NetworkAccess | undefined): (NetworkAccess & typeof NETWORK_DEFAULTS) | undefined {
  if (access === undefined) return undefined;
  const why = checkGrant(access?.grant);
  if (why) throw new SandboxError('invalid_profile', `network.${why}`);
  if (access.grant.network !== 'allow') return undefined;
  const out = { ...NETWORK_DEFAULTS, ...access };
  for (const k of Object.keys(NETWORK_DEFAULTS) as (keyof typeof NETWORK_DEFAULTS)[]) {
    if (!Number.isSafeInteger(out[k]) || out[k] <= 0) {
      throw new SandboxError('invalid_profile', `network.${k} must be a positive integer (got ${JSON.stringify(out[k])})`);
    }
  }
  return out;
}

/**
 * The profile a run with network really runs: the tool's command behind the relay (with the Node
 * binary this process runs on, mounted read-only when it lives outside /usr), the proxy
 * variables, and the preload (the host file `preload`).
 */
function withEgress(profile: SandboxProfile, preload: string): SandboxProfile {
  const cmd = profile.command;
  if (cmd.length === 0 || !(cmd[0] as string).startsWith('/')) {
    throw new SandboxError('invalid_profile', `command[0] must be an absolute path (got ${JSON.stringify(cmd[0])})`);
  }
  const node = realpathSync(process.execPath);
  return {
    ...profile,
    command: wrapCommand(node, cmd),
    env: egressEnv(profile.env ?? {}, profile.network?.grant ?? { loopback: 'deny' }),
    mounts: [
      // The relay's node before the profile's own mounts, so that one of those at its path wins.
      ...(node.startsWith('/usr/') ? [] : [{ source: node, mode: 'ro' as const }]),
      ...(profile.mounts ?? []),
      { source: preload, target: PRELOAD_PATH, mode: 'ro' },
    ],
  };
}

/** Throws `sandbox_unavailable` with every problem and its fix, unless the host can sandbox. */
function assertHostReady(host: HostInfo): asserts host is HostInfo & Required<Pick<HostInfo, 'bwrap' | 'arch' | 'identity'>> {
  if (host.ok && host.bwrap && host.arch && host.identity) return;
  const lines = host.problems.map((p) => `${p.message} — fix: ${p.fix}`);
  throw new SandboxError(
    'sandbox_unavailable',
    `this host cannot run sandboxes, so nothing was run: ${lines.join('; ') || 'probe failed'}`,
  );
}

/** Signal names by number, from the host's own table. */
const SIGNALS = new Map(Object.entries(constants.signals).map(([name, n]) => [n as number, name]));
const SPILL_BACKLOG = 8 << 20;
/** How often a run's cgroup is checked against its CPU budget and for OOM kills. */
const WATCH_MS = 100;
const OOM_RE = /MemoryError|out of memory|Cannot allocate memory|std::bad_alloc|allocation failed/i;

/**
 * The profile's mounts as a run makes them: a per-run `ro` mount that is not a regular file of at
 * most 1 MiB is bound like any other (its bytes are not copied in); a per-run `rw` one must be an
 * empty directory (its content is copied there when the run ends). Throws `invalid_profile`.
 */
function perRunMounts(mounts: readonly Mount[]): Mount[] {
  return mounts.map((m) => {
    if (!m.perRun) return m;
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(m.source);
    } catch (err) {
      throw new SandboxError('invalid_profile', `the per-run mount ${m.source} cannot be used: ${(err as NodeJS.ErrnoException).code}`);
    }
    if (m.mode === 'ro') return st.isFile() && st.size <= MAX_STAGED_FILE ? m : { ...m, perRun: false };
    if (!st.isDirectory() || readdirSync(m.source).length > 0) {
      throw new SandboxError(
        'invalid_profile',
        `a per-run rw mount must be an empty directory: ${m.source} ${st.isDirectory() ? 'is not empty' : 'is not a directory'}`,
      );
    }
    return m;
  });
}

/**
 * The holder of a run with output directories that builds its own sandbox: runs the command
 * without the channel, says `done <status>` on it, waits there for the host, exits with the status.
 */
const HOLDER_COMMAND: readonly string[] = [
  '/bin/sh',
  '-c',
  `"$@" ${HOLDER_FD}>&-; s=$?; echo "done $s" >&${HOLDER_FD}; IFS= read -r x <&${HOLDER_FD}; exit "$s"`,
  'sandbox',
];

let cover: ProcCover | undefined;

/** What of this host's /proc a sandbox sees read-only or not at all (found once). */
function procCover(): ProcCover {
  if (cover) return cover;
  const kind = (p: string) => {
    const st = lstatSync(p, { throwIfNoEntry: false });
    return st?.isDirectory() ? 'dir' : st ? 'file' : undefined;
  };
  cover = {
    readOnly: PROC_READ_ONLY.filter((p) => kind(p) !== undefined),
    maskFiles: PROC_MASKED.filter((p) => kind(p) === 'file'),
    maskDirs: PROC_MASKED.filter((p) => kind(p) === 'dir'),
    emptyFile: join(prepareEtc(), '.empty'),
  };
  return cover;
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
  // The preload's host file exists only from just before the launch until the sandbox has mounted it.
  const preload = network ? preloadFile(EGRESS_PORTS.http) : undefined;
  if (preload) profile = withEgress(profile, preload.path);
  const binds = profile.binds ?? [];
  const identity = host.identity;
  const dropping = identity.drop.length > 0;
  const given = profile.mounts ?? [];
  profile = { ...profile, mounts: perRunMounts(given) };
  const mounts = profile.mounts ?? [];
  const outputs = mounts.filter((m) => m.perRun && m.mode === 'rw');
  // A run with output directories runs behind a holder: a shell inside that says when the tool is
  // done and keeps the sandbox (its tmpfs) alive while the host copies them out.
  const hold = outputs.length > 0;
  if (hold) profile = { ...profile, command: [...HOLDER_COMMAND, ...profile.command] };
  // fd 4: the seccomp program, binds from BIND_FD, then one descriptor per per-run file, whose
  // bytes bwrap copies in (so its host path never shows inside). The argument list comes on
  // ARGS_FD or past those (argsFdFor); fd 3 (the events pipe) is never one of bwrap's.
  const fdsFor = (ms: readonly Mount[], first: number) => {
    let next = first;
    return ms.map((m) => (m.perRun && m.mode === 'ro' ? next++ : undefined));
  };
  const opensFor = (ms: readonly Mount[], fds: readonly (number | undefined)[]) =>
    ms.flatMap((m, i) => (fds[i] === undefined ? [] : [`exec ${fds[i]}<${shellQuote(m.source)}`]));
  etcDirs ??= ETC_DIRS.filter((d) => existsSync(d));
  const layout: HostLayout = { roots: host.roots, etcDir: prepareEtc(identity), etcDirs, proc: procCover() };
  seccomp ??= buildSeccompFilter(host.arch);
  // bwrap, behind setpriv when this process is root: the sandbox then runs as an unprivileged
  // host uid, so no uid of it maps to host root.
  const bwrapArgv = [...identity.drop, host.bwrap.path];
  /**
   * The mounts and binds of a sandbox as bwrap is to make them: when root is dropped, those whose
   * source the sandbox uid cannot reach are staged (see staging.ts). `dry` stages nothing (for
   * the key of sandboxes built ahead).
   */
  const plan = (ms: readonly Mount[], bs: readonly CheckedBind[], dry = false) => {
    const requests: StageRequest[] = [];
    const at: { mount?: number; bind?: number }[] = [];
    if (dropping && !dry) {
      // Staged: what the sandbox uid cannot reach, and every rw source (remounted noexec).
      ms.forEach((m, i) => {
        const rw = m.mode === 'rw';
        if (m.perRun || (!rw && reachable(m.source, identity))) return;
        requests.push({ from: m.source, kind: statSync(m.source).isDirectory() ? 'directory' : 'file', noexec: rw });
        at.push({ mount: i });
      });
      bs.forEach((b, i) => {
        const rw = b.mode === 'rw';
        if (!rw && reachable(b.path, identity)) return;
        requests.push({ from: `/proc/self/fd/${BIND_FD + i}`, kind: b.kind, closeFd: BIND_FD + i, noexec: rw });
        at.push({ bind: i });
      });
    }
    let staged: Staged;
    try {
      staged = stage(requests, identity);
    } catch (err) {
      throw new SandboxError('sandbox_unavailable', `${(err as Error).message}; nothing was run`);
    }
    const mounted = [...ms];
    const bindSources: (string | undefined)[] = bs.map(() => undefined);
    at.forEach((w, k) => {
      const point = staged.points[k] as string;
      if (w.mount !== undefined) {
        const m = mounted[w.mount] as Mount;
        mounted[w.mount] = { ...m, source: point, target: m.target ?? m.source };
      }
      if (w.bind !== undefined) bindSources[w.bind] = point;
    });
    const mfds = fdsFor(mounted, BIND_FD + bs.length);
    return {
      mounts: mounted,
      fds: { seccomp: 4, binds: bs.map((_, i) => BIND_FD + i), bindSources, mounts: mfds },
      opens: opensFor(mounted, mfds),
      staged,
    };
  };

  // bwrap takes the command only from its real command line; its options, with the environment
  // (which may hold secrets), go through ARGS_FD, out of the host's process list.
  //
  // Never ask for more than this process's own hard limits: an unprivileged process cannot raise
  // them (the launcher would fail), and the tool gets no more than its parent has anyway.
  hardLimits ??= readHardLimits();
  const cap = (name: string, v: number) => Math.min(v, hardLimits?.get(name) ?? v);
  const cpu = cap('Max cpu time', limits.cpuSeconds + 1);
  const steps = [
    // Soft CPU limit first (SIGXCPU, reported as cpu), then the hard one a second later.
    `ulimit -S -t ${Math.min(limits.cpuSeconds, cpu)}`,
    `ulimit -H -t ${cpu}`,
    `ulimit -f ${Math.max(1, Math.floor(cap('Max file size', limits.fileSizeBytes) / 512))}`, // 512-byte blocks
    `ulimit -n ${cap('Max open files', limits.openFiles)}`,
    'ulimit -c 0',
    `ulimit -v ${Math.floor(cap('Max address space', limits.addressSpaceBytes) / 1024)}`, // KiB
    // A launcher (or sandbox) made ahead holds an events pipe whether or not this run wants one.
    ...(options.events ? [] : [`exec ${EVENTS_FD}>&-`]),
  ];
  const cgroupLimits = { processes: limits.processes, memoryBytes: limits.memoryBytes, cpuCores: limits.cpuCores };
  const cgroups = host.cgroups ? { base: host.cgroups, limits: cgroupLimits } : undefined;
  // RLIMIT_NPROC counts every process of the user, here of every sandbox at once: only where no
  // pids cgroup counts the run's own (and where it does, it would also count across runs of the
  // shared sandbox uid). Root without a pids cgroup does not get this far (see probe()).
  if (!cgroups?.base.pids) steps.push(`ulimit -p ${cap('Max processes', limits.processes)}`);

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
    // In a sandbox built ahead, each per-run file is a placeholder bound like any other mount,
    // whose bytes are copied in when a run takes it.
    const optionsFor = (paths: readonly string[], dry = false) => {
      let i = 0;
      const ms = mounts.map((m) => (m.perRun && m.mode === 'ro' ? { ...m, source: paths[i++] as string, perRun: false } : m));
      const p = plan(ms, [], dry);
      const a = buildBwrapArgs({ ...profile, command: INNER_COMMAND, mounts: p.mounts }, layout, p.fds, limits, { setenv: false });
      return { options: a.slice(0, a.length - INNER_COMMAND.length - 1), opens: p.opens, prefix: p.staged.prefix, remove: p.staged.remove };
    };
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
    const inner = hold ? profile.command.slice(HOLDER_COMMAND.length) : profile.command;
    const line = runLine([`export ${env.join(' ')}`, ...steps], inner, hold);
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
  const launched: Launched | undefined =
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
  let proxy: EgressProxy | undefined;
  let relayed = 0;
  if (network) {
    const p = new EgressProxy({
      grant: network.grant,
      ...(network.resolver ? { resolver: network.resolver } : {}),
      ...(network.onEvent ? { onEvent: network.onEvent } : {}),
      maxConnections: network.maxConnections,
      idleTimeoutMs: network.idleTimeoutMs,
      connectTimeoutMs: network.connectTimeoutMs,
      hostAddresses: hostAddresses(),
    });
    proxy = p;
    child.on('message', (m: unknown, handle: unknown) => {
      if (!(handle instanceof Server)) return;
      const kind = isRelayMessage(m)
        ? m.forgeEgress === EGRESS_PORTS.http
          ? 'http'
          : m.forgeEgress === EGRESS_PORTS.socks5
            ? 'socks5'
            : undefined
        : undefined;
      if (relayed >= 2 || !kind) return void handle.close();
      p.attach(handle, kind);
      // The channel stays open until bwrap exits (its end of it closes then, and the child's
      // 'close' waits for that); the tool never holds it.
      if (++relayed === 2) {
        preload?.remove(); // the relay runs: bwrap has mounted everything
        child.send(READY);
      }
    });
  }

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
    try {
      if (child.pid) process.kill(-child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
    if (cgroup) killRunCgroup(cgroup);
  };
  const timer = setTimeout(() => kill('timeout'), limits.timeoutMs);
  // The run-wide limits its cgroup cannot stop by itself: the CPU budget (cgroups count CPU time
  // but never stop at a total), and an OOM kill of one process, which ends the whole run.
  const cpuBudgetUsec = limits.cpuSeconds * 1e6;
  const watch = cgroup
    ? setInterval(() => {
        const over = overRunLimit(cgroup, cpuBudgetUsec);
        if (over) kill(over);
      }, WATCH_MS)
    : undefined;
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
  let stderr = Buffer.alloc(0);
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = Buffer.concat([stderr, chunk]);
    if (stderr.length > limits.stderrTailBytes * 2) stderr = stderr.subarray(stderr.length - limits.stderrTailBytes);
  });

  const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
    child.on('error', (err) => {
      if (claim) finishPrebuilt(claim);
      grant.restore();
      cold?.staged.remove();
      reject(err);
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
  // The monitor bwrap reports a tool killed by signal N as exit code 128 + N.
  let exitCode = code;
  let sig: string | null = signal;
  if (sig === null && code !== null && code > 128 && code < 128 + 65) {
    sig = SIGNALS.get(code - 128) ?? `signal ${code - 128}`;
    exitCode = null;
  }
  const stderrTail = stderr.subarray(Math.max(0, stderr.length - limits.stderrTailBytes)).toString('utf8');
  let reason: EndReason = ended ?? (sig ? 'signal' : 'exit');
  // Over a run-wide limit since the last look (the tool may have ended by itself meanwhile).
  const over = cgroup && !ended ? overRunLimit(cgroup, cpuBudgetUsec) : undefined;
  if (over) reason = over;
  else if (!ended) {
    if (sig === 'SIGXCPU') reason = 'cpu';
    else if (sig === 'SIGXFSZ') reason = 'file_size';
    else if (exitCode !== 0 && OOM_RE.test(stderrTail)) reason = 'memory';
  }
  if (ended) {
    exitCode = null;
    sig = 'SIGKILL';
  }
  const processLimitHit = cgroup ? pidsLimitHit(cgroup) : false;
  const cpuUsec = cgroup ? runCpuUsec(cgroup) : undefined;
  if (claim) finishPrebuilt(claim);
  if (!claim?.built) finished(launched);
  grant.restore();
  cold?.staged.remove();
  if (network && relayed < 2 && !ended) {
    await spillWrites.catch(() => {});
    if (spill) await (await spill).close();
    throw new SandboxError(
      'sandbox_unavailable',
      `the sandbox's network relay did not start, so the tool did not run (exit ${exitCode ?? sig}): ${stderrTail.trim() || 'no message'}`,
    );
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
    enforced: enforcedBy(cgroup?.host),
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
