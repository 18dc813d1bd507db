/**
 * Sandboxes built ahead of time (`RunOptions.prebuild`): a run that takes one must see exactly
 * what a run in a sandbox built for it sees, get its own per-run files and keep its output, be
 * held to its own limits, and leave nothing behind; runs that do not fit build their own.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { waitFor } from '@forge/test-utils';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import {
  checkBind,
  closeBinds,
  discardPrebuilt,
  type HostInfo,
  type Mount,
  prebuiltStats,
  probe,
  type RunOptions,
  type RunResult,
  resolveRuntimes,
  runSandboxed,
  type SandboxProfile,
  sandboxesGone,
} from '../src/index.js';
import { runEnds } from '../src/run.js';
import { builtSoon, descendants, introspect, requireSandbox, runInChild, stage } from './helpers.js';

let host: HostInfo;
beforeAll(async () => {
  await requireSandbox();
  host = await probe();
});

/** Runs `profile` twice with `prebuild`: the first has a sandbox built, the second must take it. */
async function secondRun(profile: SandboxProfile, stageDir: string, options: RunOptions = {}): Promise<RunResult> {
  await runSandboxed({ ...profile, command: ['/bin/true'] }, { prebuild: { stageDir } });
  await builtSoon();
  const r = await runSandboxed(profile, { ...options, prebuild: { stageDir } });
  expect(r.prebuilt, `${r.reason} ${r.exitCode} ${r.stderrTail}`).toBe(true);
  return r;
}

function describeRun(r: RunResult): string {
  return `reason=${r.reason} exit=${r.exitCode} signal=${r.signal}\n${r.stdout.toString().slice(0, 2000)}\n${r.stderrTail}`;
}

