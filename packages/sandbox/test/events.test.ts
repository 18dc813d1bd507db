/**
 * The events pipe (`RunOptions.events`): descriptor 3 of the tool is the write end of a pipe this
 * process reads while the tool runs, on every way a run starts (a launcher of its own, a ready
 * launcher, a sandbox built ahead, behind the holder of an output directory, behind the egress
 * relay, as the dropped uid when root); and a run that does not ask for it has no descriptor 3.
 */
import { chmodSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import {
  type CheckedBind,
  checkBind,
  closeBinds,
  discardPrebuilt,
  EVENTS_FD,
  type Mount,
  makeStageDir,
  type RunOptions,
  type RunResult,
  runSandboxed,
  type SandboxProfile,
} from '../src/index.js';
import { builtSoon, pythonRuntime, requireSandbox, tempDir } from './helpers.js';

let python: { interpreter: string; mounts: Mount[] };
beforeAll(async () => {
  await requireSandbox();
  python = await pythonRuntime();
});

function describeRun(r: RunResult): string {
  return `reason=${r.reason} exit=${r.exitCode} signal=${r.signal} prebuilt=${r.prebuilt}\n${r.stdout.toString().slice(0, 2000)}\n${r.stderrTail}`;
}

function mustBind(req: Parameters<typeof checkBind>[0], roots: string[]): CheckedBind {
  const c = checkBind(req, { roots, deny: [] });
  if (!c.ok) throw new Error(c.message);
  onTestFinished(() => closeBinds([c.bind]));
  return c.bind;
}

/** A stage directory for sandboxes built ahead, with what waits there stopped after the test. */
function stageDir(): string {
  const dir = makeStageDir();
  onTestFinished(() => discardPrebuilt(dir));
  return dir;
}

/**
 * A shell tool that lists its descriptors past stdio on stdout (`fds 3 …`), writes `first` to
 * descriptor 3, then waits (up to 10 s) for `/signal/go`, which the test creates only once it has
 * received `first`, and then writes `second` and exits. So `second` arriving proves the first line
 * was handed on while the tool was still running.
 */
const LIVE = `ls -l /proc/self/fd | sed -n 's/.* \\([0-9]*\\) -> \\(.*\\)$/fd \\1 \\2/p'
printf '%s\\n' first >&3
i=0; while [ ! -e /signal/go ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done
[ -e /signal/go ] && printf '%s\\n' second >&3
echo done`;

/** A directory shown as /signal, readable by the sandbox's uid (which is not this process's when it is root). */
async function signalDir(): Promise<string> {
  const dir = await tempDir();
  chmodSync(dir, 0o755);
  return dir;
}

/**
 * Runs LIVE with `extra` profile parts, creating /signal/go once the first chunk has come. The
 * same `signal` directory for runs of one shape (its path is part of a sandbox built ahead).
 */
async function liveRun(
  extra: Partial<SandboxProfile>,
  options: RunOptions = {},
  signal?: string,
): Promise<{ r: RunResult; got: string; goAt: number }> {
  signal ??= await signalDir();
  rmSync(join(signal, 'go'), { force: true });
  let got = '';
  let goAt = -1;
  const r = await runSandboxed(
    {
      command: ['/bin/sh', '-c', LIVE],
      ...extra,
      mounts: [...(extra.mounts ?? []), { source: signal, target: '/signal', mode: 'ro' }],
    },
    {
      ...options,
      events: (chunk) => {
        got += chunk.toString();
        if (goAt < 0 && got.includes('first\n')) {
          goAt = got.length;
          writeFileSync(join(signal, 'go'), '');
        }
      },
    },
  );
  return { r, got, goAt };
}

function expectLive({ r, got, goAt }: { r: RunResult; got: string; goAt: number }): void {
  expect(r.exitCode, describeRun(r)).toBe(0);
  expect(got, describeRun(r)).toBe('first\nsecond\n');
  expect(goAt).toBe('first\n'.length);
  expect(r.eventsBytes).toBe('first\nsecond\n'.length);
  expect(r.stdout.toString()).toContain('done');
}

/**
 * The descriptors past stdio a LIVE run listed, with what each is, but for /dev/null (which covers
 * descriptors the test process inherited) and the listing's own directory.
 */
function listedFds(r: RunResult): string[] {
  return r.stdout
    .toString()
    .split('\n')
    .filter((l) => l.startsWith('fd ') && !l.endsWith(' /dev/null') && !/ \/proc\/\d+\/fd$/.test(l))
    .map((l) => l.slice(3).replace(/\[\d+\]$/, ''))
    .filter((l) => Number(l.split(' ')[0]) > 2);
}

describe('descriptor 3 reaches the tool as a pipe read while it runs', () => {
  it('in a sandbox of its own: each line comes as written, before the tool is done', async () => {
    const run = await liveRun({});
    expectLive(run);
    expect(run.r.prebuilt).toBe(false);
    expect(listedFds(run.r), describeRun(run.r)).toEqual([`${EVENTS_FD} socket:`]);
  });

  it('with binds (as root: staged, and bwrap behind setpriv), its bind and data descriptors never taking 3', async () => {
    const root = await tempDir();
    mkdirSync(join(root, 'in'));
    writeFileSync(join(root, 'in', 'x'), 'X');
    writeFileSync(join(root, 'out.txt'), '');
    const run = await liveRun({
      binds: [mustBind({ path: join(root, 'in') }, [root]), mustBind({ path: join(root, 'out.txt'), mode: 'rw' }, [root])],
    });
    expectLive(run);
    // No bind, seccomp, argument or data descriptor is left, and none took 3.
    expect(listedFds(run.r), describeRun(run.r)).toEqual([`${EVENTS_FD} socket:`]);
  });

  it('behind the holder of an output directory, which copies the output out afterwards', async () => {
    const out = await tempDir();
    const run = await liveRun({ mounts: [{ source: out, target: '/out', mode: 'rw', perRun: true }] });
    expectLive(run);
    expect(run.r.outputs?.[0]?.lost, describeRun(run.r)).toBeUndefined();
    expect(listedFds(run.r), describeRun(run.r)).toEqual([`${EVENTS_FD} socket:`]);
  });

  it('in a sandbox built ahead, and with its holder', async () => {
    const dir = stageDir();
    const out = await tempDir();
    const signal = await signalDir();
    for (const mounts of [[], [{ source: out, target: '/out', mode: 'rw' as const, perRun: true }]]) {
      await liveRun({ mounts }, { prebuild: { stageDir: dir } }, signal); // builds one for the next
      await builtSoon();
      const run = await liveRun({ mounts }, { prebuild: { stageDir: dir } }, signal);
      expect(run.r.prebuilt, describeRun(run.r)).toBe(true);
      expectLive(run);
      expect(listedFds(run.r), describeRun(run.r)).toEqual([`${EVENTS_FD} socket:`]);
    }
  });

  it('behind the egress relay (a run with network)', async () => {
    const run = await liveRun({
      network: { grant: { network: 'allow', loopback: 'deny', allow_domains: [] }, resolver: async () => [] },
    });
    expectLive(run);
    expect(run.r.network).toBeDefined();
    expect(listedFds(run.r), describeRun(run.r)).toEqual([`${EVENTS_FD} socket:`]);
  });
});

describe('a run without events', () => {
  it('has no descriptor 3, in a sandbox of its own, a ready launcher or one built ahead', async () => {
    const dir = stageDir();
    // The shell's own test of /proc/self/fd/3 (no listing that would hold a descriptor itself).
    const profile: SandboxProfile = {
      command: ['/bin/sh', '-c', '[ -e /proc/self/fd/3 ] && echo HAS3 || echo NO3; echo x >&3 && echo WROTE'],
    };
    const runs: RunResult[] = [];
    runs.push(await runSandboxed(profile));
    runs.push(await runSandboxed(profile)); // a ready launcher where runs use cgroups
    await runSandboxed(profile, { prebuild: { stageDir: dir } });
    await builtSoon();
    runs.push(await runSandboxed(profile, { prebuild: { stageDir: dir } }));
    expect(runs[2]?.prebuilt).toBe(true);
    for (const r of runs) {
      expect(r.stdout.toString(), describeRun(r)).toBe('NO3\n');
      expect(r.stderrTail).toMatch(/3: Bad file descriptor/);
      expect(r.eventsBytes).toBeUndefined();
    }
  });
});

describe('a tool and its pipe', () => {
  it('a tool that floods descriptor 3 (64 MiB) never blocks on it, and every byte is handed on', async () => {
    let bytes = 0;
    let chunks = 0;
    const r = await runSandboxed(
      { command: ['/bin/sh', '-c', 'head -c 67108864 /dev/zero >&3; echo done'] },
      {
        events: (chunk) => {
          bytes += chunk.length;
          chunks++;
        },
      },
    );
    expect(r.exitCode, describeRun(r)).toBe(0);
    expect(r.stdout.toString()).toBe('done\n');
    expect(bytes).toBe(64 << 20);
    expect(r.eventsBytes).toBe(64 << 20);
    expect(chunks).toBeGreaterThan(1);
  });

  it('a tool that closes descriptor 3 at once, or never writes to it, runs as without it; reading it gives end-of-file', async () => {
    const got: Buffer[] = [];
    const closed = await runSandboxed({ command: ['/bin/sh', '-c', 'exec 3>&-; echo ran'] }, { events: (c) => got.push(c) });
    expect(closed.exitCode, describeRun(closed)).toBe(0);
    expect(closed.stdout.toString()).toBe('ran\n');
    const read = await runSandboxed(
      { command: [python.interpreter, '-I', '-c', 'import os; print(repr(os.read(3, 10)))'], mounts: python.mounts },
      { events: (c) => got.push(c) },
    );
    expect(read.exitCode, describeRun(read)).toBe(0);
    expect(read.stdout.toString()).toBe("b''\n");
    expect(got).toEqual([]);
    expect(closed.eventsBytes).toBe(0);
  });

  it('a child the tool leaves behind holding descriptor 3 does not keep the run open', async () => {
    // The sandbox's pid namespace ends with the tool: its orphan goes with it, and so does its end of the pipe.
    const r = await runSandboxed({ command: ['/bin/sh', '-c', '(sleep 20; echo late >&3) & echo early >&3'] }, { events: () => {} });
    expect(r.exitCode, describeRun(r)).toBe(0);
    // Only "early": a run kept open by the orphan would have its "late" too.
    expect(r.eventsBytes).toBe('early\n'.length);
  });
});
