import { chownSync, existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import { scaled } from '@forge/test-utils';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { describeRunLimits, type HostInfo, type Mount, probe, runSandboxed } from '../src/index.js';
import { asRoot, isRoot, nodeAs, pythonRuntime, requireSandbox, tempDir } from './helpers.js';

let host: HostInfo;
let python: { interpreter: string; mounts: Mount[] };
beforeAll(async () => {
  await requireSandbox();
  host = await probe();
  python = await pythonRuntime();
});

const mountinfo = () => readFileSync('/proc/self/mountinfo', 'utf8');
/** Whether the memory (or another) controller is bound to a cgroup v1 hierarchy here. */
const onV1 = (controller: string) => new RegExp(` - cgroup \\S+ \\S*\\b${controller}\\b`).test(mountinfo());
/** Runs the rest of a command line as uid and gid 65534 (after a root shell moved it into a cgroup). */
const DROP = 'setpriv --reuid 65534 --regid 65534 --clear-groups';

// Root makes the per-run cgroups of a v1 host: these run in CI's root pass.
describe.runIf(isRoot)('cgroup v1, for real (root, controllers on v1 hierarchies)', () => {
  it('the host report and every run say memory, CPU and processes hold for the whole run', async () => {
    expect(isRoot && onV1('memory') && onV1('cpuacct') && onV1('pids'), 'this host must be root with cgroup v1 controllers').toBe(true);
    const report = describeRunLimits(host);
    expect(report).toMatchObject({ memory: 'cgroup', cpu: 'cgroup', pids: 'cgroup', notes: [] });
    expect(report.cgroup).toMatchObject({ version: 1, mode: 'root', cpuRate: true });
    // One directory per hierarchy that holds one of the controllers.
    expect(report.cgroup?.bases.every((b) => b.endsWith('/forge-sandbox') && existsSync(b))).toBe(true);
    const r = await runSandboxed({ command: ['/bin/true'] });
    expect(r.enforced).toEqual({ memory: 'cgroup', cpu: 'cgroup', pids: 'cgroup' });
    expect(r.usage?.cpuMs).toBeGreaterThanOrEqual(0);
  });

  it('three processes of 400 MB each under a 1 GiB run limit: the run is killed, reason memory', async () => {
    // bytes * n writes every byte: the pages are really used (a calloc'ed buffer would not be).
    const hold = "import time; b = b'x' * (400 << 20); print('held', flush=True); time.sleep(600)";
    const r = await runSandboxed({
      command: [
        '/bin/sh',
        '-c',
        'for i in 1 2 3; do "$0" -I -c "$1" & sleep 0.5; done; wait; echo ESCAPE:all-exited',
        python.interpreter,
        hold,
      ],
      mounts: python.mounts,
      // The wall clock only bounds a run the limit failed to stop: a loaded host can take many
      // seconds to write 1.2 GB, and a timeout would hide what this checks.
      limits: { memoryBytes: 2 ** 30, timeoutMs: scaled(45_000) },
    });
    expect(r.reason, r.stderrTail).toBe('memory');
    expect(r.enforced.memory).toBe('cgroup');
    const held = r.stdout.toString().match(/held/g)?.length ?? 0;
    expect(held, r.stdout.toString()).toBeLessThan(3);
    expect(r.stdout.toString()).not.toContain('ESCAPE');
    // Ended by the limit, not the wall clock: the reason says so (a timeout would be 'timeout').
  });

  it('a run-wide limit is the sum: two processes of 400 MB under 1 GiB run to the end', async () => {
    const hold = "b = b'x' * (400 << 20); print('held', flush=True)";
    const r = await runSandboxed({
      command: ['/bin/sh', '-c', '"$0" -I -c "$1" & "$0" -I -c "$1"; wait', python.interpreter, hold],
      mounts: python.mounts,
      limits: { memoryBytes: 2 ** 30 },
    });
    expect(r.reason, r.stderrTail).toBe('exit');
    expect(r.stdout.toString()).toBe('held\nheld\n');
  });

  it('three busy processes with cpuSeconds 1: killed with reason cpu well before 3 CPU-seconds', async () => {
    const r = await runSandboxed({
      command: ['/bin/sh', '-c', 'for i in 1 2 3; do (while :; do :; done) & done; wait; echo ESCAPE:all-exited'],
      limits: { cpuSeconds: 1, timeoutMs: 15_000 },
    });
    expect(r.reason, r.stderrTail).toBe('cpu');
    expect(r.enforced.cpu).toBe('cgroup');
    expect(r.stdout.toString()).not.toContain('ESCAPE');
    // Polled every 100 ms with at most cpuCores (2) cores at work: about 1.2 s, never 3.
    expect(r.usage?.cpuMs).toBeGreaterThanOrEqual(1000);
    expect(r.usage?.cpuMs).toBeLessThan(2000);
  });

  it('cpuCores 1: three busy processes get one core between them', async () => {
    const r = await runSandboxed({
      command: ['/bin/sh', '-c', 'for i in 1 2 3; do (while :; do :; done) & done; wait'],
      limits: { cpuCores: 1, timeoutMs: 1500 },
    });
    expect(r.reason).toBe('timeout');
    // 1.5 s of wall clock at one core (plus setup), where two cores would give about 3 s.
    expect(r.usage?.cpuMs).toBeLessThan(1900);
  });

  it('a reused cgroup counts only its new run: CPU time, OOM kills and process-limit hits start at zero', async () => {
    const busy = await runSandboxed({ command: ['/bin/sh', '-c', 'while :; do :; done'], limits: { cpuSeconds: 1 } });
    expect(busy.reason).toBe('cpu');
    for (let i = 0; i < 3; i++) {
      const r = await runSandboxed({ command: ['/bin/true'], limits: { cpuSeconds: 1 } });
      expect(r.reason, r.stderrTail).toBe('exit');
      expect(r.processLimitHit).toBe(false);
      expect(r.usage?.cpuMs).toBeLessThan(500);
    }
  });
});

describe('hosts where runs get no cgroup', () => {
  asRoot('a non-root process on a cgroup v1 host: the report says each limit is per process, why, and the fix', async () => {
    expect(isRoot && onV1('memory'), 'this case drops from root to uid 65534 on a cgroup v1 host').toBe(true);
    const { code, out, err } = await nodeAs(
      `const { probe } = await load('probe.ts');
       const { describeRunLimits } = await load('cgroup-find.ts');
       const host = await probe();
       console.log(JSON.stringify({ ok: host.ok, cgroups: host.cgroups ?? null, report: describeRunLimits(host) }));`,
      { wrap: DROP.split(' ') },
    );
    expect(code, err).toBe(0);
    const { cgroups, report } = JSON.parse(out);
    expect(cgroups).toBeNull();
    // Processes: RLIMIT_NPROC in each run's own user namespace, which this kernel counts per namespace.
    expect(report).toMatchObject({ memory: 'rlimit', cpu: 'rlimit', pids: 'userns' });
    expect(report.explain.pids).toMatch(/^the run's own processes and threads, by RLIMIT_NPROC set inside its own user namespace/);
    expect(report.notes).toHaveLength(2);
    expect(report.notes[0]).toMatch(/^memory: limits\.memoryBytes is not enforced.*RLIMIT_AS.*need root.*fix: run forge as root/);
    expect(report.notes[1]).toMatch(/^cpu: limits\.cpuSeconds holds per process only \(RLIMIT_CPU\)/);
  });
});

describe('cgroup v2, against a real cgroup2 mount', () => {
  asRoot(
    'as root in a cgroup namespace: the tree is made under its root, a run joins it, the CPU budget and cgroup.kill end it',
    async () => {
      expect(isRoot, 'this case needs root (it makes a cgroup and a cgroup namespace)').toBe(true);
      const top = testCgroup();
      const mnt = await tempDir('forge-sandbox-cg2-');
      // The child moves into the test's cgroup, then into a new cgroup and mount namespace where
      // a fresh cgroup2 mount shows that cgroup as its root (as a container sees its own).
      const { code, out, err } = await nodeAs(
        `${V2_RUN}
       const found = cg.findRunCgroups({ v2Mount: ${JSON.stringify(mnt)}, root: true });
       console.log(JSON.stringify(await budgetRun(found)));`,
        {
          wrap: [
            '/bin/sh',
            '-c',
            `echo $$ > ${top}/cgroup.procs && exec unshare -C -m /bin/sh -c 'mount -t cgroup2 none ${mnt} && exec "$0" "$@"' "$0" "$@"`,
          ],
        },
      );
      expect(code, err).toBe(0);
      const res = JSON.parse(out);
      expectV2(res, 'root', top);
      // Everything it made is inside the test's cgroup.
      expect(readdirSync(top).filter((n) => !n.includes('.'))).toEqual(['forge-sandbox']);
    },
  );

  asRoot('a non-root process in a delegated subtree: it moves itself into forge-main, runs go under forge-sandbox', async () => {
    expect(isRoot, 'this case needs root to delegate a cgroup to uid 65534').toBe(true);
    const top = testCgroup();
    // What systemd does for Delegate=yes: the directory and its procs, threads and subtree_control files.
    for (const p of [top, ...['cgroup.procs', 'cgroup.threads', 'cgroup.subtree_control'].map((f) => join(top, f))])
      chownSync(p, 65534, 65534);
    const mount = cgroup2Mount();
    const { code, out, err } = await nodeAs(
      `${V2_RUN}
       const found = cg.findRunCgroups({ v2Mount: ${JSON.stringify(mount)}, root: false });
       const self = readFileSync('/proc/self/cgroup', 'utf8');
       console.log(JSON.stringify({ ...(await budgetRun(found)), self }));`,
      { wrap: ['/bin/sh', '-c', `echo $$ > ${top}/cgroup.procs && exec ${DROP} "$0" "$@"`] },
    );
    expect(code, err).toBe(0);
    const res = JSON.parse(out);
    expectV2(res, 'delegated', top);
    expect(res.self).toContain(`0::${top.slice(mount.length)}/forge-main\n`);
    expect(
      readdirSync(top)
        .filter((n) => !n.includes('.'))
        .sort(),
    ).toEqual(['forge-main', 'forge-sandbox']);
  });

  asRoot(
    'real sandboxes of a non-root process in its delegated subtree: each limit the hierarchy offers holds for the run, the rest say why',
    async () => {
      const top = testCgroup();
      for (const p of [top, ...['cgroup.procs', 'cgroup.threads', 'cgroup.subtree_control'].map((f) => join(top, f))])
        chownSync(p, 65534, 65534);
      // As a user's process would: probe() finds the subtree by itself (on a hybrid host too), and
      // runSandboxed runs there, as uid 65534.
      const { code, out, err } = await nodeAs(
        `const { probe } = await load('probe.ts');
       const { runSandboxed } = await load('run.ts');
       const { resolveRuntimes } = await load('runtimes.ts');
       const { describeRunLimits } = await load('cgroup-find.ts');
       const host = await probe();
       const c = host.cgroups;
       const res = { cgroups: c && { version: c.version, mode: c.mode, base: c.base, pids: c.pids, memory: c.memory, cpuRate: c.cpuRate, cpuBudget: c.cpuBudget },
         report: describeRunLimits(host) };
       const cpu = await runSandboxed({ command: ['/bin/sh', '-c', 'for i in 1 2 3; do (while :; do :; done) & done; wait'], limits: { cpuSeconds: 1, cpuCores: 1, timeoutMs: 60000 } });
       res.cpu = { reason: cpu.reason, enforced: cpu.enforced, cpuMs: cpu.usage?.cpuMs };
       const forks = await runSandboxed({ command: ['/bin/sh', '-c', 'i=0; while [ $i -lt 40 ]; do /bin/sleep 5 & i=$((i+1)); done; echo ESCAPE:forked'], limits: { processes: 8, timeoutMs: 60000 } });
       res.forks = { hit: forks.processLimitHit, stdout: forks.stdout.toString(), stderr: forks.stderrTail, pids: forks.enforced.pids };
       if (c?.memory) {
         const py = (await resolveRuntimes()).get('python3');
         const mem = await runSandboxed({ command: [py.interpreter, '-I', '-c', "b = b'x' * (400 << 20); print('ESCAPE:held')"],
           mounts: py.mounts.map((source) => ({ source, mode: 'ro' })), limits: { memoryBytes: 128 << 20, timeoutMs: 60000 } });
         res.memory = { reason: mem.reason, stdout: mem.stdout.toString(), enforced: mem.enforced.memory };
       }
       const { readdirSync, readFileSync } = await import('node:fs');
       if (c?.cpuRate) res.cpuMax = readdirSync(c.base).filter((n) => n.startsWith('run-')).map((n) => readFileSync(c.base + '/' + n + '/cpu.max', 'utf8').trim());
       console.log(JSON.stringify(res));`,
        { wrap: ['/bin/sh', '-c', `echo $$ > ${top}/cgroup.procs && exec ${DROP} "$0" "$@"`] },
      );
      expect(code, err).toBe(0);
      const res = JSON.parse(out);
      const offered = readFileSync(join(top, 'cgroup.controllers'), 'utf8');
      expect(res.cgroups).toMatchObject({ version: 2, mode: 'delegated', base: join(top, 'forge-sandbox'), cpuBudget: true });
      expect(res.cgroups).toMatchObject({
        pids: offered.includes('pids'),
        memory: offered.includes('memory'),
        cpuRate: offered.includes('cpu'),
      });
      // CPU time of the whole run, from the subtree's cpu.stat (there with or without the cpu controller).
      expect(res.cpu).toMatchObject({ reason: 'cpu', enforced: { cpu: 'cgroup' } });
      expect(res.cpu.cpuMs).toBeGreaterThanOrEqual(1000);
      // Processes: pids.max where the hierarchy offers pids, else RLIMIT_NPROC in the run's own namespace.
      expect(res.forks.stdout).not.toContain('ESCAPE');
      expect(res.forks.stderr).toMatch(/fork/i);
      expect(res.forks.pids).toBe(offered.includes('pids') ? 'cgroup' : 'userns');
      expect(res.forks.hit).toBe(offered.includes('pids'));
      if (offered.includes('memory')) expect(res.memory).toMatchObject({ reason: 'memory', stdout: '', enforced: 'cgroup' });
      else
        expect(res.report.explain.memory).toMatch(
          /^per process only.*: no such controller in its cgroup \(v2, in the delegated subtree\)$/,
        );
      if (offered.includes('cpu')) expect(res.cpuMax).toContain('100000 100000');
      else expect(res.report.explain.cpuRate).toBe('not limited: no such controller in its cgroup (v2, in the delegated subtree)');
    },
  );

  asRoot('a process whose cgroup is not delegated to it gets no cgroups, and is told why', async () => {
    expect(isRoot, 'this case drops from root to uid 65534').toBe(true);
    const top = testCgroup(); // owned by root: not delegated to uid 65534
    const mount = cgroup2Mount();
    const { code, out, err } = await nodeAs(
      `const cg = await load('cgroup.ts');
       console.log(JSON.stringify(cg.findRunCgroups({ v2Mount: ${JSON.stringify(mount)}, root: false })));`,
      { wrap: ['/bin/sh', '-c', `echo $$ > ${top}/cgroup.procs && exec ${DROP} "$0" "$@"`] },
    );
    expect(code, err).toBe(0);
    const res = JSON.parse(out);
    expect(res.ok).toBe(false);
    expect(res.why).toMatch(/is not delegated to it \(not writable\): start forge in a delegated cgroup/);
    expect(readdirSync(top).filter((n) => !n.includes('.'))).toEqual([]);
  });
});

/**
 * In the child: takes a run cgroup from `found`, starts a busy shell in it the way a launcher
 * joins (`joinCgroup`), polls the 300 ms CPU budget, kills the run through the cgroup and says
 * what happened.
 */
const V2_RUN = `
  const cg = await load('cgroup.ts');
  const { joinCgroup } = await load('launcher.ts');
  const { spawn } = await import('node:child_process');
  const { readFileSync } = await import('node:fs');
  async function budgetRun(found) {
    if (!found.ok) return { found };
    const c = found.cgroups;
    const run = cg.acquireRunCgroup(c, { processes: 8, memoryBytes: 64 << 20, cpuCores: 1 });
    if (!run) return { found, run: null };
    const child = spawn('/bin/sh', ['-c', joinCgroup(run) + ' && exec /bin/sh -c "while :; do :; done"'], { stdio: 'ignore' });
    // A timeout is reported in 'over' (the run below must still be killed and given back).
    const over = await waitFor('the run to pass its 300 ms CPU budget', () => cg.overRunLimit(run, 300000), { timeoutMs: 10000, intervalMs: 50 })
      .catch((e) => e.message);
    const members = readFileSync(run.procs[0], 'utf8').trim().split('\\n').filter(Boolean).map(Number);
    const cpuMs = Math.round(cg.runCpuUsec(run) / 1000);
    cg.killRunCgroup(run);
    const signal = await new Promise((r) => child.on('exit', (_c, s) => r(s)));
    cg.releaseRunCgroup(run);
    return { c: { version: c.version, mode: c.mode, bases: c.bases, memory: c.memory, cpuRate: c.cpuRate, pids: c.pids, cpuBudget: c.cpuBudget },
      procs: run.procs, member: members.includes(child.pid), over, cpuMs, signal };
  }`;

function expectV2(res: Record<string, unknown> & { c: { bases: string[] } }, mode: string, top: string): void {
  expect(res.c).toMatchObject({ version: 2, mode, cpuBudget: true });
  expect(res.c.bases).toHaveLength(1);
  expect(res.procs).toHaveLength(1); // one v2 directory to join
  expect(res.member).toBe(true);
  expect(res.over).toBe('cpu');
  expect(res.cpuMs as number).toBeGreaterThanOrEqual(300);
  expect(res.cpuMs as number).toBeLessThan(1000);
  expect(res.signal).toBe('SIGKILL');
  // What the controllers a v2 host offers decides the rest; here they are what the top offers.
  const offered = readFileSync(join(top, 'cgroup.controllers'), 'utf8');
  expect(res.c).toMatchObject({ memory: offered.includes('memory'), pids: offered.includes('pids') });
}

function cgroup2Mount(): string {
  const line = mountinfo()
    .split('\n')
    .find((l) => / - cgroup2 /.test(l));
  const path = line?.split(' ')[4];
  if (!path) throw new Error('this test needs a cgroup2 mount (mount -t cgroup2 none /sys/fs/cgroup/unified)');
  return path;
}

/** A fresh cgroup of this test under the cgroup2 mount; it and everything under it go when the test ends. */
function testCgroup(): string {
  const dir = join(cgroup2Mount(), `forge-sandbox-test-${process.pid}-${Math.random().toString(16).slice(2, 8)}`);
  mkdirSync(dir);
  onTestFinished(() => removeTree(dir));
  return dir;
}

function removeTree(dir: string): void {
  if (!existsSync(dir)) return;
  for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) removeTree(join(dir, e.name));
  for (let i = 0; i < 50; i++) {
    try {
      rmdirSync(dir);
      return;
    } catch {
      // its last process is still being reaped
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
    }
  }
}