describe('a run in a sandbox built ahead', () => {
  it('starts as one built for it does: its arguments as given, a command not in the sandbox refused naming it', async () => {
    const { stageDir } = await stage();
    const args = ['forge_started', 'forge_hold', '$(id)', "it's", 'a;b'];
    const r = await secondRun({ command: ['/bin/echo', ...args] }, stageDir);
    expect(r.stdout.toString(), describeRun(r)).toBe(`${args.join(' ')}\n`);
    expect(r.stderrTail).toBe('');
    await runSandboxed({ command: ['/bin/true'] }, { prebuild: { stageDir } });
    await builtSoon();
    await expect(runSandboxed({ command: ['/usr/bin/forge-test-missing'] }, { prebuild: { stageDir } })).rejects.toMatchObject({
      code: 'sandbox_unavailable',
      message: expect.stringContaining('forge-sandbox: /usr/bin/forge-test-missing is not in the sandbox or not executable there'),
    });
  });

  it('sees what a run in a sandbox built for it sees: environment, descriptors, ids, capabilities, limits, mounts', async () => {
    const { stageDir, root } = await stage();
    const python = (await resolveRuntimes()).get('python3');
    const mounts: Mount[] = python.mounts.map((source) => ({ source, mode: 'ro' }));
    const code = join(root, 'main.py');
    writeFileSync(code, introspect());
    const out = join(root, 'out');
    mkdirSync(out);
    const profile: SandboxProfile = {
      command: [python.interpreter, '-I', '/forge/main.py'],
      env: { TOOL_VAR: 'quotes \' and " and\nnewline $HOME `id`' },
      mounts: [
        ...mounts,
        { source: code, target: '/forge/main.py', mode: 'ro', perRun: true },
        { source: out, target: '/out', mode: 'rw', perRun: true },
      ],
      limits: { openFiles: 77, cpuSeconds: 9, processes: 20, fileSizeBytes: 1 << 20 },
    };
    const fresh = await runSandboxed(profile);
    const built = await secondRun(profile, stageDir);
    expect(fresh.exitCode, describeRun(fresh)).toBe(0);
    expect(built.exitCode, describeRun(built)).toBe(0);
    expect(built.stdout.toString()).toBe(fresh.stdout.toString());
    // The comparison means something: it holds the variable, the limits and both mounts.
    expect(built.stdout.toString()).toContain("('TOOL_VAR', 'quotes \\' and \" and\\nnewline $HOME `id`')");
    expect(built.stdout.toString()).toContain("('RLIMIT_NOFILE', (77, 77))");
    expect(built.stdout.toString()).toContain("('/forge/main.py', 'ro')");
    expect(built.stdout.toString()).toContain("('/out', 'rw')");
    expect(built.stdout.toString()).toMatch(/^fds \[0, 1, 2, 3\]$/m); // 3: the listing's own
    expect(built.stdout.toString()).toContain("('PWD', '/tmp')"); // bwrap's, from --chdir
  });

  it('gets its own per-run file and keeps its own output directory; the stage keeps nothing of it', async () => {
    const { stageDir, root } = await stage();
    const profile = (i: number): SandboxProfile => {
      const code = join(root, `code-${i}.sh`);
      writeFileSync(
        code,
        `echo "code $0 of run ${i}"; cat /in/main.sh | wc -c; echo "run ${i}" > /out/result; mkdir /out/sub; echo deep > /out/sub/f; ln -s /etc/passwd /out/link`,
      );
      const out = join(root, `out-${i}`);
      mkdirSync(out);
      return {
        command: ['/bin/sh', '/in/main.sh'],
        mounts: [
          { source: code, target: '/in/main.sh', mode: 'ro', perRun: true },
          { source: out, target: '/out', mode: 'rw', perRun: true },
        ],
      };
    };
    await runSandboxed(profile(0), { prebuild: { stageDir } });
    for (let i = 1; i <= 3; i++) {
      await builtSoon();
      const r = await runSandboxed(profile(i), { prebuild: { stageDir } });
      expect(r.prebuilt, describeRun(r)).toBe(true);
      const expected = readFileSync(join(root, `code-${i}.sh`)).length;
      expect(r.stdout.toString()).toBe(`code /in/main.sh of run ${i}\n${expected}\n`);
      const out = join(root, `out-${i}`);
      expect(readdirSync(out).sort()).toEqual(['link', 'result', 'sub']);
      expect(readFileSync(join(out, 'result'), 'utf8')).toBe(`run ${i}\n`);
      expect(readFileSync(join(out, 'sub', 'f'), 'utf8')).toBe('deep\n');
    }
    await builtSoon();
    await sandboxesGone();
    // Under the stage: this process's directory, holding only the sandboxes now waiting.
    const mine = readdirSync(stageDir).filter((n) => n.startsWith(`${process.pid}-`));
    expect(mine).toHaveLength(1);
    expect(readdirSync(join(stageDir, mine[0] as string))).toHaveLength(prebuiltStats().ready);
  });

  it('cannot write its per-run read-only file, whose bytes are a copy: the source stays as it was', async () => {
    const { stageDir, root } = await stage();
    const code = join(root, 'main.sh');
    writeFileSync(code, 'echo changed >> /in/main.sh && echo ESCAPE:wrote; chmod 777 /in/main.sh && echo ESCAPE:chmod; echo CONTROL:ran');
    const r = await secondRun(
      { command: ['/bin/sh', '/in/main.sh'], mounts: [{ source: code, target: '/in/main.sh', mode: 'ro', perRun: true }] },
      stageDir,
    );
    expect(r.stdout.toString(), describeRun(r)).toBe('CONTROL:ran\n');
    expect(readFileSync(code, 'utf8')).toMatch(/^echo changed >>/);
    expect(statSync(code).mode & 0o777).not.toBe(0o777);
  });

  it('is held to its own limits: cpu, file size, wall clock, processes, output', async () => {
    const { stageDir, root } = await stage();
    const out = join(root, 'out');
    const fresh = (): Mount[] => {
      rmSync(out, { recursive: true, force: true });
      mkdirSync(out);
      return [{ source: out, target: '/out', mode: 'rw', perRun: true }];
    };
    const cpu = await secondRun(
      { command: ['/bin/sh', '-c', 'while :; do :; done'], mounts: fresh(), limits: { cpuSeconds: 1 } },
      stageDir,
    );
    expect(cpu.reason, describeRun(cpu)).toBe('cpu');
    const fsize = await secondRun(
      { command: ['/bin/sh', '-c', 'head -c 3000000 /dev/zero > /out/big'], mounts: fresh(), limits: { fileSizeBytes: 1 << 20 } },
      stageDir,
    );
    expect(fsize.reason, describeRun(fsize)).toBe('file_size');
    expect(statSync(join(out, 'big')).size).toBeLessThanOrEqual(1 << 20);
    const slow = await secondRun({ command: ['/bin/sleep', '30'], mounts: fresh(), limits: { timeoutMs: 300 } }, stageDir);
    expect(slow.reason).toBe('timeout');
    expect(slow.durationMs).toBeLessThan(5000);
    const forks = await secondRun(
      {
        command: ['/bin/sh', '-c', 'i=0; while [ $i -lt 40 ]; do sleep 5 & i=$((i+1)); done 2>/dev/null; ls /proc | grep -c "^[0-9]"'],
        mounts: fresh(),
        limits: { processes: 8, timeoutMs: 10_000 },
      },
      stageDir,
    );
    expect(Number(forks.stdout.toString().trim()), describeRun(forks)).toBeLessThanOrEqual(8);
    if (typeof host.processLimit === 'object') expect(forks.processLimitHit).toBe(true);
    const loud = await secondRun(
      { command: ['/usr/bin/yes'], mounts: fresh(), limits: { outputBytes: 1000, outputHardBytes: 1 << 20 } },
      stageDir,
    );
    expect(loud.reason).toBe('output_cap');
    expect(loud.stdout.length).toBe(1000);
  });

  it('leaves no process behind, even one that detached itself', async () => {
    const { stageDir, root } = await stage();
    const out = join(root, 'out');
    mkdirSync(out);
    const marker = `29.${String(Math.floor(Math.random() * 1e9)).padStart(9, '1')}`;
    const r = await secondRun(
      {
        command: [
          '/bin/sh',
          '-c',
          `(setsid sh -c 'sleep ${marker}; touch /out/late' </dev/null >/dev/null 2>&1 &); sleep 0.2; echo started`,
        ],
        mounts: [{ source: out, target: '/out', mode: 'rw', perRun: true }],
      },
      stageDir,
    );
    expect(r.stdout.toString(), describeRun(r)).toBe('started\n');
    const left = () =>
      spawnSync('ps', ['-eo', 'args'], { encoding: 'utf8' })
        .stdout.split('\n')
        .filter((l) => l.startsWith(`sleep ${marker}`))
        .join('\n');
    // Well within the detached sleep's own ~29 s: it must be ended, not left to run out.
    await waitFor(
      () => `the detached sleep ${marker} to be gone (left: ${left()})`,
      () => left() === '',
      { timeoutMs: 2000, intervalMs: 50 },
    );
    expect(left()).toBe('');
  });

  it('serves runs in flight together, each with its own file, output and result', async () => {
    const { stageDir, root } = await stage();
    const profile = (i: number): SandboxProfile => {
      const code = join(root, `code-${i}.sh`);
      writeFileSync(code, `sleep 0.1; echo ${i} > /out/n; echo run-${i}`);
      mkdirSync(join(root, `out-${i}`));
      return {
        command: ['/bin/sh', '/in/main.sh'],
        mounts: [
          { source: code, target: '/in/main.sh', mode: 'ro', perRun: true },
          { source: join(root, `out-${i}`), target: '/out', mode: 'rw', perRun: true },
        ],
      };
    };
    // Demand for four at once grows the pool to four.
    await Promise.all([0, 1, 2, 3].map((i) => runSandboxed(profile(i), { prebuild: { stageDir } })));
    await builtSoon();
    expect(prebuiltStats().ready).toBeGreaterThanOrEqual(4);
    const served = prebuiltStats().served;
    const results = await Promise.all([4, 5, 6, 7].map((i) => runSandboxed(profile(i), { prebuild: { stageDir } })));
    expect(results.map((r) => r.stdout.toString())).toEqual([4, 5, 6, 7].map((i) => `run-${i}\n`));
    expect(prebuiltStats().served - served).toBe(4);
    for (const i of [4, 5, 6, 7]) expect(readFileSync(join(root, `out-${i}`, 'n'), 'utf8')).toBe(`${i}\n`);
  });

  it('of another shape (a different /tmp size) is not taken: each shape has its own', async () => {
    const { stageDir } = await stage();
    const tmpSize = { command: ['/bin/sh', '-c', 'df -k /tmp | tail -1 | awk "{print \\$2}"'] };
    const small = await secondRun({ ...tmpSize, limits: { tmpBytes: 4 << 20 } }, stageDir);
    const large = await secondRun({ ...tmpSize, limits: { tmpBytes: 12 << 20 } }, stageDir);
    expect(small.stdout.toString().trim()).toBe(String(4 << 10));
    expect(large.stdout.toString().trim()).toBe(String(12 << 10));
  });
});

