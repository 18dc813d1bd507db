import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { findRunCgroups, type PidsCgroups, type RunCgroups } from './cgroup.js';
import { hostRoots, type RootEntry } from './host-roots.js';
import { keepTrial, readTrial, trialKey } from './probe-cache.js';
import { SANDBOX_UID } from './profile.js';
import { hostSeccompArch, type SeccompArch } from './seccomp.js';
import { launchFailure } from './start.js';
import { which } from './which.js';

export type { RootEntry } from './host-roots.js';

const run = promisify(execFile);

/** Why the host cannot sandbox, with the exact fix. */
export interface HostProblem {
  code:
    | 'bwrap_missing'
    | 'bwrap_too_old'
    | 'userns_blocked'
    | 'proc_unmountable'
    | 'arch_unsupported'
    | 'pids_unlimited'
    | 'setpriv_missing'
    | 'sandbox_uid_invalid'
    | 'seccomp_unavailable'
    | 'sandbox_failed';
  /** What is wrong, in one sentence. */
  message: string;
  /** What to run or change to fix it. */
  fix: string;
}

/** What `probe()` found. `ok` is false when any problem was found: then nothing may run. */
export interface HostInfo {
  ok: boolean;
  problems: HostProblem[];
  bwrap?: { path: string; version: string };
  /** The seccomp table for this CPU, when there is one. */
  arch?: SeccompArch;
  /** Top-level directories besides /usr that programs need (merged-/usr symlinks or real dirs). */
  roots: RootEntry[];
  /**
   * How the process limit holds: a pids cgroup per run (`{cgroup}`, as root, or in a delegated
   * cgroup v2 subtree); else RLIMIT_NPROC set inside the run's own user namespace, which this
   * kernel counts per namespace (`userns`: the run's tasks only; found by a trial run); else
   * RLIMIT_NPROC counted per user (`rlimit`, kernels before 5.14), set as a backstop above the
   * user's task count.
   */
  processLimit?: 'userns' | 'rlimit' | { cgroup: PidsCgroups };
  /**
   * Where each run gets cgroups of its own (run-wide memory, CPU and process limits); undefined
   * when this process cannot make them, and then {@link cgroupsUnavailable} says why.
   */
  cgroups?: RunCgroups;
  cgroupsUnavailable?: string;
  /** The host uid and gid the sandbox's processes run as (never 0), and how forge gets there. */
  identity?: SandboxIdentity;
}

/**
 * Who a sandbox runs as on the host. Inside it is always uid and gid {@link SANDBOX_UID}; outside
 * it is the caller's own uid, except when the caller is root: then the launcher drops to
 * {@link ROOT_SANDBOX_UID} (or `FORGE_SANDBOX_UID`) with `setpriv` before bwrap starts, so that no
 * uid of the sandbox maps to host root.
 */
export interface SandboxIdentity {
  uid: number;
  gid: number;
  /** `setpriv` and its arguments, put before bwrap when the caller is root; empty otherwise. */
  drop: readonly string[];
}

/**
 * The host uid (and gid) sandboxes run as when the caller is root: 2000000000, outside the ranges
 * Debian and useradd hand out (system and user accounts, subordinate ids up to 600100000) and
 * those systemd allocates (dynamic users, container ranges up to 1879048191, the foreign range from
 * 2147352576). It owns no file on the host. `FORGE_SANDBOX_UID` picks another.
 */
export const ROOT_SANDBOX_UID = 2_000_000_000;

export interface ProbeOptions {
  /** bwrap to use (default: `bwrap` on PATH). */
  bwrapPath?: string;
  /** Probe again instead of returning the result cached for this process. */
  refresh?: boolean;
  /**
   * A file to keep what the trial sandbox found in, for the next process (probe-cache.ts): used
   * while nothing it depends on has changed, so a one-shot command starts no trial sandbox.
   */
  cacheFile?: string;
}

/** What the trial sandbox prints when RLIMIT_NPROC counts per user namespace. */
const PER_RUN = 'nproc-per-run';
const MIN_BWRAP = [0, 8, 0] as const; // --disable-userns, --bind-fd with O_PATH
const cache = new Map<string, Promise<HostInfo>>();

/**
 * Checks that this host can run sandboxes: bwrap present and at least 0.8, a
 * supported CPU for the seccomp filter, and a real trial sandbox with the flags every run uses
 * (user, pid, network namespaces; a fresh /proc). Each failure is classified with its fix. The
 * result is cached per process (per bwrap path); pass `refresh` to probe again.
 */
