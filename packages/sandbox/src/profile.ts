import { isAbsolute } from 'node:path';
import type { CheckedBind } from './binds.js';
import type { NetworkGrant, Resolver } from './egress/guard.js';
import type { SecretRule } from './egress/intercept.js';
import type { NetworkEvent } from './egress/proxy.js';
import { SandboxError } from './errors.js';
import type { RootEntry } from './host-roots.js';

/** Resource limits of one run. Every field has a default; see {@link DEFAULT_LIMITS}. */
export interface Limits {
  /** Wall-clock time before the whole sandbox is killed (`timeout`). */
  timeoutMs: number;
  /**
   * CPU seconds. Where the run has a cgroup (`RunResult.enforced.cpu`), a budget for all its
   * processes together: past it the whole run is killed (`cpu`). Each process also gets it as
   * RLIMIT_CPU (SIGXCPU, `cpu`), which is all there is without a cgroup.
   */
  cpuSeconds: number;
  /**
   * CPU cores' worth of time the run may use per second of wall clock, all processes together
   * (cgroup `cpu.max` / `cpu.cfs_quota_us`), where a cgroup enforces it; else not limited.
   */
  cpuCores: number;
  /**
   * Memory of the whole run: every process's resident memory plus what it writes to its tmpfs
   * `/tmp` and `/dev/shm`, with no swap (cgroup `memory.max` + `memory.swap.max = 0`, v1
   * `memory.limit_in_bytes` + `memsw`), where a cgroup enforces it. When the kernel kills a
   * process for it, the whole run is killed (`memory`). Without a cgroup only
   * {@link addressSpaceBytes} applies, per process.
   */
  memoryBytes: number;
  /** Largest file the tool may write (RLIMIT_FSIZE); past it, SIGXFSZ (`file_size`). */
  fileSizeBytes: number;
  /** Open file descriptors (RLIMIT_NOFILE). */
  openFiles: number;
  /** Processes and threads (RLIMIT_NPROC, counted per user). */
  processes: number;
  /** Address space (RLIMIT_AS), a runaway guard only: at least 4 GiB, since V8 reserves that much. */
  addressSpaceBytes: number;
  /** Size of the sandbox's private /tmp. */
  tmpBytes: number;
  /**
   * Size of each per-run read-write directory ({@link Mount.perRun}): a tmpfs of this size inside,
   * copied out when the run ends, so the run can never leave more than this on the host's disk.
   */
  outputDirBytes: number;
  /** Stdout kept in memory; the rest is spilled to `stdoutFile` when given. */
  outputBytes: number;
  /** Stdout accepted in all (memory plus spill) before the run is killed (`output_cap`). */
  outputHardBytes: number;
  /** Bytes of stderr kept (the tail). */
  stderrTailBytes: number;
}

export const DEFAULT_LIMITS: Readonly<Limits> = {
  timeoutMs: 30_000,
  cpuSeconds: 30,
  // Two cores: a runtime's helper threads (V8's compiler and GC, a BLAS pool) keep a
  // single-threaded tool at full speed, and no run takes more than two of the host's cores.
  cpuCores: 2,
  // 1 GiB: well above what the runtimes need to start (node ~50 MB, python ~10 MB) and a tool's
  // usual working set, both tmpfs mounts at their cap, and small enough that a few runs at
  // once do not crowd out the host.
  memoryBytes: 2 ** 30,
  fileSizeBytes: 64 << 20,
  openFiles: 256,
  processes: 64,
  addressSpaceBytes: 8 * 2 ** 30,
  tmpBytes: 64 << 20,
  outputDirBytes: 64 << 20,
  outputBytes: 1 << 20,
  outputHardBytes: 64 << 20,
  stderrTailBytes: 8 << 10,
};

const MIN_ADDRESS_SPACE = 4 * 2 ** 30;
/** Below this, bwrap and a shell cannot start, so no run could. */
const MIN_MEMORY = 16 * 2 ** 20;

