/**
 * Escape tests: each one tries something a hostile tool would try, and FAILS if it works. They
 * run three times (escape.test.ts, escape-prebuilt.test.ts, escape-warm.test.ts): in sandboxes
 * built for their run, in sandboxes built ahead of time, where every run that can take one
 * must, and with warm interpreters, where every Python run (its code then a per-run script, as
 * forge runs tools) must take a sandbox whose interpreter was already running.
 *
 * Conventions: a script prints `ESCAPE:<what>` only when the forbidden thing worked, and the test
 * asserts no such marker is in stdout; where a failure could also come from a broken test (python
 * missing, a typo), the script prints `CONTROL:<what>` on a positive control that must be there.
 * Secrets are never printed: a script tests existence or readability, it does not `cat` a
 * credential to stdout. Everything on the host the tests start is stopped in onTestFinished.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createConnection, createServer, type Server } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { join, relative, sep } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { scaled, waitFor } from '@forge/test-utils';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import {
  type CheckedBind,
  checkBind,
  closeBinds,
  discardPrebuilt,
  type Mount,
  probe,
  type RunOptions,
  type RunResult,
  runSandboxed,
  type SandboxProfile,
  sandboxesGone,
} from '../src/index.js';
import { builtSoon, descendants, nodeRuntime, pythonRuntime, requireSandbox, runInChild, tempDir } from './helpers.js';

let python: { interpreter: string; mounts: Mount[] };
let node: { interpreter: string; mounts: Mount[]; env: Record<string, string> };

beforeAll(async () => {
  await requireSandbox();
  python = await pythonRuntime();
  node = await nodeRuntime();
});

const rand = () => randomBytes(6).toString('hex');

let mode: 'fresh' | 'prebuilt' | 'warm' = 'fresh';
let stageDir: string | undefined;

/**
 * runSandboxed, the way this file's mode runs it. Built ahead: a first run of the same shape (the
 * profile with `/bin/true` as its command) has the sandbox built, and a run that can take it
 * must have taken it.
 */
async function run(profile: SandboxProfile, options: RunOptions = {}): Promise<RunResult> {
  if (mode === 'fresh') return runSandboxed(profile, options);
  // Warm mode: a run that is not Python's is served by a sandbox built ahead, as before.
  stageDir ??= mkdtempSync(join(tmpdir(), 'forge-escape-stage-'));
  const o: RunOptions = { ...options, prebuild: { stageDir } };
  const fits = !profile.binds?.length && profile.network === undefined;
  if (fits) {
    const { stdin: _, ...rest } = o;
    await runSandboxed({ ...profile, command: ['/bin/true'] }, rest).catch(() => {});
    await builtSoon();
  }
  const r = await runSandboxed(profile, o);
  if (fits) expect(r.prebuilt, 'this run fits a sandbox built ahead, so it must have taken one').toBe(true);
  return r;
}

/** `/bin/sh -c script` in the sandbox; `args` become $0, $1, … */
function sh(script: string, profile: Partial<SandboxProfile> = {}, options?: RunOptions, args: string[] = []): Promise<RunResult> {
  return run({ ...profile, command: ['/bin/sh', '-c', script, ...args] }, options);
}

/** `python3 -c code` in the sandbox (with the interpreter's own mounts); `args` land in sys.argv[1:]. */
function py(code: string, profile: Partial<SandboxProfile> = {}, options?: RunOptions, args: string[] = []): Promise<RunResult> {
  if (mode === 'warm') return warmScript('python', code, profile, options, args);
  return run(
    { ...profile, command: [python.interpreter, '-I', '-c', code, ...args], mounts: [...python.mounts, ...(profile.mounts ?? [])] },
    options,
  );
}

/**
 * `node -e code` in the sandbox, with node's mounts and environment; `args` land in
 * process.argv after the script (read them from the end: a warm run's argv also names its script).
 */
function js(code: string, profile: Partial<SandboxProfile> = {}, options?: RunOptions, args: string[] = []): Promise<RunResult> {
  const withNode = { ...profile, env: { ...node.env, ...profile.env } };
  if (mode === 'warm') return warmScript('node', code, withNode, options, args);
  return run(
    { ...withNode, command: [node.interpreter, '-e', code, ...args], mounts: [...node.mounts, ...(profile.mounts ?? [])] },
    options,
  );
}

/**
 * `py` or `js` with a warm interpreter: the code becomes the per-run script /forge/tool/main.py
 * (main.js); a first run of the same shape, whose script does nothing, has the warm sandbox
 * built, and the run must take it.
 */
async function warmScript(
  lang: 'python' | 'node',
  code: string,
  profile: Partial<SandboxProfile>,
  options: RunOptions = {},
  args: string[] = [],
): Promise<RunResult> {
  stageDir ??= mkdtempSync(join(tmpdir(), 'forge-escape-stage-'));
  const dir = mkdtempSync(join(stageDir, 'code-'));
  const [rt, target, command, idle] =
    lang === 'python'
      ? [python, '/forge/tool/main.py', [python.interpreter, '-I', '/forge/tool/main.py'], 'pass']
      : [node, '/forge/tool/main.js', [node.interpreter, '/forge/tool/main.js'], ''];
  const script = (name: string, text: string): SandboxProfile => {
    writeFileSync(join(dir, name), text);
    return {
      ...profile,
      command: [...command, ...args],
      mounts: [...rt.mounts, ...(profile.mounts ?? []), { source: join(dir, name), target, mode: 'ro', perRun: true }],
    };
  };
  // The interpreter starts with its runtime's variables (node's NODE_OPTIONS), as the runner's do.
  const o: RunOptions = { ...options, prebuild: { stageDir, warm: lang === 'node' ? { env: node.env } : {} } };
  const fits = !profile.binds?.length && profile.network === undefined;
  if (fits) {
    const { stdin: _, events, ...rest } = o;
    await runSandboxed(script('warm-up', idle), { ...rest, ...(events ? { events: () => {} } : {}) }).catch(() => {});
    await builtSoon();
  }
  const r = await runSandboxed(script('main', code), o);
  if (fits) expect(r.warmup, 'this run fits a warm sandbox, so it must have taken one').toBeDefined();
  return r;
}

/** Stdout and stderr, for failure messages. */
function describeRun(r: RunResult): string {
  return `reason=${r.reason} exit=${r.exitCode} signal=${r.signal}\n--- stdout ---\n${r.stdout.toString().slice(0, 4000)}\n--- stderr ---\n${r.stderrTail.slice(-4000)}`;
}

/** No `ESCAPE:` marker in stdout: nothing forbidden worked. */
function expectNoEscape(r: RunResult): void {
  const escapes = r.stdout
    .toString()
    .split('\n')
    .filter((l) => l.includes('ESCAPE:'));
  expect(escapes, describeRun(r)).toEqual([]);
}

/** Every positive control printed (so the run did reach the attempts). */
function expectControls(r: RunResult, ...names: string[]): void {
  for (const n of names) expect(r.stdout.toString(), describeRun(r)).toContain(`CONTROL:${n}`);
}

function mustBind(req: Parameters<typeof checkBind>[0], roots: string[]): CheckedBind {
  const c = checkBind(req, { roots, deny: [] });
  if (!c.ok) throw new Error(c.message);
  onTestFinished(() => closeBinds([c.bind]));
  return c.bind;
}

/** A host process we start; killed when the test finishes. */
function hostSleep(): ChildProcess & { pid: number } {
  const child = spawn('sleep', ['60'], { stdio: 'ignore' });
  if (child.pid === undefined) throw new Error('could not start sleep on the host');
  onTestFinished(() => {
    child.kill('SIGKILL');
  });
  return child as ChildProcess & { pid: number };
}

/** The state letter of a host process (R, S, T, t, Z, …), or undefined when it is gone. */
function procState(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  } catch {
    return undefined;
  }
}

