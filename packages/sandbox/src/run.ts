import {
  existsSync,
  mkdirSync,
  mkdtempSync,
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
import { constants, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import type { Writable } from 'node:stream';
import { type EnforcedLimits, enforcedBy, killRunCgroup, overRunLimit, pidsLimitHit, runCpuUsec } from './cgroup.js';
import { checkGrant, hostAddresses } from './egress/guard.js';
import { EGRESS_PORTS, egressEnv, isRelayMessage, PRELOAD_PATH, READY, wrapCommand } from './egress/inside.js';
import { preloadFile } from './egress/preload.js';
import { EgressProxy, type NetworkUsage } from './egress/proxy.js';
import { SandboxError } from './errors.js';
import { BIND_FD, controlLine, finished, type Launched, launch, shellQuote } from './launcher.js';
import { finishPrebuilt, INNER_COMMAND, MAX_STAGED_FILE, type PrebuiltClaim, type Shape, takePrebuilt } from './prebuilt.js';
import { type HostInfo, probe } from './probe.js';
import {
  buildBwrapArgs,
  ETC_DIRS,
  ETC_FILES,
  type HostLayout,
  type Limits,
  type NetworkAccess,
  resolveLimits,
  SANDBOX_UID,
  type SandboxProfile,
  sandboxEnv,
} from './profile.js';
import { buildSeccompFilter } from './seccomp.js';

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
   * per-run mount points (a directory per process, 0700) and must be on the filesystem of the
   * `rw` per-run sources, so the output is moved there by rename.
   */
  prebuild?: { stageDir: string };
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
  /** True when the run was served by a sandbox built ahead ({@link RunOptions.prebuild}). */
  prebuilt: boolean;
}

let etcDir: string | undefined;
const etcCopies = new Map<string, string>(); // host file → identity of the copy made
let seccomp: Buffer | undefined;

/**
 * The directory shown as /etc: made once per process (0700, removed at exit) with synthesized
 * passwd, group and hosts and mount points for ETC_DIRS; the copies of ETC_FILES are refreshed
 * whenever the host file changes (one stat each per run), written by rename so a running
 * sandbox never sees half a file.
 */
function prepareEtc(): string {
  if (!etcDir) {
    const dir = mkdtempSync(join(tmpdir(), 'forge-sandbox-etc-'));
    // Removed when the process exits (a sandbox still running then is killed with its parent).
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
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
function assertHostReady(host: HostInfo): asserts host is HostInfo & Required<Pick<HostInfo, 'bwrap' | 'arch'>> {
  if (host.ok && host.bwrap && host.arch) return;
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
 * The sources of a run's per-run mounts, when a sandbox built ahead can take them (a small
 * regular file, an empty directory); undefined when it cannot. Only looks: a file's bytes are
 * read when a waiting sandbox is there to take them.
 */
function perRunSources(profile: SandboxProfile): string[] | undefined {
  const sources: string[] = [];
  for (const m of profile.mounts ?? []) {
    if (!m.perRun) continue;
    try {
      const st = statSync(m.source);
      const fits = m.mode === 'ro' ? st.isFile() && st.size <= MAX_STAGED_FILE : st.isDirectory() && readdirSync(m.source).length === 0;
      if (!fits) return undefined;
    } catch {
      return undefined; // a missing source: building its own sandbox reports it
    }
    sources.push(m.source);
  }
  return sources;
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
  // fd 3: the argument list, fd 4: the seccomp program, binds from BIND_FD (see launcher.ts).
  const fds = { seccomp: 4, binds: binds.map((_, i) => BIND_FD + i) };
  etcDirs ??= ETC_DIRS.filter((d) => existsSync(d));
  const layout: HostLayout = { roots: host.roots, etcDir: prepareEtc(), etcDirs };
  const args = buildBwrapArgs(profile, layout, fds, limits);
  seccomp ??= buildSeccompFilter(host.arch);

  // bwrap takes the command only from its real command line; its options, with the environment
  // (which may hold secrets), go through fd 3, out of the host's process list.
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
    `ulimit -p ${cap('Max processes', limits.processes)}`,
    'ulimit -c 0',
    `ulimit -v ${Math.floor(cap('Max address space', limits.addressSpaceBytes) / 1024)}`, // KiB
  ];
  const optionCount = args.length - profile.command.length - 1;
  const cgroupLimits = { processes: limits.processes, memoryBytes: limits.memoryBytes, cpuCores: limits.cpuCores };
  const cgroups = host.cgroups ? { base: host.cgroups, limits: cgroupLimits } : undefined;

  // A sandbox built ahead, when the run fits one: its shape is everything bwrap is told but the
  // command, the environment and the per-run mounts' sources.
  const staged = options.prebuild && !network && binds.length === 0 ? perRunSources(profile) : undefined;
  let claim: PrebuiltClaim | undefined;
  if (options.prebuild && staged) {
    const slots = (profile.mounts ?? []).filter((m) => m.perRun).map((m) => m.mode);
    const optionsFor = (paths: readonly string[]) => {
      let i = 0;
      const mounts = (profile.mounts ?? []).map((m) => (m.perRun ? { ...m, source: paths[i++] as string } : m));
      const a = buildBwrapArgs({ ...profile, command: INNER_COMMAND, mounts }, layout, fds, limits, { setenv: false });
      return a.slice(0, a.length - INNER_COMMAND.length - 1);
    };
    const shape: Shape = {
      key: [host.bwrap.path, options.prebuild.stageDir, cgroups?.base.base ?? '', ...optionsFor(slots.map((_, i) => `/\0slot${i}`))].join(
        '\0',
      ),
      stageDir: options.prebuild.stageDir,
      slots,
      bwrap: host.bwrap.path,
      options: optionsFor,
      ...(cgroups ? { cgroups: cgroups.base } : {}),
      seccomp,
      cover: coverInherited,
    };
    const env = Object.entries(sandboxEnv(profile)).map(([k, v]) => `${k}=${shellQuote(v)}`);
    // The waiting shell started with bwrap's environment (only PWD, from --chdir), as a command
    // bwrap starts itself does; it adds the run's own.
    const line = controlLine([`export ${env.join(' ')}`, ...steps], profile.command);
    claim = takePrebuilt(shape, staged, line, cgroupLimits);
  }
  preload?.write(); // (a run with network is never served by a sandbox built ahead: no claim to end)
  const started = performance.now();
  const launched: Launched | undefined =
    claim?.built ??
    launch({
      steps,
      argv: [host.bwrap.path, '--args', '3', ...args.slice(optionCount)],
      bindFds: binds.map((b) => b.fd),
      ...(cgroups ? { cgroups } : {}),
      seccomp,
      cover: coverInherited,
      ...(network ? { ipc: true } : {}),
      ...(claim ? { refill: false } : {}),
    });
  if (!launched) {
    if (claim) finishPrebuilt(claim);
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
  if (!claim?.built) write(child.stdio[3] as Writable, `${args.slice(0, optionCount).join('\0')}\0`);
  write(child.stdin, options.stdin ?? '');

  let ended: EndReason | undefined;
  const kill = (why: EndReason) => {
    ended ??= why;
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
  let stderr = Buffer.alloc(0);
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = Buffer.concat([stderr, chunk]);
    if (stderr.length > limits.stderrTailBytes * 2) stderr = stderr.subarray(stderr.length - limits.stderrTailBytes);
  });

  const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
    child.on('error', (err) => {
      if (claim) finishPrebuilt(claim);
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
  if (claim) finishPrebuilt(claim, staged);
  if (!claim?.built) finished(launched);
  if (network && relayed < 2 && !ended) {
    await spillWrites.catch(() => {});
    if (spill) await (await spill).close();
    throw new SandboxError(
      'sandbox_unavailable',
      `the sandbox's network relay did not start, so the tool did not run (exit ${exitCode ?? sig}): ${stderrTail.trim() || 'no message'}`,
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
    prebuilt: claim?.built !== undefined,
  };
}