describe('a /bin/sh script its waiting shell reads itself (prebuild.shell)', () => {
  // What a script can tell of how it was started, but for $$ (the waiting shell's, when read by it).
  const SCRIPT = [
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell parameter expansion
    'echo "0=$0 #=$# 1=${1-unset}"',
    'for f in forge_hold forge_source forge_runnable forge_readable forge_started; do command -v "$f" >/dev/null && echo "has $f"; done',
    // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansions
    'echo "line=${line-unset} NL=${NL-unset} VAR=$TOOL_VAR"',
    'echo "stdin=$(cat)"',
    'for fd in 3 4 5 6 7 8 9; do [ -e /proc/self/fd/$fd ] && echo "fd $fd is open"; done',
    'ulimit -n; ulimit -t',
    '(set -e; false; echo "set -e ignored")',
    'if tr "\\0" " " </proc/$$/cmdline | grep -q forge_source; then echo read-by-waiting-shell >&2; fi',
    'echo done >&2; exit 7',
  ].join('\n');

  it('runs as under /bin/sh SCRIPT: $0, no arguments, nothing of the waiting shell, its stdin, limits and descriptors, its exit', async () => {
    const { stageDir, root } = await stage();
    const code = join(root, 'hook.sh');
    writeFileSync(code, SCRIPT);
    const profile: SandboxProfile = {
      command: ['/bin/sh', '/forge/hook/main'],
      env: { TOOL_VAR: 'v' },
      mounts: [{ source: code, target: '/forge/hook/main', mode: 'ro', perRun: true }],
      limits: { openFiles: 77, cpuSeconds: 9 },
    };
    const fresh = await runSandboxed(profile, { stdin: 'event' });
    await runSandboxed(profile, { stdin: 'event', prebuild: { stageDir, shell: true } });
    await builtSoon();
    const read = await runSandboxed(profile, { stdin: 'event', prebuild: { stageDir, shell: true } });
    expect(read.prebuilt, describeRun(read)).toBe(true);
    expect(read.exitCode, describeRun(read)).toBe(7);
    expect(read.stdout.toString()).toBe(fresh.stdout.toString());
    // The comparison means something: it holds $0, the variable, stdin and the limits (and no
    // descriptor of the sandbox's own is open: its events pipe, seccomp filter, holder's channel).
    expect(read.stdout.toString()).toBe('0=/forge/hook/main #=0 1=unset\nline=unset NL=unset VAR=v\nstdin=event\n77\n9\n');
    expect(fresh.stderrTail).toBe('done\n');
    // It was read by the waiting shell (whose command line names forge_source), not by a new one.
    expect(read.stderrTail).toBe('read-by-waiting-shell\ndone\n');
  });

  it('a script that is not there is refused, naming it; a command of another form runs as without the option', async () => {
    const { stageDir, root } = await stage();
    const code = join(root, 'hook.sh');
    writeFileSync(code, 'echo ran');
    const at = (target: string, command: string[]): SandboxProfile => ({
      command,
      mounts: [{ source: code, target, mode: 'ro', perRun: true }],
    });
    await runSandboxed(at('/forge/hook/main', ['/bin/sh', '/forge/hook/missing']), { prebuild: { stageDir, shell: true } }).catch(() => {});
    await builtSoon();
    await expect(
      runSandboxed(at('/forge/hook/main', ['/bin/sh', '/forge/hook/missing']), { prebuild: { stageDir, shell: true } }),
    ).rejects.toMatchObject({
      code: 'sandbox_unavailable',
      message: expect.stringContaining('forge-sandbox: /forge/hook/missing is not in the sandbox or not readable there'),
    });
    // Options or more operands: a new shell, as asked.
    const r = await secondRun(at('/forge/hook/main', ['/bin/sh', '-e', '/forge/hook/main']), stageDir);
    expect(r.stdout.toString(), describeRun(r)).toBe('ran\n');
  });
});