/** A trusted mount chosen by the program embedding the sandbox (not by the tool or agent). */
export interface Mount {
  source: string;
  /** Where it appears inside (default: the same path). */
  target?: string;
  mode: 'ro' | 'rw';
  /**
   * The source belongs to this run only (the tool's code, the run's output directory) rather
   * than to every run of its kind (an interpreter's prefix). A `ro` one is a regular file of at
   * most 1 MiB whose bytes are copied into the sandbox (it is not bound: its host path never
   * shows inside). A `rw` one is an empty directory: inside, the tool writes to a tmpfs of
   * `limits.outputDirBytes`, whose content is copied into the directory when the run ends (files
   * 0600, directories 0700, symbolic links as links, nothing else), so the host's disk holds at
   * most that much and nothing the tool marked executable. Such mounts also let a run take a
   * sandbox built ahead of time ({@link RunOptions.prebuild}).
   */
  perRun?: boolean;
}

/** What to run and what it may see. */
export interface SandboxProfile {
  /** argv inside the sandbox; `command[0]` is an absolute path. */
  command: readonly string[];
  /** Working directory inside (default `/tmp`). */
  cwd?: string;
  /** Extra environment (on top of PATH, HOME, TMPDIR, LANG); nothing else of the parent's is passed. */
  env?: Readonly<Record<string, string>>;
  /** Trusted mounts: the tool's files (read-only), a per-run artifacts directory (read-write), an interpreter's prefix. */
  mounts?: readonly Mount[];
  /** Checked hostile binds ({@link checkBind}), mounted by descriptor at their own path. */
  binds?: readonly CheckedBind[];
  limits?: Partial<Limits>;
  /**
   * Network through forge's egress proxy, when `grant.network` is `allow`. Without it (or with
   * `deny`) the sandbox has only its own loopback: no route out, no proxy.
   */
  network?: NetworkAccess;
}

/** A run's egress: what it may reach, who hears about it, and its limits. */
export interface NetworkAccess {
  /** What may be reached (the shape of `@forge/policy`'s `networkFor()` result). */
  grant: NetworkGrant;
  /** Called for every decision and every closed connection (to audit them). Must not throw. */
  onEvent?: (event: NetworkEvent) => void;
  /** Resolves names (default: the system resolver). Tests map names to loopback with it. */
  resolver?: Resolver;
  /** Connections the run may open; past it, refused (`connection_limit`). Default 64. */
  maxConnections?: number;
  /** A connection with no traffic either way for this long is cut. Default 30 000. */
  idleTimeoutMs?: number;
  /** Time allowed to connect to a destination. Default 10 000. */
  connectTimeoutMs?: number;
  /**
   * Secrets the tool holds only as placeholders: the proxy puts each real value into the headers
   * it names, for its hosts only, and the run trusts a CA of its own that answers for those hosts
   * (egress/intercept.ts). The caller puts each placeholder where the tool reads it (its env).
   */
  placeholders?: readonly SecretRule[];
  /** Certificates (PEM) trusted for the placeholder secrets' real hosts besides the system's roots. */
  upstreamCa?: readonly string[];
}

/** Host facts the argv depends on (from `probe()` and the prepared /etc directory). */
export interface HostLayout {
  roots: readonly RootEntry[];
  /**
   * A host directory shown read-only as /etc: synthesized passwd, group and hosts, current copies
   * of the host's {@link ETC_FILES}, and empty mount points for {@link ETC_DIRS}. One mount
   * instead of one per file keeps a run's setup short.
   */
  etcDir: string;
  /** The host's {@link ETC_DIRS} that exist, bound read-only at the same path. */
  etcDirs: readonly string[];
  /** What of /proc is read-only or hidden ({@link procCover}); empty lists when undefined. */
  proc?: ProcCover;
}

/**
 * procfs as the OCI runtimes leave it to a container (runc's read-only and masked paths): the
 * kernel's knobs read-only, the views of kernel memory, keys and timers hidden. Only the entries
 * this host's /proc has are listed (bwrap cannot cover what does not exist).
 */
