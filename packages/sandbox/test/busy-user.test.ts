/**
 * forge as most people run it: as themselves, beside hundreds of their own processes and threads
 * (RLIMIT_NPROC counts every task of a user, and a desktop's browser alone has hundreds). The load
 * here is 500 sleeping threads of the uid the sandboxes run as (this user; as root, the sandbox
 * uid), started by the test and gone with it. Runs must still start and fork, a fork bomb must
 * still be contained to its run, and a sandbox that cannot start must say why.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { scaled, waitFor } from '@forge/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HostInfo, probe, resolveRuntimes, runSandboxed, SandboxError, userTasks } from '../src/index.js';
import { launchFailure } from '../src/start.js';
import { isRoot, requireSandbox, tempDir } from './helpers.js';

let host: HostInfo;
let load: ChildProcess;
const THREADS = 500;
/** How often a state is looked at while waiting for it. */
const POLL_MS = 50;

/** Tasks of `uid` now (processes and threads). */
const tasksOf = (uid: number) => userTasks(uid)?.count ?? 0;

beforeAll(async () => {
  await requireSandbox();
  host = await probe();
  const uid = host.identity?.uid as number;
  const drop = isRoot ? ['setpriv', `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--'] : [];
  const py = `import threading, time, sys
for _ in range(${THREADS}): threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
print('up', flush=True); sys.stdin.read()`;
  const python = (await resolveRuntimes()).get('python3').interpreter;
  const argv = [...drop, python, '-I', '-c', py];
  load = spawn(argv[0] as string, argv.slice(1), {
    stdio: ['pipe', 'pipe', 'inherit'],
    cwd: '/',
  });
  // The load is up once it said so: its threads exist from then on.
  await new Promise<void>((resolve, reject) => {
    load.once('error', reject);
    load.once('exit', (c) => reject(new Error(`the load exited (${c}) before its threads were up`)));
    load.stdout?.once('data', () => resolve());
  });
  // Its threads, counted from its own entry (other runs of that uid come and go meanwhile).
  const threads = Number(/^Threads:\s+(\d+)/m.exec(readFileSync(`/proc/${load.pid}/status`, 'utf8'))?.[1]);
  expect(threads).toBeGreaterThan(THREADS);
  expect(tasksOf(uid)).toBeGreaterThan(THREADS);
}, scaled(60_000));

afterAll(() => {
  load?.stdin?.end(); // it exits at end of stdin
  load?.kill('SIGKILL');
});

describe(`beside ${THREADS} threads of the sandbox's own uid`, () => {
  it('a run starts, forks and execs, counted apart from the load', async () => {
    const py = (await resolveRuntimes()).get('python3');
    const r = await runSandboxed({
      command: [
        py.interpreter,
        '-I',
        '-c',
        "import subprocess, threading; t = threading.Thread(target=print); t.start(); t.join(); print(subprocess.run(['/bin/echo', 'forked'], capture_output=True, text=True).stdout, end='')",
      ],
      mounts: py.mounts.map((source) => ({ source, mode: 'ro' as const })),
    });
    expect(r.reason, r.stderrTail).toBe('exit');
    expect(r.exitCode, r.stderrTail).toBe(0);
    expect(r.stdout.toString()).toBe('\nforked\n');
    // The process limit holds for the run itself: a pids cgroup, or RLIMIT_NPROC in its own namespace.
    expect(r.enforced.pids).toBe(isRoot ? 'cgroup' : host.processLimit === 'userns' ? 'userns' : 'cgroup');
  });

  it('the run may have limits.processes tasks of its own, and no more', async () => {
    const r = await runSandboxed({
      command: ['/bin/sh', '-c', 'i=0; while [ $i -lt 40 ]; do /bin/sleep 5 & i=$((i+1)); done; ls /proc | grep -c "^[0-9]"'],
      limits: { processes: 8, timeoutMs: 20_000 },
    });
    // dash gives up at the fork the limit refuses; what was started is at most the limit.
    const seen = Number(r.stdout.toString().trim() || '0');
    expect(r.stderrTail).toMatch(/fork/i);
    if (r.stdout.length > 0) expect(seen).toBeLessThanOrEqual(8);
    // Well below the limit, a run is not refused for what the user runs elsewhere.
    const ok = await runSandboxed({
      command: ['/bin/sh', '-c', 'for i in 1 2 3 4; do /bin/true & done; wait; echo four'],
      limits: { processes: 8 },
    });
    expect(ok.stdout.toString(), ok.stderrTail).toBe('four\n');
  });

  it('a fork bomb is contained to its run: it ends, leaves nothing, and runs beside it are unaffected', async () => {
    const fn = `bomb_${process.pid}_${Math.random().toString(16).slice(2, 8)}`;
    const bomb = runSandboxed({
      command: ['/usr/bin/bash', '-c', `${fn}() { ${fn} | ${fn} & }; ${fn}; while :; do ${fn}; sleep 0.1; done`],
      limits: { processes: 32, timeoutMs: 3000 },
    });
    // Runs beside the bomb, while it runs.
    const beside = await Promise.all(
      [1, 2, 3].map((i) => runSandboxed({ command: ['/bin/sh', '-c', `/bin/echo beside-${i} & wait`], limits: { timeoutMs: 60_000 } })),
    );
    expect(beside.map((b) => `${b.stdout}`)).toEqual(['beside-1\n', 'beside-2\n', 'beside-3\n']);
    const r = await bomb;
    expect(['timeout', 'exit', 'signal']).toContain(r.reason);
    if (r.enforced.pids === 'cgroup') expect(r.processLimitHit).toBe(true);
    expect(await psGone(fn)).toEqual([]);
    // The host can still start processes.
    expect(execFileSync('/bin/echo', ['host-ok'], { encoding: 'utf8' })).toBe('host-ok\n');
  });
});

describe('a sandbox that cannot start is refused sandbox_unavailable, with its cause and fix', () => {
  it("the tool's command is not in the sandbox", async () => {
    const err = await runSandboxed({ command: ['/opt/forge-test-missing/python3', '-c', 'print(1)'] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe('sandbox_unavailable');
    expect((err as Error).message).toMatch(
      /^the tool's command cannot be run inside the sandbox: forge-sandbox: \/opt\/forge-test-missing\/python3 is not in the sandbox or not executable there; nothing was run — fix: the runtime must live under \/usr/,
    );
  });

  it('the kernel refuses the namespace (this uid at its process limit): named as such, never a tool failure', async () => {
    // bwrap behind a shell that sets RLIMIT_NPROC to 1 first: the uid the sandbox runs as already
    // has more tasks than that (the load), so creating the sandbox fails with EAGAIN, for real.
    // The probe's own trial goes through unlimited.
    const dir = await tempDir();
    chmodSync(dir, 0o755); // as root the wrapper runs as the sandbox uid, after setpriv
    const wrapper = join(dir, 'bwrap');
    writeFileSync(wrapper, `#!/bin/sh\ncase "$*" in *'test -d /proc/self'*) ;; *) ulimit -p 1 ;; esac\nexec ${host.bwrap?.path} "$@"\n`, {
      mode: 0o755,
    });
    const err = await runSandboxed({ command: ['/bin/echo', 'never'] }, { bwrapPath: wrapper }).catch((e: unknown) => e);
    expect((err as SandboxError).code, String(err)).toBe('sandbox_unavailable');
    expect((err as Error).message).toMatch(
      /^the sandbox could not be created: the kernel refused a new process or namespace for this user \(this user has \d+ processes and threads now; its limit is .*\): bwrap: .*Resource temporarily unavailable.*; nothing was run — fix: raise this user's process limit/s,
    );
  });

  it('each cause is named by its own rule (what bwrap, setpriv and the starting shell say)', () => {
    const ctx = { sysctl: () => undefined, tasks: () => ({ count: 612, limit: 64 }) };
    const cause = (text: string) => launchFailure(text, 'exited 1', ctx).cause;
    expect(cause('bwrap: Creating new namespace failed: Resource temporarily unavailable')).toBe('nproc');
    expect(launchFailure('bwrap: Creating new namespace failed: Resource temporarily unavailable', 'exited 1', ctx).message).toContain(
      'this user has 612 processes and threads now; its limit is 64',
    );
    expect(cause('bwrap: Creating new namespace failed: No space left on device')).toBe('userns_count');
    expect(cause('bwrap: Creating new namespace failed: nesting depth or /proc/sys/user/max_*_namespaces exceeded (ENOSPC)')).toBe(
      'userns_count',
    );
    expect(cause('bwrap: Creating new namespace failed: Operation not permitted')).toBe('userns');
    expect(cause('bwrap: setting up uid map: Permission denied')).toBe('userns');
    expect(cause("bwrap: Can't mount proc on /newroot/proc: Operation not permitted")).toBe('proc');
    expect(cause('setpriv: setresuid failed: Invalid argument')).toBe('setpriv');
    expect(cause('bwrap: execvp /usr/bin/python3: No such file or directory')).toBe('command');
    expect(cause('forge-sandbox: /opt/x is not in the sandbox or not executable there')).toBe('command');
    expect(cause('')).toBe('unknown');
    expect(launchFailure('', 'exited 1', ctx).message).toBe('the sandbox did not start (its launcher exited 1): no message');
  });
});

/** Waits (up to 20 s, scaled, for the kernel to reap them) until no host process mentions `needle`, failing with what is left; returns what is left. */
async function psGone(needle: string): Promise<string[]> {
  await waitFor(
    () => `no host process to mention ${needle} (left: ${psWith(needle).join('; ')})`,
    () => psWith(needle).length === 0,
    { timeoutMs: 20_000, intervalMs: POLL_MS },
  );
  return psWith(needle);
}

/** Host processes whose command line mentions `needle` (never `ps` itself). */
function psWith(needle: string): string[] {
  return execFileSync('ps', ['-eo', 'pid,args'], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.includes(needle) && !l.includes(' ps '));
}
