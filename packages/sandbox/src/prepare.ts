/**
 * What every sandbox launch prepares, whether it runs once (run.ts) or lives on (spawn.ts): the
 * host checks, the curated /etc and /proc cover, the mounts and binds as bwrap makes them, the
 * rlimit steps of the launcher, the egress proxy of a run with network, and how an end is read.
 */

import type { ChildProcess } from 'node:child_process';
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
import { Server } from 'node:net';
import { constants } from 'node:os';
import { basename, join } from 'node:path';
import { rootCertificates } from 'node:tls';
import type { CheckedBind } from './binds.js';
import { overRunLimit, type RunCgroup } from './cgroup.js';
import { mintRunCa } from './egress/ca.js';
import { checkGrant, hostAddresses } from './egress/guard.js';
import { CA_PATH, EGRESS_PORTS, egressEnv, isRelayMessage, PRELOAD_PATH, READY, RUN_CA_PATH, wrapCommand } from './egress/inside.js';
import type { SecretRule, Substitution } from './egress/intercept.js';
import { type PreloadFile, preloadFile } from './egress/preload.js';
import { EgressProxy } from './egress/proxy.js';
import { SandboxError } from './errors.js';
import { BIND_FD, EVENTS_FD, shellQuote } from './launcher.js';
import { MAX_STAGED_FILE } from './prebuilt.js';
import type { HostInfo, SandboxIdentity } from './probe.js';
import {
  ETC_DIRS,
  ETC_FILES,
  type HostLayout,
  type Limits,
  type Mount,
  type NetworkAccess,
  PROC_MASKED,
  PROC_READ_ONLY,
  type ProcCover,
  SANDBOX_UID,
  type SandboxProfile,
} from './profile.js';
import { buildSeccompFilter } from './seccomp.js';
import { reachable, type Staged, type StageRequest, stage } from './staging.js';
import { userTasks } from './start.js';
import { processTempDir } from './tmp.js';

/** Why a sandbox ended. */
export type EndReason = 'exit' | 'signal' | 'timeout' | 'cpu' | 'memory' | 'file_size' | 'output_cap';

let etcDir: string | undefined;
const etcCopies = new Map<string, string>(); // host file → identity of the copy made

/**
 * The directory shown as /etc: made once per process (0700, removed at exit) with synthesized
 * passwd, group and hosts and mount points for ETC_DIRS; the copies of ETC_FILES are refreshed
 * whenever the host file changes (one stat each per run), written by rename so a running
 * sandbox never sees half a file.
 */