export interface ProcCover {
  /** Bound read-only over themselves: `/proc/sys`, `/proc/sysrq-trigger`, `/proc/irq`, `/proc/bus`, `/proc/fs`. */
  readOnly: readonly string[];
  /** Files hidden behind an empty read-only file (`emptyFile`): `/proc/kcore`, `/proc/keys`, … */
  maskFiles: readonly string[];
  /** Directories hidden behind an empty read-only tmpfs: `/proc/acpi`, `/proc/scsi`, … */
  maskDirs: readonly string[];
  /** An empty host file, readable by the sandbox, bound over each masked file. */
  emptyFile: string;
}

/** runc's read-only paths. */
export const PROC_READ_ONLY = ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'];
/** runc's masked paths under /proc. */
export const PROC_MASKED = [
  '/proc/acpi',
  '/proc/asound',
  '/proc/interrupts',
  '/proc/kcore',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/sched_debug',
  '/proc/scsi',
  '/proc/timer_list',
  '/proc/timer_stats',
];

/** Small /etc files a program needs to start and resolve users (copied into the /etc shown). */
export const ETC_FILES = ['/etc/ld.so.cache', '/etc/ld.so.conf', '/etc/nsswitch.conf', '/etc/localtime'];
/** /etc directories a program needs (dynamic linker, alternatives, TLS roots), bound as they are. */
export const ETC_DIRS = ['/etc/ld.so.conf.d', '/etc/alternatives', '/etc/ssl', '/etc/ca-certificates'];

/** The uid and gid the tool runs as inside (a user namespace maps it to the caller's). */
export const SANDBOX_UID = 1000;

/** Descriptor numbers the argv refers to: the seccomp program, then one per bind, in order. */
export interface FdPlan {
  seccomp: number;
  binds: number[];
  /**
   * Per mount (the index of `profile.mounts`), the descriptor its source is open on, for mounts
   * made from a descriptor rather than a path: a `perRun` `ro` file's bytes are then copied in
   * (`--ro-bind-data`), any other mount is bound by descriptor. A launcher that drops root opens
   * every source before it drops.
   */
  mounts?: readonly (number | undefined)[];
  /**
   * Per bind, a path that holds the checked inode already (staged by a launcher that drops root,
   * see staging.ts), mounted instead of the descriptor.
   */
  bindSources?: readonly (string | undefined)[];
}