describe('a sandbox kept until its caller is done (teardownAfter)', () => {
  it('waits, holding its processes, until the promise settles; at most four wait; sandboxesGone lets them go', async () => {
    const { stageDir } = await stage();
    const profile: SandboxProfile = { command: ['/bin/true'], limits: { tmpBytes: 6 << 20 } };
    await runSandboxed(profile, { prebuild: { stageDir, ready: 2 } });
    await builtSoon();
    let settle = () => {};
    const answered = new Promise<void>((resolve) => {
      settle = resolve;
    });
    const r = await runSandboxed(profile, { prebuild: { stageDir }, teardownAfter: answered });
    expect(r.prebuilt, describeRun(r)).toBe(true);
    // Kept: its launcher has not closed (its teardown is not through), and does not while kept,
    // even once a run of the same shape answered after it, not kept, has been torn down.
    expect(runEnds()).toMatchObject({ kept: 1, tearing: 1 });
    await builtSoon();
    const other = await runSandboxed(profile, { prebuild: { stageDir } });
    expect(other.prebuilt, describeRun(other)).toBe(true);
    await waitFor(
      () => `the run not kept to be torn down (${JSON.stringify(runEnds())})`,
      () => runEnds().tearing === 1,
    );
    expect(runEnds()).toMatchObject({ kept: 1, tearing: 1 });
    settle();
    await waitFor(
      () => `the kept sandbox to go (${JSON.stringify(runEnds())})`,
      () => runEnds().kept === 0 && runEnds().tearing === 0,
    );
    // Never settled: four are kept, the fifth goes at once; sandboxesGone lets all go.
    const never = new Promise<void>(() => {});
    for (let i = 0; i < 5; i++) {
      await builtSoon();
      await runSandboxed(profile, { prebuild: { stageDir }, teardownAfter: never });
    }
    expect(runEnds().kept).toBe(4);
    await sandboxesGone();
    expect(runEnds()).toMatchObject({ kept: 0, tearing: 0 });
  });
});

