import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';

/**
 * How a run's own command starts inside its sandbox, and how the host tells a sandbox that
 * never started from a tool that failed.
 *
 * The process limit. RLIMIT_NPROC is checked against a count of tasks, and since Linux 5.14 the
 * kernel keeps that count per user namespace (the ucounts of the namespace and uid), checking
 * every level up to the host's against the limit its creator had. A limit set inside the run's
 * own user namespace therefore counts only the run's tasks (processes and threads), while the
 * user's other processes (a desktop's hundreds of browser threads) count only at the host level,
 * against the limit bwrap started with. Set outside, before bwrap, a small limit would instead
 * compare the user's whole count with it, and the namespace could not even be created. So the
 * limit is set here, by the shell that execs the tool, after bwrap has built everything.
 *
 * The start marker. That shell writes {@link STARTED} to stderr just before it execs the tool:
 * what came before it is bwrap's, setpriv's or the launcher's, never the tool's, and a run whose
 * stderr never carried it did not start (its text says why: {@link launchFailure}). The tool runs
 * only after the marker, so nothing it writes can make a run look unstarted.
 */

/** Written to stderr by the starting shell just before the tool's exec, then cut from the tail. */
export const STARTED = '\u001eforge-sandbox: started\n';
const STARTED_BYTES = Buffer.from(STARTED);
/** The most of stderr kept before the marker (bwrap's warnings and errors are short). */
const BEFORE_BYTES = 8 << 10;

/**
 * The shell steps that start a run's command: a command that cannot be run inside is a launch
 * failure (said before the marker); `processes`, when given, becomes the run's RLIMIT_NPROC in its
 * own namespace (soft and hard: the tool cannot raise it). `cmd0` is the command, as shell text.
 */
export function startSteps(cmd0: string, processes: number | undefined): string[] {
  return [runnable(cmd0), ...(processes === undefined ? [] : [`ulimit -p ${processes}`]), MARK];
}

/** The step that refuses a command that cannot be run inside (`cmd0`: the command, as shell text). */
function runnable(cmd0: string): string {
  return `{ [ -x ${cmd0} ] || { printf 'forge-sandbox: %s is not in the sandbox or not executable there\\n' ${cmd0} >&2; exit 127; }; }`;
}

/** The step that refuses a script the waiting shell cannot read (`script`: its path, as shell text). */
function readable(script: string): string {
  return `{ [ -r ${script} ] || { printf 'forge-sandbox: %s is not in the sandbox or not readable there\\n' ${script} >&2; exit 127; }; }`;
}

const MARK = `printf '${STARTED.replace('\u001e', '\\036').replace('\n', '\\n')}' >&2`;

/**
 * The {@link startSteps} as shell functions (`forge_runnable CMD`, `forge_readable SCRIPT`,
 * `forge_started`), defined once by a sandbox built ahead, so that the line it reads for its run
 * (a byte at a time: the shell reads a socket no faster) names them instead of spelling them out.
 */
export const START_FUNCTIONS = `forge_runnable() ${runnable('"$1"')}; forge_readable() ${readable('"$1"')}; forge_started() { ${MARK}; }`;

/**
 * The {@link startSteps} in a sandbox that defined {@link START_FUNCTIONS}; `script`: the run is a
 * script its waiting shell reads itself, which must be readable rather than `cmd0` executable.
 */
export function startCalls(cmd0: string, processes: number | undefined, script?: string): string[] {
  return [
    script === undefined ? `forge_runnable ${cmd0}` : `forge_readable ${script}`,
    ...(processes === undefined ? [] : [`ulimit -p ${processes}`]),
    'forge_started',
  ];
}

/** `command` behind a shell that takes the {@link startSteps} and then becomes it (one exec more). */
export function startCommand(command: readonly string[], processes: number | undefined): string[] {
  return ['/bin/sh', '-c', `${startSteps('"$1"', processes).join(' && ')} && exec "$@"`, 'sandbox', ...command];
}

/**
 * Reads a run's stderr up to the marker: {@link push} returns what belongs to the tail (the
 * marker cut out; up to its length less one byte held back until it is known not to be the
 * marker, {@link flush} gives those at the end), {@link started} says whether the tool started,
 * {@link before} holds what came before it (at most 8 KiB).
 */
export class StartWatch {
  #started = false;
  #pending = Buffer.alloc(0);
  #before: Buffer[] = [];
  #beforeBytes = 0;

  get started(): boolean {
    return this.#started;
  }