/** Fills in and checks the limits of a profile; throws `invalid_profile` naming the bad field. */
export function resolveLimits(partial: Partial<Limits> = {}): Limits {
  const limits = { ...DEFAULT_LIMITS, ...partial };
  for (const [k, v] of Object.entries(limits)) {
    if (!Number.isSafeInteger(v) || v <= 0) {
      throw new SandboxError('invalid_profile', `limits.${k} must be a positive integer (got ${JSON.stringify(v)})`);
    }
  }
  if (limits.addressSpaceBytes < MIN_ADDRESS_SPACE) {
    throw new SandboxError(
      'invalid_profile',
      `limits.addressSpaceBytes must be at least 4 GiB (V8 alone reserves that much); got ${limits.addressSpaceBytes}`,
    );
  }
  if (limits.memoryBytes < MIN_MEMORY) {
    throw new SandboxError(
      'invalid_profile',
      `limits.memoryBytes must be at least 16 MiB (the sandbox itself needs that); got ${limits.memoryBytes}`,
    );
  }
  return limits;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * The whole environment a profile's command gets: PATH, HOME, TMPDIR and LANG, then the
 * profile's own variables. Throws `invalid_profile` naming a variable whose name is not valid.
 */
export function sandboxEnv(profile: SandboxProfile): Record<string, string> {
  const env: Record<string, string> = {
    PATH: '/usr/local/bin:/usr/bin:/bin',
    HOME: '/tmp',
    TMPDIR: '/tmp',
    LANG: 'C.UTF-8',
    ...profile.env,
  };
  for (const k of Object.keys(env)) {
    if (!ENV_NAME.test(k)) throw new SandboxError('invalid_profile', `env name ${JSON.stringify(k)} is not a valid variable name`);
  }
  return env;
}

/**
 * The bwrap arguments for a profile (a pure function of its inputs). `profile.network` is not
 * read here: `runSandboxed` turns it into a wrapped command, variables and mounts first. The arguments go to bwrap through `--args FD`, never on its command
 * line, so environment values (secrets) do not show in the host's process list.
 */
export function buildBwrapArgs(
  profile: SandboxProfile,
  host: HostLayout,
  fds: FdPlan,
  limits: Limits,
  { setenv = true }: { setenv?: boolean } = {},
): string[] {
  const cmd = profile.command;
  if (cmd.length === 0 || !isAbsolute(cmd[0] as string)) {
    throw new SandboxError('invalid_profile', `command[0] must be an absolute path (got ${JSON.stringify(cmd[0])})`);
  }
  const a: string[] = [
    '--unshare-all',
    '--unshare-user',
    '--disable-userns',
    '--die-with-parent',
    '--new-session',
    '--cap-drop',
    'ALL',
    '--uid',
    String(SANDBOX_UID),
    '--gid',
    String(SANDBOX_UID),
    '--hostname',
    'sandbox',
    '--clearenv',
  ];
  // Without setenv the command starts with an empty environment (a sandbox built ahead gets its
  // run's variables later, from the control line).
  if (setenv) for (const [k, v] of Object.entries(sandboxEnv(profile))) a.push('--setenv', k, v);
  a.push('--ro-bind', '/usr', '/usr');
  for (const r of host.roots) a.push(...(r.symlink ? ['--symlink', r.symlink, r.path] : ['--ro-bind', r.path, r.path]));
  a.push('--ro-bind', host.etcDir, '/etc');
  for (const d of host.etcDirs) a.push('--ro-bind', d, d);
  a.push('--proc', '/proc');
  const proc = host.proc;
  for (const p of proc?.readOnly ?? []) a.push('--ro-bind', p, p);
  for (const p of proc?.maskFiles ?? []) a.push('--ro-bind', proc?.emptyFile as string, p);
  for (const p of proc?.maskDirs ?? []) a.push('--perms', '0555', '--size', '4096', '--tmpfs', p, '--remount-ro', p);
  a.push('--dev', '/dev');
  // The only writable scratch space: a capped /tmp, and a capped /dev/shm (POSIX semaphores and
  // shared memory, as Python's multiprocessing uses). Both count against tmpBytes each.
  a.push('--perms', '1777', '--size', String(limits.tmpBytes), '--tmpfs', '/tmp');
  a.push('--perms', '1777', '--size', String(limits.tmpBytes), '--tmpfs', '/dev/shm');
  (profile.mounts ?? []).forEach((m, i) => {
    if (!isAbsolute(m.source) || (m.target !== undefined && !isAbsolute(m.target))) {
      throw new SandboxError('invalid_profile', `mount paths must be absolute (got ${JSON.stringify(m)})`);
    }
    const target = m.target ?? m.source;
    const fd = fds.mounts?.[i];
    if (m.perRun && m.mode === 'rw') a.push('--perms', '0700', '--size', String(limits.outputDirBytes), '--tmpfs', target);
    else if (fd !== undefined && m.perRun) a.push('--perms', '0444', '--ro-bind-data', String(fd), target);
    else if (fd !== undefined) a.push(m.mode === 'rw' ? '--bind-fd' : '--ro-bind-fd', String(fd), target);
    else a.push(m.mode === 'rw' ? '--bind' : '--ro-bind', m.source, target);
  });
  (profile.binds ?? []).forEach((b, i) => {
    const staged = fds.bindSources?.[i];
    if (staged !== undefined) a.push(b.mode === 'rw' ? '--bind' : '--ro-bind', staged, b.path);
    else a.push(b.mode === 'rw' ? '--bind-fd' : '--ro-bind-fd', String(fds.binds[i]), b.path);
  });
  // The sandbox root and /dev are bwrap's own tmpfs mounts, with no size cap: make them read-only
  // once every mount point exists, so /tmp and /dev/shm stay the only places to write.
  a.push('--remount-ro', '/', '--remount-ro', '/dev');
  a.push('--seccomp', String(fds.seccomp));
  a.push('--chdir', profile.cwd ?? '/tmp');
  a.push('--', ...cmd);
  return a;
}