describe('how many wait', () => {
  it('prebuild.ready keeps that many of a shape waiting, so runs in a row each find one', async () => {
    const { stageDir } = await stage();
    // A shape of its own: a /tmp size no other test uses.
    const profile: SandboxProfile = { command: ['/bin/true'], limits: { tmpBytes: 5 << 20 } };
    const pool = () => prebuiltStats().pools.find((p) => p.stageDir === stageDir && p.label === 'true');
    await runSandboxed(profile, { prebuild: { stageDir, ready: 2 } });
    await waitFor(
      () => `two to wait (${JSON.stringify(pool())})`,
      () => pool()?.ready === 2,
    );
    expect(pool()?.wanted).toBe(2);
    const first = await runSandboxed(profile, { prebuild: { stageDir, ready: 2 } });
    const second = await runSandboxed(profile, { prebuild: { stageDir, ready: 2 } });
    expect([first.prebuilt, second.prebuilt]).toEqual([true, true]);
  });
});

describe('runs that do not fit a sandbox built ahead build their own', () => {
  it('with a bind or a large per-run file; a non-empty output directory or a missing per-run file is refused', async () => {
    const { stageDir, root } = await stage();
    writeFileSync(join(root, 'data.txt'), 'DATA');
    const bind = checkBind({ path: join(root, 'data.txt') }, { roots: [root], deny: [] });
    if (!bind.ok) throw new Error(bind.message);
    onTestFinished(() => closeBinds([bind.bind]));
    const full = join(root, 'full');
    mkdirSync(full);
    writeFileSync(join(full, 'there'), 'x');
    const big = join(root, 'big.sh');
    writeFileSync(big, `echo big\n#${'x'.repeat(1 << 20)}\n`);
    const cases: [string, SandboxProfile][] = [
      ['bind', { command: ['/bin/cat', bind.bind.path], binds: [bind.bind] }],
      ['large ro', { command: ['/bin/sh', '/in/big.sh'], mounts: [{ source: big, target: '/in/big.sh', mode: 'ro', perRun: true }] }],
    ];
    for (const [name, profile] of cases) {
      await runSandboxed(profile, { prebuild: { stageDir } });
      await builtSoon();
      const r = await runSandboxed(profile, { prebuild: { stageDir } });
      expect(r.prebuilt, name).toBe(false);
      expect(r.exitCode, `${name}: ${describeRun(r)}`).toBe(0);
    }
    // The output is copied into a per-run directory when the run ends: one with content is refused.
    const nonEmpty = runSandboxed(
      { command: ['/bin/ls', '/out'], mounts: [{ source: full, target: '/out', mode: 'rw', perRun: true }] },
      { prebuild: { stageDir } },
    );
    await expect(nonEmpty).rejects.toMatchObject({ code: 'invalid_profile', message: expect.stringContaining(`${full} is not empty`) });
    expect(readFileSync(join(full, 'there'), 'utf8')).toBe('x');
    const missing = runSandboxed(
      { command: ['/bin/true'], mounts: [{ source: join(root, 'nope'), target: '/in/x', mode: 'ro', perRun: true }] },
      { prebuild: { stageDir } },
    );
    await expect(missing).rejects.toMatchObject({ code: 'invalid_profile', message: expect.stringContaining(join(root, 'nope')) });
  });
});