export function probe(options: ProbeOptions = {}): Promise<HostInfo> {
  const key = options.bwrapPath ?? '';
  let p = cache.get(key);
  if (!p || options.refresh) {
    p = probeNow(options.bwrapPath, options.cacheFile);
    cache.set(key, p);
  }
  return p;
}

async function probeNow(bwrapPath: string | undefined, cacheFile: string | undefined): Promise<HostInfo> {
  const problems: HostProblem[] = [];
  const info: HostInfo = { ok: false, problems, roots: await hostRoots() };

  const arch = hostSeccompArch();
  if (arch) info.arch = arch;
  else {
    problems.push({
      code: 'arch_unsupported',
      message: `no seccomp table for this CPU (${process.arch}): only x86_64 and aarch64 are supported`,
      fix: 'run forge on an x86_64 or aarch64 Linux host',
    });
  }

  const seccomp = seccompProblem(readStatus());
  if (seccomp) problems.push(seccomp);

  const root = process.getuid?.() === 0;
  const identity = sandboxIdentity(root, problems);
  if (identity) info.identity = identity;
  const found = findRunCgroups();
  if (found.ok) info.cgroups = found.cgroups;
  else info.cgroupsUnavailable = found.why;
  if (root) {
    const cg = found.ok && found.cgroups.pids ? found.cgroups : undefined;
    if (cg) info.processLimit = { cgroup: cg };
    else {
      problems.push({
        code: 'pids_unlimited',
        message:
          'running as root, where the kernel ignores RLIMIT_NPROC, and no writable pids cgroup was found: a fork bomb could not be contained',
        fix: 'run as a non-root user, or give this process a writable pids cgroup (a read-write /sys/fs/cgroup; in a container: --cgroupns=private)',
      });
    }
  } else if (found.ok && found.cgroups.pids) {
    info.processLimit = { cgroup: found.cgroups };
  }

  const bwrap = bwrapPath ?? which('bwrap', ['/usr/bin', '/bin']);
  if (!bwrap || !existsSync(bwrap)) {
    const what = bwrap ? `${bwrap} does not exist` : 'bubblewrap (bwrap) is not installed';
    problems.push({ code: 'bwrap_missing', message: what, fix: 'apt-get install -y bubblewrap' });
    return info;
  }
  // A trial run with the namespaces and mounts every sandbox uses, as the uid every sandbox runs
  // as: it must not be host root, whatever the user namespace says inside.
  const args = ['--unshare-all', '--unshare-user', '--disable-userns', '--die-with-parent', '--new-session', '--cap-drop', 'ALL'];
  args.push('--uid', String(SANDBOX_UID), '--gid', String(SANDBOX_UID), '--ro-bind', '/usr', '/usr');
  for (const r of info.roots) args.push(...(r.symlink ? ['--symlink', r.symlink, r.path] : ['--ro-bind', r.path, r.path]));
  // Then whether RLIMIT_NPROC counts per namespace: with it at 4 inside, a subshell (bwrap's init,
  // the shell, the subshell, its child) may fork only when the user's other tasks (this process's
  // threads alone are more than 4) do not count.
  const trial = `test -d /proc/self && echo "$(id -u) $(id -g)" && { (ulimit -p 4 && /bin/true && echo ${PER_RUN}) 2>/dev/null; true; }`;
  args.push('--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp', '--', '/bin/sh', '-c', trial);
  const key = cacheFile && identity ? trialKey({ bwrap, drop: identity.drop, identity, roots: info.roots, trial: args }) : undefined;
  const kept = cacheFile && key ? readTrial(cacheFile, key) : undefined;

  let version = kept?.version;
  if (version === undefined) {
    try {
      const { stdout } = await run(bwrap, ['--version'], { timeout: 5_000 });
      version = /(\d+\.\d+\.\d+)/.exec(stdout)?.[1] ?? '0.0.0';
    } catch (err) {
      problems.push({
        code: 'bwrap_missing',
        message: `${bwrap} does not run: ${(err as Error).message}`,
        fix: 'apt-get install --reinstall -y bubblewrap',
      });
      return info;
    }
  }
  info.bwrap = { path: bwrap, version };
  if (compareVersions(version, MIN_BWRAP) < 0) {
    problems.push({
      code: 'bwrap_too_old',
      message: `bwrap ${version} is too old: ${MIN_BWRAP.join('.')} or newer is needed (--disable-userns, --bind-fd)`,
      fix: 'install bubblewrap 0.8 or newer (Debian 12 and Ubuntu 24.04 ship it: apt-get install -y bubblewrap)',
    });
    return info;
  }

  if (!identity) return info;
  let perRun: boolean;
  if (kept) perRun = kept.perRun;
  else {
    const [cmd, ...rest] = [...identity.drop, bwrap, ...args] as [string, ...string[]];
    try {
      const { stdout } = await run(cmd, rest, { timeout: 10_000 });
      const [ids = '', said] = stdout.trim().split('\n');
      perRun = said === PER_RUN;
      if (ids !== `${SANDBOX_UID} ${SANDBOX_UID}`) {
        problems.push({
          code: 'sandbox_failed',
          message: `a trial sandbox ran as "${ids}" inside instead of ${SANDBOX_UID}`,
          fix: 'check that bwrap is the distribution package (not setuid): apt-get install --reinstall -y bubblewrap',
        });
      } else if (cacheFile && key && problems.length === 0) keepTrial(cacheFile, key, { version, perRun });
    } catch (err) {
      problems.push(classifyFailure(String((err as { stderr?: string }).stderr ?? (err as Error).message)));
      perRun = false;
    }
  }
  if (!root && !info.processLimit) info.processLimit = perRun ? 'userns' : 'rlimit';
  info.ok = problems.length === 0;
  return info;
}