/** Host processes whose command line contains `needle` (never this test's own `ps`). */
function hostProcesses(needle: string): string[] {
  return execFileSync('ps', ['-eo', 'pid,args'], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.includes(needle));
}

/**
 * Waits (up to `ms`, scaled) until no host process mentions `needle`, failing with what is left;
 * returns what is left. The limit stays well below the ~28 s the marked sleeps run on their own.
 */
async function hostProcessesAfter(needle: string, ms = 2000): Promise<string[]> {
  await waitFor(
    () => `no host process to mention ${needle} (left: ${hostProcesses(needle).join('; ')})`,
    () => hostProcesses(needle).length === 0,
    { timeoutMs: ms, intervalMs: 50 },
  );
  return hostProcesses(needle);
}

function listen(server: Server, where: string | { host: string; port: number }): Promise<void> {
  onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    if (typeof where === 'string') server.listen(where, resolve);
    else server.listen(where.port, where.host, resolve);
  });
}

function connectFromHost(where: string | { host: string; port: number }): Promise<void> {
  return new Promise((resolve, reject) => {
    const s = typeof where === 'string' ? createConnection(where) : createConnection(where.port, where.host);
    s.once('connect', () => {
      s.destroy();
      resolve();
    });
    s.once('error', reject);
  });
}

/**
 * A TCP server on the host's 127.0.0.1, checked reachable from the host (the control), its count
 * of connections then set back to 0. Closed when the test finishes.
 */
async function hostTcpServer(): Promise<{ port: number; connections: () => number }> {
  let connections = 0;
  const server = createServer((s) => {
    connections++;
    s.destroy();
  });
  await listen(server, { host: '127.0.0.1', port: 0 });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  await connectFromHost({ host: '127.0.0.1', port: address.port });
  await waitFor('the host server to accept the connection', () => connections >= 1);
  expect(connections).toBe(1);
  connections = 0;
  return { port: address.port, connections: () => connections };
}