describe('output that cannot be copied out', () => {
  it('is reported (output_unmoved), naming the directory', async () => {
    const { stageDir, root } = await stage();
    const out = join(root, 'out');
    const profile = (): SandboxProfile => {
      mkdirSync(out);
      return {
        command: ['/bin/sh', '-c', 'echo kept > /out/result; sleep 0.3'],
        mounts: [{ source: out, target: '/out', mode: 'rw', perRun: true }],
      };
    };
    await runSandboxed(profile(), { prebuild: { stageDir } });
    rmSync(out, { recursive: true });
    await builtSoon();
    const running = runSandboxed(profile(), { prebuild: { stageDir } });
    // The destination stops being a directory while the tool runs: once it wrote its result and sleeps.
    await waitFor("the tool's sleep 0.3 (it wrote its result)", () => processesWith('sleep\u00000.3\u0000').length > 0, { intervalMs: 10 });
    rmSync(out, { recursive: true });
    writeFileSync(out, 'not a directory');
    const err = await running.then(
      () => undefined,
      (e: unknown) => e as { code: string; message: string },
    );
    expect(err?.code).toBe('output_unmoved');
    expect(err?.message).toContain(`could not be copied out of the sandbox into ${out}`);
    expect(readFileSync(out, 'utf8')).toBe('not a directory');
  });
});

/** This process's descendants whose command line contains `needle`. */
function processesWith(needle: string): number[] {
  return descendants().filter((p) => {
    try {
      return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(needle);
    } catch {
      return false; // gone meanwhile
    }
  });
}

describe('waiting sandboxes that are lost', () => {
  it('one killed from outside while waiting is passed over: the run builds its own, the next takes one again', async () => {
    const { stageDir } = await stage();
    const profile: SandboxProfile = { command: ['/bin/echo', 'ran'] };
    await runSandboxed(profile, { prebuild: { stageDir } });
    await builtSoon();
    // The waiting shells inside this process's sandboxes (never another process's).
    const waiting = processesWith('echo >&5 && IFS= read -r line');
    expect(waiting.length).toBeGreaterThan(0);
    for (const pid of waiting) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err; // exited meanwhile
      }
    }
    await waitFor(
      () => `the killed sandboxes to be passed over (${JSON.stringify(prebuiltStats())})`,
      () => prebuiltStats().ready + prebuiltStats().building === 0,
      { intervalMs: 10 },
    );
    const after = await runSandboxed(profile, { prebuild: { stageDir } });
    expect(after.prebuilt).toBe(false);
    expect(after.stdout.toString(), describeRun(after)).toBe('ran\n');
    await builtSoon();
    const again = await runSandboxed(profile, { prebuild: { stageDir } });
    expect(again.prebuilt).toBe(true);
    expect(again.stdout.toString()).toBe('ran\n');
  });

  it('a stage directory removed while they wait: the run builds its own, and the stage is made again', async () => {
    const { stageDir, root } = await stage();
    const profile = (i: number): SandboxProfile => {
      writeFileSync(join(root, `code-${i}.sh`), `echo run ${i}`);
      return {
        command: ['/bin/sh', '/in/main.sh'],
        mounts: [{ source: join(root, `code-${i}.sh`), target: '/in/main.sh', mode: 'ro', perRun: true }],
      };
    };
    await runSandboxed(profile(0), { prebuild: { stageDir } });
    await builtSoon();
    rmSync(stageDir, { recursive: true, force: true });
    const after = await runSandboxed(profile(1), { prebuild: { stageDir } });
    expect(after.prebuilt).toBe(false);
    expect(after.stdout.toString(), describeRun(after)).toBe('run 1\n');
    await builtSoon();
    const again = await runSandboxed(profile(2), { prebuild: { stageDir } });
    expect(again.prebuilt).toBe(true);
    expect(again.stdout.toString(), describeRun(again)).toBe('run 2\n');
    expect(readdirSync(stageDir).filter((n) => n.startsWith(`${process.pid}-`))).toHaveLength(1);
  });
});