export function prepareEtc(id?: SandboxIdentity): string {
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

/** This process's hard rlimits by their /proc/self/limits name (unlimited ones are left out). */
export function readHardLimits(): Map<string, number> {
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
export function coverInherited(from: number): (number | 'ignore')[] {
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
export function resolveNetwork(access: NetworkAccess | undefined): (NetworkAccess & typeof NETWORK_DEFAULTS) | undefined {
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
  (access.placeholders ?? []).forEach((r, i) => {
    const bad = badPlaceholder(r);
    if (bad) throw new SandboxError('invalid_profile', `network.placeholders[${i}]${r?.name ? ` (${r.name})` : ''}: ${bad}`);
  });
  return out;
}

/**
 * What a run with network needs on the host before its launch: the egress preload (written just
 * before, removed once the sandbox mounted it) and, when it has placeholder secrets, its trust
 * store beside it (the host's roots and a CA of the run's own, for their hosts only) and what its
 * proxy substitutes. The CA's key stays in this process, and goes with the run.
 */
export function egressKit(network: NonNullable<ReturnType<typeof resolveNetwork>>): { preload: PreloadFile; substitution?: Substitution } {
  const rules = network.placeholders ?? [];
  if (rules.length === 0) return { preload: preloadFile(EGRESS_PORTS.http) };
  const ca = mintRunCa([...new Set(rules.flatMap((r) => r.hosts))]);
  return {
    preload: preloadFile(EGRESS_PORTS.http, { bundle: `${systemRoots()}\n${ca.certPem}`, own: ca.certPem }),
    substitution: { ca, rules, ...(network.upstreamCa ? { upstreamCa: network.upstreamCa } : {}) },
  };
}

/** The host's trusted roots (PEM), as its OpenSSL reads them, else Node's own. */
function systemRoots(): string {
  for (const file of ['/etc/ssl/certs/ca-certificates.crt', '/etc/pki/tls/certs/ca-bundle.crt']) {
    try {
      return readFileSync(file, 'utf8');
    } catch {
      // not this distribution's place
    }
  }
  return rootCertificates.join('\n');
}

/** Why a placeholder secret cannot be delivered as given, or undefined. */
function badPlaceholder(r: SecretRule): string | undefined {
  if (typeof r?.name !== 'string' || r.name === '') return 'name must be a non-empty string';
  if (typeof r.placeholder !== 'string' || r.placeholder.length < 16)
    return 'placeholder must be a string of at least 16 characters (unguessable: see newPlaceholder)';
  if (typeof r.value !== 'string' || r.value === '') return 'value must be a non-empty string';
  if (r.value.includes(r.placeholder) || r.placeholder.includes(r.value)) return 'placeholder and value must not contain each other';
  if (!Array.isArray(r.hosts) || r.hosts.length === 0 || !r.hosts.every((h) => typeof h === 'string' && h === h.toLowerCase() && h !== ''))
    return 'hosts must be a non-empty list of lower-case host names or IP addresses';
  if (
    !Array.isArray(r.headers) ||
    r.headers.length === 0 ||
    !r.headers.every((h) => typeof h === 'string' && /^[a-z0-9!#$%&'*+.^_`|~-]+$/.test(h))
  )
    return 'headers must be a non-empty list of lower-case header names';
  if (typeof r.format !== 'string' || r.format.split('{}').length !== 2 || /[\r\n]/.test(r.format))
    return 'format must hold "{}" exactly once (where the value goes: "Bearer {}"), on one line';
  return undefined;
}

/**
 * The profile a run with network really runs: the tool's command behind the relay (with the Node
 * binary this process runs on, mounted read-only when it lives outside /usr), the proxy
 * variables, and the preload (the host file `preload`).
 */
export function withEgress(profile: SandboxProfile, preload: PreloadFile): SandboxProfile {
  const cmd = profile.command;
  if (cmd.length === 0 || !(cmd[0] as string).startsWith('/')) {
    throw new SandboxError('invalid_profile', `command[0] must be an absolute path (got ${JSON.stringify(cmd[0])})`);
  }
  const node = realpathSync(process.execPath);
  return {
    ...profile,
    command: wrapCommand(node, cmd),
    env: egressEnv(profile.env ?? {}, profile.network?.grant ?? { loopback: 'deny' }, preload.caPath !== undefined),
    mounts: [
      // The relay's node before the profile's own mounts, so that one of those at its path wins.
      ...(node.startsWith('/usr/') ? [] : [{ source: node, mode: 'ro' as const }]),
      ...(profile.mounts ?? []),
      { source: preload.path, target: PRELOAD_PATH, mode: 'ro' },
      ...(preload.caPath && preload.runCaPath
        ? [
            { source: preload.caPath, target: CA_PATH, mode: 'ro' as const },
            { source: preload.runCaPath, target: RUN_CA_PATH, mode: 'ro' as const },
          ]
        : []),
    ],
  };
}

/** A host that can sandbox: what {@link assertHostReady} lets through. */
export type ReadyHost = HostInfo & Required<Pick<HostInfo, 'bwrap' | 'arch' | 'identity'>>;

/** Throws `sandbox_unavailable` with every problem and its fix, unless the host can sandbox. */
export function assertHostReady(host: HostInfo): asserts host is ReadyHost {
  if (host.ok && host.bwrap && host.arch && host.identity) return;
  const lines = host.problems.map((p) => `${p.message} — fix: ${p.fix}`);
  throw new SandboxError(
    'sandbox_unavailable',
    `this host cannot run sandboxes, so nothing was run: ${lines.join('; ') || 'probe failed'}`,
  );
}

/** Signal names by number, from the host's own table. */
export const SIGNALS = new Map(Object.entries(constants.signals).map(([name, n]) => [n as number, name]));
/** How often a run's cgroup is checked against its CPU budget and for OOM kills. */
export const WATCH_MS = 100;

/**
 * Watches the limits a sandbox's cgroup cannot stop by itself: the CPU budget (cgroups count CPU
 * time but never stop at a total) and an OOM kill of one process, which ends the whole sandbox.
 * Calls `kill` with the limit that was passed; undefined without a cgroup. Clear it at the end.
 */
export function watchCgroupLimits(
  cgroup: RunCgroup | undefined,
  cpuBudgetUsec: number,
  kill: (reason: NonNullable<ReturnType<typeof overRunLimit>>) => void,
): NodeJS.Timeout | undefined {
  if (!cgroup) return undefined;
  return setInterval(() => {
    const over = overRunLimit(cgroup, cpuBudgetUsec);
    if (over) kill(over);
  }, WATCH_MS);
}
export const OOM_RE = /MemoryError|out of memory|Cannot allocate memory|std::bad_alloc|allocation failed/i;

let cover: ProcCover | undefined;

/** What of this host's /proc a sandbox sees read-only or not at all (found once). */
export function procCover(): ProcCover {
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

let etcDirs: string[] | undefined;

/** How a sandbox sees this host's roots, /etc and /proc. */
export function hostLayout(host: HostInfo & { identity: SandboxIdentity }): HostLayout {
  etcDirs ??= ETC_DIRS.filter((d) => existsSync(d));
  return { roots: host.roots, etcDir: prepareEtc(host.identity), etcDirs, proc: procCover() };
}

let seccomp: Buffer | undefined;

/** The seccomp program of every sandbox (built once per process). */
export function sandboxSeccomp(arch: NonNullable<HostInfo['arch']>): Buffer {
  seccomp ??= buildSeccompFilter(arch);
  return seccomp;
}

/** What {@link planMounts} returns: the mounts as bwrap makes them, their descriptors, the shell steps that open them, what was staged. */
export interface MountPlan {
  mounts: Mount[];
  fds: { seccomp: number; binds: number[]; bindSources: (string | undefined)[]; mounts: (number | undefined)[] };
  opens: string[];
  staged: Staged;
}

/**
 * The mounts and binds of a sandbox as bwrap is to make them: when root is dropped, those whose
 * source the sandbox uid cannot reach are staged (see staging.ts). `dry` stages nothing (for
 * the key of sandboxes built ahead). fd 4 is the seccomp program, binds start at BIND_FD, then
 * one descriptor per per-run file, whose bytes bwrap copies in (so its host path never shows
 * inside). Throws `sandbox_unavailable` when staging fails.
 */
export function planMounts(ms: readonly Mount[], bs: readonly CheckedBind[], identity: SandboxIdentity, dry = false): MountPlan {
  const requests: StageRequest[] = [];
  const at: { mount?: number; bind?: number }[] = [];
  if (identity.drop.length > 0 && !dry) {
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
  let next = BIND_FD + bs.length;
  const mfds = mounted.map((m) => (m.perRun && m.mode === 'ro' ? next++ : undefined));
  return {
    mounts: mounted,
    fds: { seccomp: 4, binds: bs.map((_, i) => BIND_FD + i), bindSources, mounts: mfds },
    opens: mounted.flatMap((m, i) => (mfds[i] === undefined ? [] : [`exec ${mfds[i]}<${shellQuote(m.source)}`])),
    staged,
  };
}

let hardLimits: Map<string, number> | undefined;

/**
 * The launcher's rlimit steps (shell) for `limits`. Never asks for more than this process's own
 * hard limits: an unprivileged process cannot raise them (the launcher would fail), and the tool
 * gets no more than its parent has anyway. The process limit is not among them: it is set inside
 * the run's own user namespace ({@link runProcessLimit}, start.ts), where it counts the run's
 * tasks only. `events`: keep descriptor 3 (the events pipe).
 */
export function rlimitSteps(limits: Limits, o: { events: boolean }): string[] {
  hardLimits ??= readHardLimits();
  const cap = (name: string, v: number) => Math.min(v, hardLimits?.get(name) ?? v);
  const cpu = cap('Max cpu time', limits.cpuSeconds + 1);
  return [
    // Soft CPU limit first (SIGXCPU, reported as cpu), then the hard one a second later.
    `ulimit -S -t ${Math.min(limits.cpuSeconds, cpu)}`,
    `ulimit -H -t ${cpu}`,
    `ulimit -f ${Math.max(1, Math.floor(cap('Max file size', limits.fileSizeBytes) / 512))}`, // 512-byte blocks
    `ulimit -n ${cap('Max open files', limits.openFiles)}`,
    'ulimit -c 0',
    `ulimit -v ${Math.floor(cap('Max address space', limits.addressSpaceBytes) / 1024)}`, // KiB
    // A launcher (or sandbox) made ahead holds an events pipe whether or not this run wants one.
    ...(o.events ? [] : [`exec ${EVENTS_FD}>&-`]),
  ];
}

/** How a run's process limit holds on this host (from what `probe()` found). */
export type ProcessLimitBy = 'cgroup' | 'userns' | 'rlimit';

/** How a run's process limit holds on `host`: its pids cgroup, or RLIMIT_NPROC counted per namespace or per user. */
export function processLimitBy(host: HostInfo): ProcessLimitBy {
  return typeof host.processLimit === 'object' ? 'cgroup' : (host.processLimit ?? 'rlimit');
}

/**
 * The RLIMIT_NPROC a run's command starts with inside its sandbox (start.ts), or undefined when
 * its pids cgroup holds the limit. Where the kernel counts the limit per user namespace
 * (`userns`), it is the run's budget itself. Where it counts every task of the user (`rlimit`,
 * kernels before 5.14), a bare budget would refuse the run's first fork on any busy desktop, so
 * it is a backstop above the user's count now: never below what the user already runs.
 */
export function runProcessLimit(limits: Limits, mechanism: ProcessLimitBy): number | undefined {
  if (mechanism === 'cgroup') return undefined;
  hardLimits ??= readHardLimits();
  const hard = hardLimits.get('Max processes');
  const want = mechanism === 'userns' ? limits.processes : (userTasks()?.count ?? 0) + limits.processes;
  return hard === undefined ? want : Math.min(want, hard);
}

/** The egress side of a launched sandbox with network: its proxy, and whether the relay started. */
export interface Egress {
  proxy: EgressProxy;
  /** True once the relay handed over both listening sockets (and was told to start the tool). */
  started(): boolean;
}

/**
 * Starts the proxy of a sandbox with network and takes the relay's two listening sockets from the
 * launcher's IPC channel; once both are held here, the relay may let the tool start. `onStarted`
 * runs then (bwrap has mounted everything). Close the proxy when the sandbox is gone.
 */
export function startEgress(
  child: ChildProcess,
  network: NonNullable<ReturnType<typeof resolveNetwork>>,
  onStarted: () => void,
  substitution?: Substitution,
): Egress {
  const p = new EgressProxy({
    ...(substitution ? { substitution } : {}),
    grant: network.grant,
    ...(network.resolver ? { resolver: network.resolver } : {}),
    ...(network.onEvent ? { onEvent: network.onEvent } : {}),
    maxConnections: network.maxConnections,
    idleTimeoutMs: network.idleTimeoutMs,
    connectTimeoutMs: network.connectTimeoutMs,
    hostAddresses: hostAddresses(),
  });
  let relayed = 0;
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
      onStarted();
      child.send(READY);
    }
  });
  return { proxy: p, started: () => relayed >= 2 };
}

/** The last `bytes` of a stream's output, kept as it arrives at a bounded cost. */
export class Tail {
  #buf = Buffer.alloc(0);
  constructor(readonly bytes: number) {}
  push(chunk: Buffer): void {
    this.#buf = Buffer.concat([this.#buf, chunk]);
    if (this.#buf.length > this.bytes * 2) this.#buf = this.#buf.subarray(this.#buf.length - this.bytes);
  }
  text(): string {
    return this.#buf.subarray(Math.max(0, this.#buf.length - this.bytes)).toString('utf8');
  }
}

/**
 * How a sandbox ended, from bwrap's exit and what was seen: `ended` is the reason this process
 * killed it for (its result then says SIGKILL), else a run-wide limit its cgroup saw since the
 * last look, else SIGXCPU (cpu), SIGXFSZ (file_size) or an out-of-memory message (memory).
 */
export function endOf(e: {
  code: number | null;
  signal: string | null;
  ended: EndReason | undefined;
  cgroup: RunCgroup | undefined;
  cpuBudgetUsec: number;
  stderrTail: string;
}): { reason: EndReason; exitCode: number | null; signal: string | null } {
  // The monitor bwrap reports a tool killed by signal N as exit code 128 + N.
  let exitCode = e.code;
  let sig = e.signal;
  if (sig === null && exitCode !== null && exitCode > 128 && exitCode < 128 + 65) {
    sig = SIGNALS.get(exitCode - 128) ?? `signal ${exitCode - 128}`;
    exitCode = null;
  }
  let reason: EndReason = e.ended ?? (sig ? 'signal' : 'exit');
  // Over a run-wide limit since the last look (the tool may have ended by itself meanwhile).
  const over = e.cgroup && !e.ended ? overRunLimit(e.cgroup, e.cpuBudgetUsec) : undefined;
  if (over) reason = over;
  else if (!e.ended) {
    if (sig === 'SIGXCPU') reason = 'cpu';
    else if (sig === 'SIGXFSZ') reason = 'file_size';
    else if (exitCode !== 0 && OOM_RE.test(e.stderrTail)) reason = 'memory';
  }
  if (e.ended) {
    exitCode = null;
    sig = 'SIGKILL';
  }
  return { reason, exitCode, signal: sig };
}

/**
 * The profile's mounts as a run makes them: a per-run `ro` mount that is not a regular file of at
 * most 1 MiB is bound like any other (its bytes are not copied in); a per-run `rw` one must be an
 * empty directory (its content is copied there when the run ends). Throws `invalid_profile`.
 */
export function perRunMounts(mounts: readonly Mount[]): Mount[] {
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