/** Defines every escape test, run in `how` sandboxes. */
export function escapeTests(how: 'fresh' | 'prebuilt' | 'warm'): void {
  mode = how;
  afterAll(async () => {
    if (!stageDir) return;
    // The pools of the stage stop first: a refill after the directory was removed would make it again.
    await sandboxesGone();
    discardPrebuilt(stageDir);
    rmSync(stageDir, { recursive: true, force: true });
  });

  describe('host files that are not bound are invisible', () => {
    it('cannot read /etc/shadow, /etc/gshadow or /etc/sudoers (while the synthetic /etc/passwd is readable)', async () => {
      expect(existsSync('/etc/shadow'), 'the host must have /etc/shadow for this test to mean anything').toBe(true);
      const r = await sh(`
      for f in /etc/shadow /etc/gshadow /etc/sudoers /etc/sudoers.d; do
        [ -e "$f" ] && echo "ESCAPE:exists $f"
        cat "$f" >/dev/null 2>&1 && echo "ESCAPE:read $f"
      done
      grep -q '^sandbox:x:1000:1000:' /etc/passwd && echo CONTROL:passwd
      ls -A /etc`);
      expectNoEscape(r);
      expectControls(r, 'passwd');
      expect(r.stdout.toString()).not.toMatch(/^(shadow|gshadow|sudoers)$/m);
    });

    it('cannot see /root, /root/.ssh or the home directory of the user running the tests', async () => {
      const home = homedir();
      const hostEntries = readdirSync(home);
      expect(hostEntries.length, `${home} is empty on the host, so this test would prove nothing`).toBeGreaterThan(0);
      const paths = [...new Set(['/root', '/root/.ssh', home, join(home, '.ssh'), ...hostEntries.map((e) => join(home, e))])];
      const r = await sh(
        `for p in "$@"; do
         [ -e "$p" ] && echo "ESCAPE:exists $p"
       done
       echo CONTROL:ran`,
        {},
        {},
        ['sh', ...paths],
      );
      expectNoEscape(r);
      expectControls(r, 'ran');
    });

    it('with a runtime mounted from the home directory (pyenv), shows only the path down to that mount', async () => {
      const home = homedir();
      const underHome = python.mounts.map((m) => m.source).filter((s) => s === home || s.startsWith(home + sep));
      // Each directory from home down to a mount may show exactly the next path component.
      const allowed = new Map<string, Set<string>>();
      for (const m of underHome) {
        const parts = relative(home, m).split(sep).filter(Boolean);
        let dir = home;
        for (const part of parts) {
          const set = allowed.get(dir) ?? new Set<string>();
          set.add(part);
          allowed.set(dir, set);
          dir = join(dir, part);
        }
      }
      const dirs = ['/root', home, ...allowed.keys()];
      const r = await py(
        `import os, sys, json
out = {}
for d in sys.argv[1:]:
    try: out[d] = sorted(os.listdir(d))
    except OSError: out[d] = None
for p in ('/root/.ssh', os.path.join(sys.argv[2], '.ssh')):
    if os.path.exists(p): print('ESCAPE:exists ' + p)
print('CONTROL:ran')
print(json.dumps(out))`,
        {},
        {},
        [...new Set(dirs)],
      );
      expectNoEscape(r);
      expectControls(r, 'ran');
      const seen = JSON.parse(r.stdout.toString().trim().split('\n').at(-1) ?? '{}') as Record<string, string[] | null>;
      for (const [dir, entries] of Object.entries(seen)) {
        const ok = allowed.get(dir) ?? new Set<string>();
        expect(
          (entries ?? []).filter((e) => !ok.has(e)),
          `${dir} shows entries that were never mounted`,
        ).toEqual([]);
      }
    });

    it('cannot read a canary in an unbound temp dir, while a bound file next to it is readable', async () => {
      const dir = await tempDir();
      const secret = `canary-${rand()}`;
      writeFileSync(join(dir, 'canary.txt'), secret);
      writeFileSync(join(dir, 'bound.txt'), 'bound-content');
      const bound = mustBind({ path: join(dir, 'bound.txt') }, [dir]);
      const r = await sh(
        `[ -e "$1/canary.txt" ] && echo "ESCAPE:canary exists"
       grep -rqs "$2" "$1" /tmp && echo "ESCAPE:canary content found"
       [ "$(cat "$1/bound.txt")" = bound-content ] && echo CONTROL:bound
       ls -A "$1"`,
        { binds: [bound] },
        {},
        ['sh', dir, secret],
      );
      expectNoEscape(r);
      expectControls(r, 'bound');
      expect(r.stdout.toString()).not.toContain('canary.txt');
      expect(r.stdout.toString()).not.toContain(secret);
    });
  });

  describe('writes outside rw binds do not reach the host', () => {
    it('cannot write to /usr (create or open an existing file for writing); the host /usr is unchanged', async () => {
      const name = `/usr/forge-escape-${rand()}`;
      const before = statSync('/usr/bin/env');
      const r = await sh(
        `touch "$1" 2>/dev/null && echo "ESCAPE:created $1"
       ( : >> /usr/bin/env ) 2>/dev/null && echo "ESCAPE:/usr/bin/env opened for writing"
       mkdir /usr/forge-escape-dir 2>/dev/null && echo "ESCAPE:mkdir in /usr"
       [ -x /usr/bin/env ] && echo CONTROL:usr-visible`,
        {},
        {},
        ['sh', name],
      );
      onTestFinished(() => {
        // Only when the escape worked: leave no trace on the host.
        if (existsSync(name)) execFileSync('rm', ['-f', name]);
      });
      expectNoEscape(r);
      expectControls(r, 'usr-visible');
      expect(existsSync(name)).toBe(false);
      expect(existsSync('/usr/forge-escape-dir')).toBe(false);
      const after = statSync('/usr/bin/env');
      expect([after.size, after.mtimeMs, after.ino]).toEqual([before.size, before.mtimeMs, before.ino]);
    });

    it('cannot write to the /etc files it is shown (host ones or synthetic); the host /etc is unchanged', async () => {
      const shared = ['/etc/ld.so.cache', '/etc/nsswitch.conf', '/etc/ssl/certs/ca-certificates.crt'].filter((p) => existsSync(p));
      const before = shared.map((p) => statSync(p));
      const name = `forge-escape-${rand()}`;
      const r = await sh(
        `for f in /etc/passwd /etc/group /etc/hosts "$@"; do
         ( : >> "$f" ) 2>/dev/null && echo "ESCAPE:$f opened for writing"
         [ -r "$f" ] && echo "CONTROL:readable $f"
       done
       touch "/etc/ssl/$0" 2>/dev/null && echo "ESCAPE:created in /etc/ssl"
       rm -f /etc/ld.so.cache 2>/dev/null; [ -e /etc/ld.so.cache ] || echo "ESCAPE:removed /etc/ld.so.cache"`,
        {},
        {},
        [name, ...shared],
      );
      expectNoEscape(r);
      expectControls(r, 'readable /etc/passwd', ...shared.map((p) => `readable ${p}`));
      expect(existsSync(`/etc/ssl/${name}`)).toBe(false);
      expect(shared.map((p) => statSync(p)).map((s) => [s.size, s.mtimeMs])).toEqual(before.map((s) => [s.size, s.mtimeMs]));
    });

    it('cannot create files in /etc or the sandbox root (they must be read-only, not a private scratch area)', async () => {
      // Not a host write (the root is bwrap's private tmpfs), but writing to /etc must fail, and that
      // tmpfs has no size limit (see the tmpBytes test below). Fix: --remount-ro / (and /dev) last.
      const name = `forge-escape-${rand()}`;
      const r = await sh(
        `echo x > "/etc/$0" 2>/dev/null && echo "ESCAPE:created /etc/$0"
       mkdir "/$0" 2>/dev/null && echo "ESCAPE:created /$0"
       echo CONTROL:ran`,
        {},
        {},
        [name],
      );
      expect(existsSync(`/etc/${name}`)).toBe(false);
      expectControls(r, 'ran');
      expectNoEscape(r);
    });

    it('cannot write through a read-only bind (file or directory); a rw bind is writable (control)', async () => {
      const dir = await tempDir();
      writeFileSync(join(dir, 'ro.txt'), 'original');
      mkdirSync(join(dir, 'rodir'));
      writeFileSync(join(dir, 'rodir', 'keep.txt'), 'keep');
      mkdirSync(join(dir, 'rwdir'));
      const binds = [
        mustBind({ path: join(dir, 'ro.txt') }, [dir]),
        mustBind({ path: join(dir, 'rodir') }, [dir]),
        mustBind({ path: join(dir, 'rwdir'), mode: 'rw' }, [dir]),
      ];
      const r = await sh(
        `cd "$0"
       echo pwned > ro.txt 2>/dev/null && echo "ESCAPE:wrote ro.txt"
       echo pwned >> ro.txt 2>/dev/null && echo "ESCAPE:appended ro.txt"
       touch rodir/new 2>/dev/null && echo "ESCAPE:created in rodir"
       rm -f rodir/keep.txt 2>/dev/null; [ -e rodir/keep.txt ] || echo "ESCAPE:removed rodir/keep.txt"
       mv rodir/keep.txt rodir/moved 2>/dev/null && echo "ESCAPE:renamed in rodir"
       chmod 777 ro.txt 2>/dev/null && echo "ESCAPE:chmod ro.txt"
       echo written > rwdir/out.txt && echo CONTROL:rw`,
        { binds },
        {},
        [dir],
      );
      expectNoEscape(r);
      expectControls(r, 'rw');
      expect(readFileSync(join(dir, 'ro.txt'), 'utf8')).toBe('original');
      expect(readdirSync(join(dir, 'rodir'))).toEqual(['keep.txt']);
      expect(readFileSync(join(dir, 'rodir', 'keep.txt'), 'utf8')).toBe('keep');
      expect(statSync(join(dir, 'ro.txt')).mode & 0o777).toBe(0o644);
      expect(readFileSync(join(dir, 'rwdir', 'out.txt'), 'utf8')).toBe('written\n');
    });
  });

  describe('host processes are out of reach', () => {
    it('cannot see host processes in /proc', async () => {
      const r = await sh(
        `
      [ -e "/proc/$0" ] && echo "ESCAPE:test pid $0 visible"
      for p in /proc/[0-9]*; do
        n=\${p#/proc/}
        echo "pid $n $(cat $p/comm 2>/dev/null)"
      done
      echo CONTROL:ran`,
        {},
        {},
        [String(process.pid)],
      );
      expectNoEscape(r);
      expectControls(r, 'ran');
      const pids = r.stdout
        .toString()
        .split('\n')
        .filter((l) => l.startsWith('pid '));
      expect(pids.length, describeRun(r)).toBeGreaterThanOrEqual(2); // control: /proc works (bwrap's init and the shell)
      expect(pids.length, describeRun(r)).toBeLessThanOrEqual(5);
      expect(pids.map((l) => l.split(' ')[1])).not.toContain(String(process.pid));
      // Only the sandbox's own processes: bwrap's init, the shell, and the commands it runs.
      expect(
        pids.filter((l) => !/^pid \d+ (bwrap|sh|cat)$/.test(l)),
        describeRun(r),
      ).toEqual([]);
    });

    it('cannot signal a host process (kill -9 <pid>, kill -9 -1); it is still alive afterwards', async () => {
      const victim = hostSleep();
      expect(procState(victim.pid)).toMatch(/[RS]/);
      // The control is printed before kill -9 -1: in a sandbox built ahead that also reaches the
      // run's holder (a shell of the sandbox, not its init), and the sandbox can be torn down
      // before anything after it is printed (a CI run saw it on a busy machine). The host
      // process's state below is what this case is about.
      const r = await sh(
        `kill -9 "$0" 2>/dev/null && echo "ESCAPE:kill -9 $0 succeeded"
       kill -0 "$0" 2>/dev/null && echo "ESCAPE:kill -0 $0 succeeded (host pid visible)"
       echo CONTROL:ran
       kill -9 -1 2>/dev/null`,
        {},
        {},
        [String(victim.pid)],
      );
      expectNoEscape(r);
      expectControls(r, 'ran');
      // Lets time pass: a delivered SIGKILL would have taken effect by now; one never delivered
      // leaves no event to wait for.
      await sleep(scaled(200));
      expect(procState(victim.pid), 'the host process must still be alive').toMatch(/[RS]/);
      expect(victim.exitCode).toBe(null);
      expect(victim.signalCode).toBe(null);
    });

    it('cannot ptrace-attach to pid 1 or to a host process', async () => {
      const victim = hostSleep();
      const r = await py(
        `import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
if libc.getpid() == os.getpid(): print('CONTROL:ctypes')
PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206
for pid in (1, int(sys.argv[1]), os.getppid()):
    for req in (PTRACE_ATTACH, PTRACE_SEIZE):
        rc = libc.ptrace(req, pid, None, None)
        print('ptrace', req, pid, rc, ctypes.get_errno())
        if rc == 0: print('ESCAPE:ptrace %d attached to %d' % (req, pid))`,
        {},
        {},
        [String(victim.pid)],
      );
      expectNoEscape(r);
      expectControls(r, 'ctypes');
      expect(procState(victim.pid), 'the host process must not be stopped by a tracer').toMatch(/[RS]/);
    });
  });

  describe('namespaces and mounts cannot be changed', () => {
    it('cannot remount /usr read-write, mount a tmpfs, or create a user namespace', async () => {
      const r = await sh(`
      mount -o remount,rw /usr 2>/dev/null && echo "ESCAPE:remounted /usr rw"
      mount -o remount,rw / 2>/dev/null && echo "ESCAPE:remounted / rw"
      mkdir -p /tmp/x && mount -t tmpfs none /tmp/x 2>/dev/null && echo "ESCAPE:mounted tmpfs"
      grep -q ' /tmp/x ' /proc/self/mountinfo && echo "ESCAPE:/tmp/x is a mount point"
      unshare -U true 2>/dev/null && echo "ESCAPE:unshare -U"
      unshare -Ur true 2>/dev/null && echo "ESCAPE:unshare -Ur"
      unshare -m true 2>/dev/null && echo "ESCAPE:unshare -m"
      touch /usr/forge-after-remount 2>/dev/null && echo "ESCAPE:/usr writable"
      echo CONTROL:ran`);
      expectNoEscape(r);
      expectControls(r, 'ran');
      expect(existsSync('/usr/forge-after-remount')).toBe(false);
    });

    it('cannot create namespaces from python (os.unshare, unshare(2) and clone flags via ctypes)', async () => {
      const r = await py(`import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET = 0x10000000, 0x00020000, 0x40000000
if hasattr(os, 'unshare'):
    try:
        os.unshare(os.CLONE_NEWUSER); print('ESCAPE:os.unshare(CLONE_NEWUSER)')
    except OSError as e: print('os.unshare', e.errno)
for flag in (CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWUSER | CLONE_NEWNS):
    rc = libc.unshare(flag)
    print('unshare', hex(flag), rc, ctypes.get_errno())
    if rc == 0: print('ESCAPE:unshare(%s)' % hex(flag))
if libc.getpid() == os.getpid(): print('CONTROL:ctypes')`);
      expectNoEscape(r);
      expectControls(r, 'ctypes');
    });
  });

  describe('the host network is out of reach', () => {
    it('cannot connect to an unbound host Unix socket, by path or in the abstract namespace', async () => {
      const dir = await tempDir();
      const path = join(dir, 'host.sock');
      const abstract = `forge-test-${rand()}`;
      let connections = 0;
      const a = createServer((s) => {
        connections++;
        s.destroy();
      });
      const b = createServer((s) => {
        connections++;
        s.destroy();
      });
      await listen(a, path);
      await listen(b, `\0${abstract}`);
      // Control: both are reachable from the host.
      await connectFromHost(path);
      await connectFromHost(`\0${abstract}`);
      await waitFor('the host servers to accept both connections', () => connections >= 2);
      expect(connections).toBe(2);
      connections = 0;

      const r = await py(
        `import socket, sys
path, name = sys.argv[1], sys.argv[2]
for what, addr in (('path', path), ('abstract', '\\0' + name)):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    try:
        s.connect(addr); print('ESCAPE:connected to the host socket by ' + what)
    except OSError as e: print(what, 'refused', e.errno)
# Control: Unix sockets work in here, and the same abstract name is free (a separate namespace).
srv = socket.socket(socket.AF_UNIX); srv.bind('\\0' + name); srv.listen()
c = socket.socket(socket.AF_UNIX); c.connect('\\0' + name); conn, _ = srv.accept()
c.sendall(b'ping'); print('CONTROL:' + conn.recv(4).decode())`,
        {},
        {},
        [path, abstract],
      );
      expectNoEscape(r);
      expectControls(r, 'ping');
      // Lets time pass: a connection from the sandbox would have been accepted by now; one that
      // was refused, as it must be, leaves no event to wait for.
      await sleep(scaled(100));
      expect(connections, 'the host servers saw a connection from the sandbox').toBe(0);
    });

    it("cannot connect to a TCP port listening on the host's 127.0.0.1", async () => {
      const { port, connections } = await hostTcpServer();

      const r = await py(
        `import socket, sys
port = int(sys.argv[1])
for host in ('127.0.0.1', 'localhost'):
    s = socket.socket(socket.AF_INET)
    s.settimeout(5)
    try:
        s.connect((host, port)); print('ESCAPE:connected to host %s:%d' % (host, port))
    except OSError as e: print(host, 'refused', e.errno)
# Control: the sandbox has its own loopback, where that same port is free.
srv = socket.socket(); srv.bind(('127.0.0.1', port)); srv.listen()
c = socket.create_connection(('127.0.0.1', port), timeout=5); conn, _ = srv.accept()
c.sendall(b'ping'); print('CONTROL:' + conn.recv(4).decode())`,
        {},
        {},
        [String(port)],
      );
      expectNoEscape(r);
      expectControls(r, 'ping');
      // Lets time pass: a connection from the sandbox would have been accepted by now; one that
      // was refused, as it must be, leaves no event to wait for.
      await sleep(scaled(100));
      expect(connections(), 'the host server saw a connection from the sandbox').toBe(0);
    });
  });

  describe('resource bombs end, and the host is fine', () => {
    it('a fork bomb (processes 32, timeout 3 s) ends, hits the process limit, and leaves no process behind', async () => {
      const fn = `bomb_${rand()}`;
      const r = await run({
        command: ['/usr/bin/bash', '-c', `${fn}() { ${fn} | ${fn} & }; ${fn}; while :; do ${fn}; sleep 0.1; done`],
        limits: { processes: 32, timeoutMs: 3000 },
      });
      expect(['timeout', 'exit', 'signal']).toContain(r.reason);
      const host = await probe();
      if (typeof host.processLimit === 'object') expect(r.processLimitHit, describeRun(r)).toBe(true);
      expect(await hostProcessesAfter(fn)).toEqual([]);
      // The host can still run things, sandboxed or not.
      expect(execFileSync('/bin/echo', ['host-ok'], { encoding: 'utf8' })).toBe('host-ok\n');
      const after = await sh('echo CONTROL:after');
      expectControls(after, 'after');
    });

    it('a memory bomb (~20 GiB in 100 MiB chunks, default 8 GiB address space) ends with reason memory', async () => {
      // bytes(n) is calloc'ed: the pages are never touched, so a broken limit costs no real memory.
      const r = await py(`chunks = []
for i in range(200):
    chunks.append(bytes(100 * 2**20))
    print(i, flush=True)
print('ESCAPE:allocated 20 GiB')`);
      expectNoEscape(r);
      expect(r.reason, describeRun(r)).toBe('memory');
      expect(r.stderrTail).toContain('MemoryError');
      const done = r.stdout.toString().trim().split('\n').length;
      expect(done, 'control: some chunks were allocated before the limit').toBeGreaterThan(0);
      expect(done * 100 * 2 ** 20).toBeLessThanOrEqual(r.limits.addressSpaceBytes);
    });

    it('a CPU spin with cpuSeconds 1 ends with reason cpu (SIGXCPU, or the run-wide budget first)', async () => {
      const r = await sh('while :; do :; done', { limits: { cpuSeconds: 1, timeoutMs: 20_000 } });
      expect(r.reason, describeRun(r)).toBe('cpu');
      // The process's own RLIMIT_CPU sends SIGXCPU at 1 s. Where a cgroup holds the run-wide budget,
      // it also counts bwrap's setup, so its poll may find the run over budget just before and kill
      // it (SIGKILL): either way the limit ended it.
      expect(r.enforced.cpu === 'cgroup' ? ['SIGXCPU', 'SIGKILL'] : ['SIGXCPU']).toContain(r.signal);
      expect(r.exitCode).toBe(null);
    });

    it('a file-size bomb in a rw bind with fileSizeBytes 1 MiB ends with reason file_size; the host file is ≤ 1 MiB', async () => {
      const dir = await tempDir();
      mkdirSync(join(dir, 'out'));
      const out = mustBind({ path: join(dir, 'out'), mode: 'rw' }, [dir]);
      const file = join(dir, 'out', 'big');
      const r = await run({
        command: ['/usr/bin/dd', 'if=/dev/zero', `of=${file}`, 'bs=64k', 'count=160'],
        binds: [out],
        limits: { fileSizeBytes: 1 << 20 },
      });
      expect(r.reason, describeRun(r)).toBe('file_size');
      expect(r.signal).toBe('SIGXFSZ');
      const size = statSync(file).size;
      expect(size, 'control: dd did write').toBeGreaterThan(0);
      expect(size).toBeLessThanOrEqual(1 << 20);
    });

    it('filling /tmp (tmpBytes 1 MiB) fails inside with ENOSPC, and the host /tmp is untouched', async () => {
      const name = `forge-fill-${rand()}`;
      const r = await sh(
        `dd if=/dev/zero of="/tmp/$0" bs=64k count=64
       s=$(stat -c %s "/tmp/$0"); echo "size $s"
       [ "$s" -gt 1048576 ] && echo "ESCAPE:wrote $s bytes to /tmp"
       [ "$s" -gt 0 ] && echo CONTROL:wrote`,
        { limits: { tmpBytes: 1 << 20 } },
        {},
        [name],
      );
      expectNoEscape(r);
      expectControls(r, 'wrote');
      expect(r.stderrTail).toContain('No space left on device');
      expect(existsSync(join('/tmp', name))).toBe(false);
    });

    it('writing outside /tmp (the sandbox root, /etc) is no way around tmpBytes', async () => {
      // The root of the sandbox is bwrap's own tmpfs: without a size cap, a tool could fill host
      // memory there (up to half the RAM) whatever tmpBytes says.
      const name = `forge-fill-${rand()}`;
      const r = await sh(
        `for d in / /etc /dev; do
         dd if=/dev/zero of="$d/$0" bs=64k count=64 2>/dev/null
         s=$(stat -c %s "$d/$0" 2>/dev/null || echo 0)
         [ "$s" -gt 1048576 ] && echo "ESCAPE:wrote $s bytes to $d past tmpBytes"
       done
       echo CONTROL:ran`,
        { limits: { tmpBytes: 1 << 20 } },
        {},
        [name],
      );
      expectControls(r, 'ran');
      expectNoEscape(r);
    });

    it('endless stdout (yes) is capped: output_cap, 1000 bytes kept, the spill file holds the first ≥ 1 MiB', async () => {
      const dir = await tempDir();
      const spill = join(dir, 'stdout.spill');
      const r = await run({ command: ['/usr/bin/yes'], limits: { outputBytes: 1000, outputHardBytes: 1 << 20 } }, { stdoutFile: spill });
      expect(r.reason, describeRun(r)).toBe('output_cap');
      expect(r.signal).toBe('SIGKILL');
      expect(r.stdout.length).toBe(1000);
      expect(r.stdout.equals(Buffer.from('y\n'.repeat(500)))).toBe(true);
      expect(r.stdoutTruncated).toBe(true);
      expect(r.stdoutFile).toBe(spill);
      const data = readFileSync(spill);
      expect(data.length).toBeGreaterThanOrEqual(1 << 20);
      expect(data.length).toBe(r.stdoutBytes);
      expect(data.equals(Buffer.from('y\n'.repeat(Math.ceil(data.length / 2))).subarray(0, data.length))).toBe(true);
      expect(statSync(spill).mode & 0o777).toBe(0o600);
    });
  });

  describe('nothing outlives the call', () => {
    const variants: [string, (m: string, dir: string) => string][] = [
      ['a background subshell', (m, d) => `(sleep ${m}; touch ${d}/hostmarker) & echo started`],
      ['setsid', (m, d) => `setsid sh -c 'sleep ${m}; touch ${d}/hostmarker' & echo started`],
      ['nohup', (m, d) => `nohup sh -c 'sleep ${m}; touch ${d}/hostmarker' >/dev/null 2>&1 & echo started`],
      ['a double fork', (m, d) => `( (sleep ${m}; touch ${d}/hostmarker) & ) ; echo started`],
      [
        'a double fork with setsid and closed stdio',
        (m, d) => `(setsid sh -c 'sleep ${m}; touch ${d}/hostmarker' </dev/null >/dev/null 2>&1 &) ; echo started`,
      ],
    ];
    it.each(variants)('%s', async (_name, script) => {
      const dir = await tempDir();
      mkdirSync(join(dir, 'out'));
      const out = mustBind({ path: join(dir, 'out'), mode: 'rw' }, [dir]);
      // A unique sleep duration is the marker of the process in the host's process list.
      const marker = `29.${String(Math.floor(Math.random() * 1e9)).padStart(9, '1')}`;
      const r = await sh(
        // Until the detached sleep shows in the sandbox's process list (a busy host may take a while to start it).
        `${script(marker, join(dir, 'out'))}
       for i in $(seq 600); do ps -eo args | grep -q "^sleep ${marker}" && { echo CONTROL:running; break; }; sleep 0.05; done`,
        { binds: [out] },
      );
      expect(r.reason, describeRun(r)).toBe('exit');
      expectControls(r, 'running');
      expect(r.stdout.toString()).toContain('started');
      expect(await hostProcessesAfter(`sleep ${marker}`)).toEqual([]);
      expect(existsSync(join(dir, 'out', 'hostmarker'))).toBe(false);
    });
  });

  describe('binds are mounted by descriptor: swapping the path after checkBind changes nothing', () => {
    async function original() {
      const root = await tempDir();
      const d = join(root, 'data');
      mkdirSync(d);
      writeFileSync(join(d, 'secret.txt'), 'ORIGINAL');
      return { root, d };
    }
    const read = (bind: CheckedBind) =>
      sh(
        `ls -A "$0"; cat "$0/secret.txt"; echo
       [ -e "$0/passwd" ] && echo "ESCAPE:$0/passwd exists"
       grep -qs '^daemon:' "$0/passwd" && echo "ESCAPE:host /etc/passwd through the bind"
       [ -e "$0/canary.txt" ] && echo "ESCAPE:the replacement directory is mounted"
       echo CONTROL:ran`,
        { binds: [bind] },
        {},
        [bind.path],
      );

    it('a directory renamed away and replaced by a symlink to /etc: the original is seen', async () => {
      const { root, d } = await original();
      const bind = mustBind({ path: d }, [root]);
      renameSync(d, join(root, 'moved'));
      symlinkSync('/etc', d);
      const r = await read(bind);
      expectNoEscape(r);
      expectControls(r, 'ran');
      expect(r.stdout.toString().split('\n').slice(0, 2)).toEqual(['secret.txt', 'ORIGINAL']);
    });

    it('a directory replaced by another directory holding a canary: the original is seen', async () => {
      const { root, d } = await original();
      const bind = mustBind({ path: d }, [root]);
      renameSync(d, join(root, 'moved'));
      mkdirSync(d);
      writeFileSync(join(d, 'canary.txt'), 'REPLACEMENT');
      const r = await read(bind);
      expectNoEscape(r);
      expectControls(r, 'ran');
      expect(r.stdout.toString()).not.toContain('REPLACEMENT');
      expect(r.stdout.toString().split('\n').slice(0, 2)).toEqual(['secret.txt', 'ORIGINAL']);
    });

    it('a rw directory swapped for a symlink to another host directory: writes land in the original', async () => {
      const { root, d } = await original();
      const victim = await tempDir();
      const bind = mustBind({ path: d, mode: 'rw' }, [root]);
      renameSync(d, join(root, 'moved'));
      symlinkSync(victim, d);
      const r = await sh('echo written > "$0/pwned" && echo CONTROL:wrote', { binds: [bind] }, {}, [d]);
      expectControls(r, 'wrote');
      expect(readdirSync(victim)).toEqual([]);
      expect(readFileSync(join(root, 'moved', 'pwned'), 'utf8')).toBe('written\n');
    });

    it('a file renamed away and replaced by a symlink to /etc/shadow: the original file is seen', async () => {
      const root = await tempDir();
      const f = join(root, 'input.txt');
      writeFileSync(f, 'ORIGINAL-FILE');
      const bind = mustBind({ path: f }, [root]);
      renameSync(f, join(root, 'moved.txt'));
      symlinkSync('/etc/shadow', f);
      const r = await sh(
        `[ "$(cat "$0")" = ORIGINAL-FILE ] && echo CONTROL:original
       grep -qs '^root:' "$0" && echo "ESCAPE:/etc/shadow through the bind"`,
        { binds: [bind] },
        {},
        [f],
      );
      expectNoEscape(r);
      expectControls(r, 'original');
    });
  });

  describe('refused binds are never mounted', () => {
    it('FIFOs, sockets, devices, `..` and symlinked paths are refused (bind_denied) and absent inside', async () => {
      const root = await tempDir();
      const outside = await tempDir();
      writeFileSync(join(outside, 'canary.txt'), 'OUTSIDE');
      writeFileSync(join(root, 'ok.txt'), 'ok');
      execFileSync('mkfifo', [join(root, 'fifo')]);
      const sock = createServer();
      await listen(sock, join(root, 'sock'));
      symlinkSync(join(outside, 'canary.txt'), join(root, 'link.txt'));
      const rules = { roots: [root, '/dev'], deny: [] };
      const refused = [
        join(root, 'fifo'),
        join(root, 'sock'),
        '/dev/null',
        `${root}/../${outside.split('/').at(-1)}/canary.txt`,
        `${root}/./ok.txt`,
        join(root, 'link.txt'),
      ];
      for (const path of refused) {
        const c = checkBind({ path }, rules);
        if (c.ok) closeBinds([c.bind]);
        expect(c, path).toMatchObject({ ok: false, code: 'bind_denied' });
      }
      const ok = mustBind({ path: join(root, 'ok.txt') }, [root]);
      expect(lstatSync(join(root, 'fifo')).isFIFO()).toBe(true);
      const r = await sh(
        `for p in "$@"; do [ -e "$p" ] && echo "ESCAPE:$p is mounted"; done
       [ -e "$0/fifo" ] && echo "ESCAPE:fifo"
       [ -e "$0/sock" ] && echo "ESCAPE:sock"
       [ -e "$0/link.txt" ] && echo "ESCAPE:link.txt"
       grep -rqs OUTSIDE /tmp && echo "ESCAPE:the outside canary is visible"
       [ "$(cat "$0/ok.txt")" = ok ] && echo CONTROL:ok`,
        { binds: [ok] },
        {},
        [root, join(outside, 'canary.txt'), outside],
      );
      expectNoEscape(r);
      expectControls(r, 'ok');
    });
  });

  describe('the environment and descriptors of the host stay outside', () => {
    it("a canary variable in the test process's environment is invisible inside", async () => {
      const canary = `canary-${rand()}`;
      process.env.FORGE_CANARY = canary;
      onTestFinished(() => {
        delete process.env.FORGE_CANARY;
      });
      const r = await sh(
        `env; cat /proc/self/environ /proc/1/environ 2>/dev/null | tr '\\0' '\\n'
       [ -n "$FORGE_CANARY" ] && echo "ESCAPE:FORGE_CANARY set"
       [ "$VISIBLE" = yes ] && echo CONTROL:env`,
        { env: { VISIBLE: 'yes' } },
      );
      expectNoEscape(r);
      expectControls(r, 'env');
      expect(r.stdout.toString()).not.toContain(canary);
      expect(r.stdout.toString()).not.toContain('FORGE_CANARY');
    });

    it('the tool holds no descriptor but stdin, stdout and stderr, and /dev/null over inherited ones (no bind, seccomp or argument fd)', async () => {
      const dir = await tempDir();
      mkdirSync(join(dir, 'd'));
      const bind = mustBind({ path: join(dir, 'd'), mode: 'rw' }, [dir]);
      const r = await py(
        `import os
for fd in range(1024):
    try: os.fstat(fd)
    except OSError: continue
    print('fd %d %s' % (fd, os.readlink('/proc/self/fd/%d' % fd)))
print('CONTROL:ran')`,
        { binds: [bind] },
      );
      expectControls(r, 'ran');
      const fds = r.stdout
        .toString()
        .split('\n')
        .filter((l) => l.startsWith('fd '));
      expect(
        fds.filter((l) => !l.endsWith(' /dev/null')).map((l) => l.split(' ')[1]),
        describeRun(r),
      ).toEqual(['0', '1', '2']);
    });

    it('a descriptor the embedding process inherited without O_CLOEXEC does not reach the tool', async () => {
      // Node cannot open a descriptor without O_CLOEXEC, so a child node process receives one (fd 240,
      // a host directory holding a canary) the way a daemon inherits one from its parent, and runs
      // the sandbox from there.
      const secretDir = await tempDir();
      const secret = `canary-${rand()}`;
      writeFileSync(join(secretDir, 'canary.txt'), secret);
      const dirFd = openSync(secretDir, 'r');
      onTestFinished(() => closeSync(dirFd));
      // Where runs use cgroups (as root), launchers are started ahead of need.
      const usesCgroups = typeof (await probe()).processLimit === 'object';
      const { code, out, err } = await runInChild(
        `// Twice: the second run takes a launcher started ahead of need (where runs use cgroups).
      for (let i = 0; i < 2; i++) {
        const r = await module.runSandboxed({ command: ['/bin/sh', '-c',
          'ls /proc/self/fd/240/ 2>/dev/null; cat /proc/self/fd/240/canary.txt 2>/dev/null && echo ESCAPE:read-through-fd; echo CONTROL:ran'] });
        process.stdout.write(r.stdout);
        if (${usesCgroups}) await module.waitFor('a launcher started ahead to be ready', () => module.launcherStats().ready > 0);
      }`,
        { extraStdio: [...Array<'ignore'>(240 - 3).fill('ignore'), dirFd] }, // dirFd lands on fd 240
      );
      expect(code, err).toBe(0);
      expect(
        out.split('\n').filter((l) => l === 'CONTROL:ran'),
        err,
      ).toHaveLength(2);
      expect(out).not.toContain('ESCAPE:');
      expect(out).not.toContain(secret);
      expect(out).not.toContain('canary.txt');
    });
  });

  describe('exit codes and signals are reported faithfully', () => {
    const cases: [string, string, Partial<RunResult>][] = [
      ['exit 0', 'exit 0', { reason: 'exit', exitCode: 0, signal: null }],
      ['exit 3', 'exit 3', { reason: 'exit', exitCode: 3, signal: null }],
      ['exit 255', 'exit 255', { reason: 'exit', exitCode: 255, signal: null }],
      ['kill -TERM $$', 'kill -TERM $$', { reason: 'signal', exitCode: null, signal: 'SIGTERM' }],
      ['kill -SEGV $$', 'kill -SEGV $$', { reason: 'signal', exitCode: null, signal: 'SIGSEGV' }],
    ];
    it.each(cases)('%s', async (_name, script, expected) => {
      const r = await sh(script);
      expect(r, describeRun(r)).toMatchObject(expected);
    });

    it('exit codes above 128 read as signals: the documented limit of bwrap (a signal N is exit 128 + N)', async () => {
      // bwrap reports a tool killed by signal N as exit code 128 + N, so "exit 130" and a SIGINT
      // cannot be told apart from outside; the result says SIGINT for both (README, "Limits").
      const r = await sh('exit 130');
      expect(r, describeRun(r)).toMatchObject({ reason: 'signal', exitCode: null, signal: 'SIGINT' });
      const k = await sh('kill -INT $$');
      expect(k, describeRun(k)).toMatchObject({ reason: 'signal', exitCode: null, signal: 'SIGINT' });
    });

    it('python sys.exit(7)', async () => {
      const r = await py('import sys; sys.exit(7)');
      expect(r, describeRun(r)).toMatchObject({ reason: 'exit', exitCode: 7, signal: null });
    });

    it('a wall-clock timeout: reason timeout, SIGKILL, and the sleeping process is gone', async () => {
      const marker = `28.${String(Math.floor(Math.random() * 1e9)).padStart(9, '1')}`;
      const r = await sh(`sleep ${marker}`, { limits: { timeoutMs: 1000 } });
      expect(r, describeRun(r)).toMatchObject({ reason: 'timeout', exitCode: null, signal: 'SIGKILL' });
      expect(await hostProcessesAfter(`sleep ${marker}`)).toEqual([]);
    });

    it('1 MiB of binary stdin arrives intact and comes back on stdout identical', async () => {
      const input = randomBytes(1 << 20);
      const r = await run({ command: ['/usr/bin/cat'], limits: { outputBytes: 2 << 20 } }, { stdin: input });
      expect(r.reason, describeRun(r)).toBe('exit');
      expect(r.exitCode).toBe(0);
      expect(r.stdoutTruncated).toBe(false);
      expect(r.stdout.length).toBe(input.length);
      expect(r.stdout.equals(input)).toBe(true);
    });
  });

  describe('no uid of the sandbox is host root, and the kernel stays out of reach', () => {
    const root = process.getuid?.() === 0;

    it('every process of the sandbox runs as an unprivileged host uid (as root: the dedicated sandbox uid, never 0)', async () => {
      const host = await probe();
      const tag = `9.${Date.now() % 1000}${Math.floor(Math.random() * 1000)}`;
      const running = sh(`sleep ${tag} & echo CONTROL:started; wait`);
      // The tool's own process (its sleep), seen from the host while it sleeps, and its parent.
      const isSleep = (p: number) => {
        try {
          return readFileSync(`/proc/${p}/cmdline`, 'utf8') === `sleep\0${tag}\0`;
        } catch {
          return false;
        }
      };
      const uidOf = (p: number) =>
        /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/m
          .exec(readFileSync(`/proc/${p}/status`, 'utf8'))
          ?.slice(1)
          .map(Number) ?? [];
      const ppidOf = (p: number) => Number(/^PPid:\s+(\d+)/m.exec(readFileSync(`/proc/${p}/status`, 'utf8'))?.[1]);
      const found = await waitFor(`the tool's sleep ${tag}, seen from the host`, () => descendants().find(isSleep));
      const uids = [uidOf(found), uidOf(ppidOf(found))];
      process.kill(found, 'SIGKILL');
      const r = await running;
      expectControls(r, 'started');
      expect(uids.length, 'the tool process was seen from the host').toBeGreaterThan(0);
      const expected = root ? (host.identity?.uid as number) : (process.getuid?.() as number);
      if (root) expect(expected).toBe(2_000_000_000);
      for (const u of uids) expect(u).toEqual([expected, expected, expected, expected]);
    });

    it('cannot write kernel.core_pattern or any sysctl, nor trigger sysrq: /proc/sys, /proc/sysrq-trigger, /proc/irq, /proc/bus, /proc/fs are read-only', async () => {
      const before = readFileSync('/proc/sys/kernel/core_pattern', 'utf8');
      const r = await sh(`
      printf '|/forge/artifacts/h.sh' > /proc/sys/kernel/core_pattern 2>/dev/null && echo ESCAPE:core_pattern
      echo 1 > /proc/sys/kernel/sysrq 2>/dev/null && echo ESCAPE:sysrq
      echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo ESCAPE:drop_caches
      echo 1 > /proc/sys/net/ipv4/ip_forward 2>/dev/null && echo ESCAPE:ip_forward
      [ -e /proc/sysrq-trigger ] && { echo h > /proc/sysrq-trigger 2>/dev/null && echo ESCAPE:sysrq-trigger; }
      for d in /proc/sys /proc/irq /proc/bus /proc/fs; do
        [ -d $d ] || continue
        grep -q " $d ro," /proc/self/mountinfo && echo CONTROL:ro$d
      done
      cat /proc/sys/kernel/core_pattern >/dev/null && echo CONTROL:readable`);
      expectNoEscape(r);
      expectControls(r, 'readable', 'ro/proc/sys');
      for (const d of ['/proc/irq', '/proc/bus', '/proc/fs']) if (existsSync(d)) expectControls(r, `ro${d}`);
      expect(readFileSync('/proc/sys/kernel/core_pattern', 'utf8')).toBe(before);
    });

    it('kernel memory, keys, timers and the ACPI/SCSI views are masked (empty or unreadable)', async () => {
      const r = await sh(`
      for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug /proc/interrupts /proc/latency_stats /proc/timer_stats; do
        [ -e $f ] || continue
        [ -s $f ] && echo "ESCAPE:size $f"
        n=$(head -c 64 $f 2>/dev/null | wc -c); [ "$n" -gt 0 ] && echo "ESCAPE:read $f"
        echo CONTROL:checked
      done
      for d in /proc/acpi /proc/scsi /proc/asound; do
        [ -d $d ] || continue
        [ -n "$(ls -A $d)" ] && echo "ESCAPE:listed $d"
        touch $d/x 2>/dev/null && echo "ESCAPE:wrote $d"
      done
      [ -r /proc/self/status ] && echo CONTROL:proc`);
      expectNoEscape(r);
      expectControls(r, 'proc');
      if (['/proc/kcore', '/proc/keys', '/proc/timer_list', '/proc/sched_debug', '/proc/interrupts'].some((f) => existsSync(f))) {
        expectControls(r, 'checked');
      }
    });

    it("the mount table shows no host path of the run's code or output: they are copied in and out", async () => {
      const dir = await tempDir();
      const code = join(dir, 'code.sh');
      writeFileSync(code, 'cat /proc/self/mountinfo; echo out > /out/f; echo CONTROL:ran\n', { mode: 0o400 });
      mkdirSync(join(dir, 'artifacts'));
      const r = await run({
        command: ['/bin/sh', '/in/code.sh'],
        mounts: [
          { source: code, target: '/in/code.sh', mode: 'ro', perRun: true },
          { source: join(dir, 'artifacts'), target: '/out', mode: 'rw', perRun: true },
        ],
      });
      expectControls(r, 'ran');
      expect(r.stdout.toString(), describeRun(r)).not.toContain(dir);
      expect(r.stdout.toString()).toMatch(/ \/out rw,nosuid,nodev[^ ]* - tmpfs /);
      expect(readFileSync(join(dir, 'artifacts', 'f'), 'utf8')).toBe('out\n');
    });

    it('an output flood stops at outputDirBytes: the tool meets ENOSPC, the host keeps at most that much, marked full, with no exec bit', async () => {
      const dir = await tempDir();
      const out = join(dir, 'artifacts');
      mkdirSync(out);
      const r = await run({
        command: [
          '/bin/sh',
          '-c',
          'i=0; while [ $i -lt 40 ]; do head -c 262144 /dev/zero > /out/f$i || { echo CONTROL:enospc; break; }; i=$((i+1)); done; chmod 4755 /out/f0; printf "#!/bin/sh\n" > /out/x; chmod +x /out/x; ln -s /etc/shadow /out/l; mkfifo /out/p; echo CONTROL:done',
        ],
        mounts: [{ source: out, target: '/out', mode: 'rw', perRun: true }],
        limits: { outputDirBytes: 1 << 20 },
      });
      expectControls(r, 'enospc');
      const o = r.outputs?.[0];
      expect(o, describeRun(r)).toMatchObject({ path: out, full: true });
      let total = 0;
      for (const name of readdirSync(out)) {
        const st = lstatSync(join(out, name));
        if (st.isFile()) {
          total += st.size;
          expect((st.mode & 0o7777).toString(8), name).toBe('600');
        }
      }
      expect(total).toBeLessThanOrEqual(1 << 20);
      expect(lstatSync(join(out, 'l')).isSymbolicLink()).toBe(true); // kept as a link, never followed
      expect(existsSync(join(out, 'p'))).toBe(false); // a FIFO is not copied
    });

    it.runIf(root)(
      'as root: a rw bind of a root-owned file is writable for the run and root-owned again after; a ro bind the sandbox uid cannot read is refused',
      async () => {
        const dir = await tempDir(); // 0700, root's: the sandbox uid cannot search it (staged)
        writeFileSync(join(dir, 'data.txt'), 'in\n', { mode: 0o644 });
        mkdirSync(join(dir, 'out'), { mode: 0o755 });
        const file = mustBind({ path: join(dir, 'data.txt'), mode: 'rw' }, [dir]);
        const out = mustBind({ path: join(dir, 'out'), mode: 'rw' }, [dir]);
        const r = await run({
          command: [
            '/bin/sh',
            '-c',
            'cat "$0" && echo more >> "$0" && mkdir "$1/sub" && echo x > "$1/sub/f" && echo CONTROL:wrote',
            file.path,
            out.path,
          ],
          binds: [file, out],
        });
        expectControls(r, 'wrote');
        expect(readFileSync(join(dir, 'data.txt'), 'utf8')).toBe('in\nmore\n');
        for (const p of ['data.txt', 'out', 'out/sub', 'out/sub/f']) expect(statSync(join(dir, p)).uid, p).toBe(0);
        writeFileSync(join(dir, 'private.txt'), 'secret', { mode: 0o600 });
        const priv = mustBind({ path: join(dir, 'private.txt'), mode: 'ro' }, [dir]);
        await expect(run({ command: ['/bin/cat', priv.path], binds: [priv] })).rejects.toMatchObject({
          code: 'bind_denied',
          message: expect.stringContaining('cannot read it (owner uid 0, mode 0600)'),
        });
      },
    );

    it.runIf(root)(
      'as root: every rw bind is mounted noexec,nosuid,nodev inside, so what the tool writes there cannot be run',
      async () => {
        const dir = await tempDir();
        mkdirSync(join(dir, 'out'), { mode: 0o755 });
        const out = mustBind({ path: join(dir, 'out'), mode: 'rw' }, [dir]);
        const r = await run({
          command: [
            '/bin/sh',
            '-c',
            'cp /bin/true "$0/t" && chmod 755 "$0/t" && echo CONTROL:copied; "$0/t" && echo ESCAPE:exec; grep " $0 " /proc/self/mountinfo',
            out.path,
          ],
          binds: [out],
        });
        expectNoEscape(r);
        expectControls(r, 'copied');
        expect(r.stdout.toString(), describeRun(r)).toMatch(/ rw,nosuid,nodev,noexec[, ]/);
      },
    );
  });

  describe('a node tool meets the same walls', () => {
    it('cannot read or write host files, see host processes, change kernel settings or become root', async () => {
      const sleeper = hostSleep();
      const r = await js(
        `const fs = require('node:fs');
const hostPid = process.argv.at(-1);
const attempt = (what, fn) => {
  try {
    fn();
    console.log('ESCAPE:' + what);
  } catch (e) {
    console.log(what, 'refused', e.code);
  }
};
attempt('read /etc/shadow', () => fs.readFileSync('/etc/shadow'));
attempt('list /root', () => fs.readdirSync('/root'));
attempt('write /usr', () => fs.writeFileSync('/usr/forge-escape-' + process.pid, 'x'));
attempt('append /etc/passwd', () => fs.appendFileSync('/etc/passwd', 'x'));
attempt('write core_pattern', () => fs.writeFileSync('/proc/sys/kernel/core_pattern', '|/tmp/x'));
attempt('setuid 0', () => process.setuid(0));
attempt('see the host sleep', () => {
  if (!fs.readFileSync('/proc/' + hostPid + '/cmdline', 'latin1').startsWith('sleep')) throw Object.assign(new Error(), { code: 'OTHER' });
});
if (/^sandbox:x:/m.test(fs.readFileSync('/etc/passwd', 'utf8'))) console.log('CONTROL:ran');`,
        {},
        {},
        [String(sleeper.pid)],
      );
      expectNoEscape(r);
      expectControls(r, 'ran');
      expect(procState(sleeper.pid)).not.toBe(undefined);
    });

    it("cannot connect to a TCP port listening on the host's 127.0.0.1", async () => {
      const { port, connections } = await hostTcpServer();
      const r = await js(
        `const net = require('node:net');
const port = Number(process.argv.at(-1));
const attempt = (host) =>
  new Promise((done) => {
    const s = net.connect(port, host);
    s.on('connect', () => { console.log('ESCAPE:connected to ' + host); s.destroy(); done(); });
    s.on('error', (e) => { console.log(host, 'refused', e.code); done(); });
  });
(async () => {
  await attempt('127.0.0.1');
  await attempt('localhost');
  // Control: the sandbox has its own loopback, where that same port is free.
  const srv = net.createServer((c) => c.end('ping'));
  await new Promise((ok) => srv.listen(port, '127.0.0.1', ok));
  const c = net.connect(port, '127.0.0.1');
  c.on('data', (d) => { console.log('CONTROL:' + d); c.destroy(); srv.close(); });
})();`,
        {},
        {},
        [String(port)],
      );
      expectNoEscape(r);
      expectControls(r, 'ping');
      // Lets time pass: as above, a connection from the sandbox would have been accepted by now.
      await sleep(scaled(100));
      expect(connections(), 'the host server saw a connection from the sandbox').toBe(0);
    });

    it('a CPU spin with cpuSeconds 1 ends with reason cpu', async () => {
      const r = await js('for (;;) {}', { limits: { cpuSeconds: 1, timeoutMs: 30_000 } });
      expect(r.reason, describeRun(r)).toBe('cpu');
    });

    it('a detached child process does not outlive the call', async () => {
      const marker = `29.${String(Math.floor(Math.random() * 1e9)).padStart(9, '1')}`;
      const r = await js(
        `const { spawn, execFileSync } = require('node:child_process');
spawn('/bin/sh', ['-c', 'sleep ${marker}'], { detached: true, stdio: 'ignore' }).unref();
// Until the detached sleep shows in the sandbox's process list.
for (let i = 0; i < 600; i++) {
  if (execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' }).includes('sleep ${marker}')) { console.log('CONTROL:running'); break; }
  execFileSync('sleep', ['0.05']);
}`,
      );
      expect(r.reason, describeRun(r)).toBe('exit');
      expectControls(r, 'running');
      expect(await hostProcessesAfter(`sleep ${marker}`)).toEqual([]);
    });
  });

  describe('the sandbox fails closed', () => {
    it('a missing bwrap rejects with sandbox_unavailable and the install hint, and nothing runs', async () => {
      const dir = await tempDir();
      mkdirSync(join(dir, 'out'));
      const out = mustBind({ path: join(dir, 'out'), mode: 'rw' }, [dir]);
      const marker = join(dir, 'out', 'ran');
      await expect(
        run({ command: ['/bin/sh', '-c', 'touch "$0"', marker], binds: [out] }, { bwrapPath: '/nonexistent/bwrap' }),
      ).rejects.toMatchObject({
        code: 'sandbox_unavailable',
        message: expect.stringContaining('apt-get install -y bubblewrap'),
      });
      // Lets time pass: a run that started anyway would have touched the marker by now; nothing
      // that was never started leaves an event to wait for.
      await sleep(scaled(100));
      expect(existsSync(marker)).toBe(false);
      // Control: the same profile with the real bwrap does run.
      const r = await run({ command: ['/bin/sh', '-c', 'touch "$0"', marker], binds: [out] });
      expect(r.exitCode, describeRun(r)).toBe(0);
      expect(existsSync(marker)).toBe(true);
    });
  });
}