describe('waiting sandboxes and the embedding process', () => {
  it("discardPrebuilt stops the waiting ones and removes this process's stage directory", async () => {
    const { stageDir } = await stage();
    await runSandboxed({ command: ['/bin/true'] }, { prebuild: { stageDir } });
    await builtSoon();
    expect(prebuiltStats().ready).toBeGreaterThan(0);
    const before = prebuiltStats().ready;
    discardPrebuilt(stageDir);
    expect(prebuiltStats().ready).toBe(before - 1);
    expect(readdirSync(stageDir).filter((n) => n.startsWith(`${process.pid}-`))).toEqual([]);
  });

  it('a process exits on its own with sandboxes waiting; they die with it and its stage directory goes', async () => {
    const { stageDir } = await stage();
    // Left by a process that died without cleaning up, and one by a live process (this one's parent).
    const dead = spawnSync('/bin/true').pid as number;
    mkdirSync(join(stageDir, `${dead}-0badc0de`, '1'), { recursive: true });
    mkdirSync(join(stageDir, `${process.ppid}-0badc0de`), { recursive: true });
    const { code, out, err } = await runInChild(`
      const { readdirSync, readFileSync } = await import('node:fs');
      const stageDir = ${JSON.stringify(stageDir)};
      for (let i = 0; i < 3; i++) await module.runSandboxed({ command: ['/bin/true'] }, { prebuild: { stageDir } });
      await module.waitFor('the sandboxes built ahead to finish building', () => module.prebuiltStats().building === 0, { intervalMs: 10 });
      // This process's descendants: the waiting sandboxes' processes.
      const parents = new Map();
      for (const p of readdirSync('/proc').filter((n) => /^\\d+$/.test(n))) {
        try {
          const s = readFileSync('/proc/' + p + '/stat', 'utf8');
          parents.set(Number(p), Number(s.slice(s.lastIndexOf(')') + 2).split(' ')[1]));
        } catch {}
      }
      const mine = new Set([process.pid]);
      for (let grew = true; grew; ) {
        grew = false;
        for (const [p, pp] of parents) if (!mine.has(p) && mine.has(pp)) { mine.add(p); grew = true; }
      }
      mine.delete(process.pid);
      console.log(JSON.stringify({ ready: module.prebuiltStats().ready, pids: [...mine], stage: readdirSync(stageDir) }));
    `);
    expect(code, err).toBe(0);
    const seen = JSON.parse(out) as { ready: number; pids: number[]; stage: string[] };
    expect(seen.ready).toBeGreaterThan(0);
    expect(seen.pids.length).toBeGreaterThan(0);
    expect(seen.stage).not.toContain(`${dead}-0badc0de`); // swept: its process is gone
    expect(seen.stage).toContain(`${process.ppid}-0badc0de`); // kept: its process lives
    const left = () => seen.pids.filter((p) => existsSync(`/proc/${p}`));
    await waitFor(
      () => `the waiting sandboxes to die with their process (left: ${left().join(', ')})`,
      () => left().length === 0,
      {
        timeoutMs: 2000,
        intervalMs: 50,
      },
    );
    expect(left()).toEqual([]);
    expect(readdirSync(stageDir).sort()).toEqual([`${process.ppid}-0badc0de`]);
  });
});