/**
 * The host identity of every sandbox, or undefined (with the problem recorded) when it cannot be
 * one that is not root: fail closed, since a sandbox uid mapped to host root can write what root can.
 */
function sandboxIdentity(root: boolean, problems: HostProblem[]): SandboxIdentity | undefined {
  if (!root) {
    const uid = process.getuid?.() ?? -1;
    const gid = process.getgid?.() ?? -1;
    return { uid, gid, drop: [] };
  }
  const asked = process.env.FORGE_SANDBOX_UID;
  const uid = asked === undefined || asked === '' ? ROOT_SANDBOX_UID : Number(asked);
  if (!Number.isSafeInteger(uid) || uid <= 0 || uid >= 4294967295 || uid === 65535) {
    problems.push({
      code: 'sandbox_uid_invalid',
      message: `FORGE_SANDBOX_UID=${JSON.stringify(asked)} is not a usable uid: running as root, sandboxes need an unprivileged host uid (1 to 4294967294, not 65535)`,
      fix: `unset FORGE_SANDBOX_UID (the default is ${ROOT_SANDBOX_UID}) or set it to an unused uid such as ${ROOT_SANDBOX_UID}`,
    });
    return undefined;
  }
  const setpriv = which('setpriv', ['/usr/bin', '/bin', '/usr/sbin', '/sbin']);
  if (!setpriv) {
    problems.push({
      code: 'setpriv_missing',
      message:
        'running as root, sandboxes must drop to an unprivileged uid before bwrap starts, and setpriv (util-linux) is not installed: a sandbox would run as host root',
      fix: 'apt-get install -y util-linux (or run forge as an ordinary user)',
    });
    return undefined;
  }
  return { uid, gid: uid, drop: [setpriv, `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--'] };
}

function readStatus(): string {
  try {
    return readFileSync('/proc/self/status', 'utf8');
  } catch {
    return '';
  }
}

/**
 * Whether the kernel can load the seccomp filter every sandbox gets, from `/proc/self/status`
 * (its `Seccomp:` line exists only in kernels built with seccomp): the problem when it cannot.
 */
export function seccompProblem(status: string): HostProblem | undefined {
  if (/^Seccomp:\s*\d/m.test(status)) return undefined;
  return {
    code: 'seccomp_unavailable',
    message: 'this kernel has no seccomp (no Seccomp line in /proc/self/status): the syscall filter every sandbox gets cannot be loaded',
    fix: 'run forge on a kernel built with CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER (every mainstream distribution kernel is)',
  };
}

/** Turns bwrap's complaint about the trial run into a problem with its fix (the rules of launchFailure). */
function classifyFailure(stderr: string): HostProblem {
  const f = launchFailure(stderr, 'failed');
  const code: HostProblem['code'] =
    f.cause === 'proc' ? 'proc_unmountable' : f.cause === 'userns' || f.cause === 'userns_count' ? 'userns_blocked' : 'sandbox_failed';
  return { code, message: code === 'sandbox_failed' ? `a trial sandbox failed: ${f.message}` : f.message, fix: f.fix };
}

function compareVersions(v: string, min: readonly number[]): number {
  const parts = v.split('.').map(Number);
  for (let i = 0; i < min.length; i++) {
    const d = (parts[i] ?? 0) - (min[i] as number);
    if (d !== 0) return d;
  }
  return 0;
}