  /** What was written before the marker (all of stderr, when the tool never started), as UTF-8. */
  get before(): string {
    return Buffer.concat([...this.#before, ...(this.#started ? [] : [this.#pending])]).toString('utf8');
  }

  push(chunk: Buffer): Buffer {
    if (this.#started) return chunk;
    const all = Buffer.concat([this.#pending, chunk]);
    const at = all.indexOf(STARTED_BYTES);
    if (at >= 0) {
      this.#started = true;
      this.#keep(all.subarray(0, at));
      this.#pending = Buffer.alloc(0);
      return Buffer.concat([all.subarray(0, at), all.subarray(at + STARTED_BYTES.length)]);
    }
    // Hold back what could still be the marker's beginning; what is before that is the launch's text.
    const keep = Math.min(all.length, STARTED_BYTES.length - 1);
    const done = all.subarray(0, all.length - keep);
    this.#keep(done);
    this.#pending = all.subarray(all.length - keep);
    return done;
  }

  /** At the end of the stream: what was held back as a possible beginning of the mark. */
  flush(): Buffer {
    const rest = this.#pending;
    this.#pending = Buffer.alloc(0);
    if (!this.#started) this.#keep(rest);
    return rest;
  }

  #keep(bytes: Buffer): void {
    const room = BEFORE_BYTES - this.#beforeBytes;
    if (room <= 0 || bytes.length === 0) return;
    const kept = Buffer.from(bytes.subarray(0, room)); // a copy: the chunk's memory is not held
    this.#before.push(kept);
    this.#beforeBytes += kept.length;
  }
}

/** Why a sandbox did not start, and what fixes it. */
export interface LaunchFailure {
  /** A stable name for the cause (`nproc`, `userns`, `userns_count`, `proc`, `setpriv`, `command`, `unknown`). */
  cause: 'nproc' | 'userns' | 'userns_count' | 'proc' | 'setpriv' | 'command' | 'unknown';
  /** What happened, in one sentence, with what the launch said. */
  message: string;
  /** What to run or change. */
  fix: string;
}

/** What the host's files say, for the fixes (a test passes its own). */
export interface LaunchContext {
  /** Reads a sysctl file; undefined when it does not exist. */
  sysctl?: (path: string) => string | undefined;
  /** This user's tasks (processes and threads) now, and its RLIMIT_NPROC soft limit. */
  tasks?: () => { count: number; limit: number | undefined } | undefined;
}

interface Rule {
  cause: LaunchFailure['cause'];
  test: RegExp;
  explain: (text: string, ctx: Required<LaunchContext>) => { message: string; fix: string };
}

const readSysctl = (path: string): string | undefined => {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return undefined;
  }
};

/** Why user namespaces are refused on this host, as a fix. */
export function usernsFix(
  sysctl: (path: string) => string | undefined = readSysctl,
  container: string | undefined = inContainer(),
): string {
  if (sysctl('/proc/sys/kernel/apparmor_restrict_unprivileged_userns') === '1') {
    return 'AppArmor blocks user namespaces: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or install an AppArmor profile that allows userns for /usr/bin/bwrap)';
  }
  if (sysctl('/proc/sys/kernel/unprivileged_userns_clone') === '0') return 'sysctl -w kernel.unprivileged_userns_clone=1';
  if (sysctl('/proc/sys/user/max_user_namespaces') === '0') return 'sysctl -w user.max_user_namespaces=15000';
  if (container)
    return `this runs in a container (${container}) whose seccomp profile or runtime blocks user namespaces: run it with a profile that allows them (docker: --security-opt seccomp=unconfined; podman: --security-opt seccomp=unconfined, or --userns=auto), or run forge on the host`;
  return 'the kernel refuses this user new user namespaces: check kernel.unprivileged_userns_clone, user.max_user_namespaces and kernel.apparmor_restrict_unprivileged_userns (sysctl -a | grep -E "userns|user_namespaces"), or a seccomp filter this process runs under (grep Seccomp /proc/self/status)';
}

/**
 * What says this process runs in a container (`/.dockerenv`, `/run/.containerenv`, the
 * `container` variable systemd-nspawn and podman set, a container runtime in its cgroup), or
 * undefined on a host as far as can be told.
 */
export function inContainer(): string | undefined {
  if (existsSync('/.dockerenv')) return 'docker: /.dockerenv';
  if (existsSync('/run/.containerenv')) return 'podman: /run/.containerenv';
  const env = process.env.container;
  if (env) return `container=${env}`;
  try {
    const cg = readFileSync('/proc/1/cgroup', 'utf8');
    const m = /\b(docker|containerd|kubepods|libpod|lxc)\b/.exec(cg);
    if (m) return `${m[1]} in /proc/1/cgroup`;
  } catch {
    // not readable: no more to tell
  }
  return undefined;
}

/**
 * The causes of a launch that failed, most specific first: each a pattern of what bwrap, setpriv
 * or the starting shell says, and the sentence and fix for it.
 */
const RULES: readonly Rule[] = [
  {
    cause: 'nproc',
    test: /Resource temporarily unavailable|Cannot fork|fork: retry|EAGAIN/i,
    explain: (text, ctx) => {
      const t = ctx.tasks();
      const now = t ? ` (this user has ${t.count} processes and threads now; its limit is ${t.limit ?? 'unlimited'})` : '';
      return {
        message: `the sandbox could not be created: the kernel refused a new process or namespace for this user${now}: ${text}`,
        fix: "raise this user's process limit (ulimit -u, or nproc in /etc/security/limits.conf, or TasksMax of the user's systemd slice) or end some of its processes; forge doctor shows the count",
      };
    },
  },
  {
    cause: 'userns_count',
    // bwrap 0.8 says "nesting depth or /proc/sys/user/max_*_namespaces exceeded (ENOSPC)".
    test: /No space left on device|ENOSPC|max_\*?_?namespaces exceeded|nesting depth/i,
    explain: (text, ctx) => {
      const here = ctx.sysctl('/proc/sys/user/max_user_namespaces');
      return {
        message: `the sandbox's user namespace could not be created: the limit of user namespaces is reached (or set to 0) here or in a namespace enclosing this process${here === undefined ? '' : ` (user.max_user_namespaces reads ${here} here)`}: ${text}`,
        fix: 'raise it where it is set: sysctl -w user.max_user_namespaces=15000 on the host (in a container or a user namespace, by whoever set it there), or end the programs holding namespaces',
      };
    },
  },
  {
    cause: 'proc',
    test: /(?=.*proc)(?=.*mount)/is,
    explain: (text) => ({
      message: `a fresh /proc cannot be mounted in the sandbox: the host or container masks /proc: ${text}`,
      fix: 'in a container, run it with an unmasked /proc (podman: --security-opt unmask=/proc/*; docker: --security-opt systempaths=unconfined)',
    }),
  },
  {
    cause: 'setpriv',
    test: /^setpriv:/m,
    explain: (text) => ({
      message: `the launcher could not drop to the sandbox's uid with setpriv: ${text}`,
      fix: 'check FORGE_SANDBOX_UID (unset it for the default) and that setpriv (util-linux) is installed: apt-get install -y util-linux',
    }),
  },
  {
    cause: 'command',
    test: /^forge-sandbox: .* is not in the sandbox|execvp/m,
    explain: (text) => ({
      message: `the tool's command cannot be run inside the sandbox: ${text}`,
      fix: 'the runtime must live under /usr (or a directory the sandbox mounts); check it with forge doctor, and reinstall the runtime if its file is gone',
    }),
  },
  {
    cause: 'userns',
    test: /namespace|uid map|setting up uid|clone|unshare|Operation not permitted|Permission denied/i,
    explain: (text, ctx) => ({ message: `bwrap cannot create the sandbox's namespaces: ${text}`, fix: usernsFix(ctx.sysctl) }),
  },
];

/**
 * Why a sandbox did not start, from what was written before its command would have started (see
 * {@link StartWatch.before}) and how the launcher ended. A pure function of its inputs and `ctx`.
 */
export function launchFailure(text: string, exit: string, ctx: LaunchContext = {}): LaunchFailure {
  // What bwrap says can quote paths an agent chose (a bind's): inert before it reaches a screen.
  const said = inert(text.replaceAll(STARTED, '').trim());
  const full: Required<LaunchContext> = { sysctl: ctx.sysctl ?? readSysctl, tasks: ctx.tasks ?? (() => userTasks()) };
  const rule = RULES.find((r) => r.test.test(said));
  if (rule) return { cause: rule.cause, ...rule.explain(said, full) };
  return {
    cause: 'unknown',
    message: `the sandbox did not start (its launcher ${exit}): ${said || 'no message'}`,
    fix: 'forge doctor runs a trial sandbox and names the cause; bwrap --unshare-all --ro-bind /usr /usr --proc /proc --dev /dev -- /usr/bin/true shows it by hand',
  };
}

/** Control, bidi and other invisible formatting characters (all but newline and tab), escaped as `\uXXXX`. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching them is the point
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/g;

/** `text` with every character that could act on a terminal or reorder a line escaped. */
function inert(text: string): string {
  return text.replace(UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * The tasks (processes and threads) of this process's real user now, and its RLIMIT_NPROC soft
 * limit (undefined: unlimited), read from /proc. What the kernel compares with that limit, at the
 * host's level, whenever this user creates a task.
 */
export function userTasks(uid = process.getuid?.() ?? 0): { count: number; limit: number | undefined } | undefined {
  let names: string[];
  try {
    names = readdirSync('/proc');
  } catch {
    return undefined;
  }
  let count = 0;
  for (const name of names) {
    if (name.charCodeAt(0) < 48 || name.charCodeAt(0) > 57) continue;
    try {
      if (statSync(`/proc/${name}`).uid !== uid) continue;
      const threads = /^Threads:\s+(\d+)/m.exec(readFileSync(`/proc/${name}/status`, 'utf8'));
      count += threads ? Number(threads[1]) : 1;
    } catch {
      // gone meanwhile
    }
  }
  return { count, limit: softProcessLimit() };
}

/** This process's soft RLIMIT_NPROC, or undefined when unlimited. */
function softProcessLimit(): number | undefined {
  const line = /^Max processes\s+(\S+)/m.exec(readSysctl('/proc/self/limits') ?? '');
  return line && /^\d+$/.test(line[1] as string) ? Number(line[1]) : undefined;
}
