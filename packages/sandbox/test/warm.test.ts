/**
 * Warm interpreters (`RunOptions.prebuild.warm`): a Python run served by a sandbox whose
 * interpreter is already running must give what the same run gives in a sandbox built for it
 * (stdout, stderr, exit, what it sees of itself), keep nothing from one run to the next, and be
 * held to its own limits, counted from the run.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { scaled, waitFor } from '@forge/test-utils';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { DEMAND } from '../src/demand.js';
import {
  discardPrebuilt,
  type HostInfo,
  type Mount,
  prebuiltStats,
  probe,
  type RunOptions,
  type RunResult,
  runSandboxed,
  type SandboxProfile,
  sandboxesGone,
} from '../src/index.js';
import { WARM_CPU_SECONDS } from '../src/warm.js';
import { builtSoon, describeRun, expectWarmAsCold, introspect, outcome, pythonRuntime, requireSandbox, stage } from './helpers.js';

let host: HostInfo;
let python: { interpreter: string; mounts: Mount[] };
beforeAll(async () => {
  await requireSandbox();
  host = await probe();
  python = await pythonRuntime();
});

/** A Python tool as forge runs one: its code a per-run file at /forge/tool/main.py, an artifacts directory. */
function tool(root: string, name: string, code: string, extra: Partial<SandboxProfile> = {}): SandboxProfile {
  const dir = join(root, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, 'artifacts'), { recursive: true });
  writeFileSync(join(dir, 'main.py'), code);
  return {
    command: [python.interpreter, '-I', '-B', '/forge/tool/main.py'],
    ...extra,
    env: { PYTHONDONTWRITEBYTECODE: '1', ...extra.env },
    mounts: [
      ...python.mounts,
      { source: join(dir, 'main.py'), target: '/forge/tool/main.py', mode: 'ro', perRun: true },
      { source: join(dir, 'artifacts'), target: '/forge/artifacts', mode: 'rw', perRun: true },
      ...(extra.mounts ?? []),
    ],
  };
}

const WARM = { env: { PYTHONDONTWRITEBYTECODE: '1' } };

/**
 * Runs `profile` warm: a first run of its shape has a warm sandbox built (and is itself served
 * as it may be), the second must take it.
 */
async function warmRun(profile: () => SandboxProfile, stageDir: string, options: RunOptions = {}): Promise<RunResult> {
  // The same shape (an events pipe or not), its events not counted.
  const { stdin: _, events, ...rest } = options;
  await runSandboxed(profile(), { ...rest, ...(events ? { events: () => {} } : {}), prebuild: { stageDir, warm: WARM } });
  await builtSoon();
  const r = await runSandboxed(profile(), { ...options, prebuild: { stageDir, warm: WARM } });
  expect(r.warmup, `this run must have been served warm\n${describeRun(r)}`).toBeDefined();
  return r;
}

/** Tools whose every observable must match cold and warm. */
const CORPUS: Record<string, { code: string; stdin?: string; expect: RegExp }> = {
  'main module, argv, file and path': {
    code: [
      'import sys',
      'print(__name__, __file__, sys.argv, sys.orig_argv[1:])',
      'print(sys.path)',
      'print(sorted(k for k in globals() if not k.startswith("__")))',
      'print(sorted(k for k in globals() if k.startswith("__")))',
      'print(__spec__, __cached__, __doc__, type(__loader__).__name__)',
      'print(open(__file__).read() == open("/forge/tool/main.py").read(), len(open(__file__).read()))',
      'print(open("/proc/self/cmdline", "rb").read().split(b"\\0")[1:])',
      'print(sys.flags.isolated, sys.flags.dont_write_bytecode)',
    ].join('\n'),
    expect: /^__main__ \/forge\/tool\/main\.py \['\/forge\/tool\/main\.py'\]/,
  },
  'stdin, stdout, stderr': {
    code: 'import sys, json\nargs = json.load(sys.stdin)\nprint(json.dumps({"got": args}))\nprint("to stderr", file=sys.stderr)\nprint(sys.stdin.encoding, sys.stdout.encoding)',
    stdin: '{"n": 3, "s": "ü"}',
    expect: /"got": \{"n": 3, "s": "\\u00fc"\}/,
  },
  'environment, descriptors, limits, identity': {
    // RLIMIT_CPU: a warm run's counts from the call (the 'limits' test below).
    code: introspect({ cpuLimit: false }),
    expect: /\('TOOL_VAR', 'a "quoted"\\nvalue \$HOME'\)/,
  },
  'a child process inherits the environment and stdin': {
    code: 'import subprocess\nsubprocess.run(["/bin/sh", "-c", "echo child $TOOL_VAR; cat"], check=True)',
    stdin: 'piped through\n',
    expect: /^child a "quoted" value \$HOME\npiped through\n$/,
  },
  'an uncaught exception: its traceback shows the tool only, exit 1': {
    code: 'def f():\n    raise ValueError("boom")\n\nprint("before", flush=True)\nf()\n',
    expect: /^before\n$/,
  },
  'sys.exit with a code and with a message': {
    code: 'import sys, atexit\natexit.register(lambda: print("atexit ran"))\nprint("x")\nsys.exit(3)',
    expect: /^x\natexit ran\n$/,
  },
  'at exit: a non-daemon thread finishes, atexit runs, an unclosed file is flushed, a finalizer runs': {
    code: [
      'import threading, atexit, os',
      'def late():',
      // Waits for the main thread to have ended (the interpreter's exit marks it so before it joins
      // the others), not for a time.
      '    threading.main_thread().join()',
      '    print("thread done", flush=True)',
      'threading.Thread(target=late).start()',
      'atexit.register(lambda: print("atexit ran"))',
      'out = open("/forge/artifacts/unclosed.txt", "w")',
      'out.write("written, never closed")',
      'class Noisy:',
      '    def __del__(self):',
      '        print("finalized")',
      'keep = Noisy()',
      'print("main done")',
    ].join('\n'),
    expect: /^main done\nthread done\natexit ran\nfinalized\n$/,
  },
  'sys.exit with a code past a byte': {
    code: 'import sys\nprint("x", flush=True)\nsys.exit(int(sys.stdin.read()))',
    stdin: '258',
    expect: /^x\n$/,
  },
  'sys.exit with a negative code': {
    code: 'import sys, atexit\natexit.register(print, "bye")\nsys.exit(-1)',
    expect: /^bye\n$/,
  },
  'sys.exit with True': {
    code: 'import sys\nsys.exit(True)',
    expect: /^$/,
  },
  'sys.exit with a message': {
    code: 'import sys\nsys.exit("bad input")',
    expect: /^$/,
  },
  'a syntax error in the tool': {
    code: 'print("never"\n',
    expect: /^$/,
  },
  'artifacts and events': {
    code: 'import os\nopen("/forge/artifacts/out.txt", "w").write("made")\nos.write(3, b"{\\"progress\\": 1}\\n")\nprint(sorted(os.listdir("/forge/artifacts")))',
    expect: /\['out\.txt'\]/,
  },
  'non-ASCII source with a coding cookie and a BOM-free UTF-8 string': {
    code: '# -*- coding: utf-8 -*-\nprint("grüße", len("grüße"))',
    expect: /^grüße 5\n$/,
  },
};

describe('a warm run', () => {
  it.each(Object.entries(CORPUS))('gives what a cold run gives: %s', async (_name, c) => {
    const { stageDir, root } = await stage();
    const profile = () => tool(root, 'tool', c.code, { env: { TOOL_VAR: 'a "quoted"\nvalue $HOME' } });
    const cold = await expectWarmAsCold(profile, (p, o) => warmRun(p, stageDir, o), join(root, 'tool', 'artifacts'), c.stdin);
    expect(cold.stdout.toString(), describeRun(cold)).toMatch(c.expect);
  });

  it('finds nothing a previous warm run left: module state, files, environment', async () => {
    const { stageDir, root } = await stage();
    const code = [
      'import os, sys, json',
      'print("seen", getattr(json, "forge_mark", None), os.environ.get("LEFT"), os.path.exists("/tmp/left"), "left" in sys.modules)',
      'json.forge_mark = "set"; os.environ["LEFT"] = "1"; open("/tmp/left", "w").write("x")',
      'sys.modules["left"] = sys',
    ].join('\n');
    const first = await warmRun(() => tool(root, 'tool', code), stageDir);
    expect(first.stdout.toString(), describeRun(first)).toBe('seen None None False False\n');
    for (let i = 0; i < 3; i++) {
      await builtSoon();
      const r = await runSandboxed(tool(root, 'tool', code), { prebuild: { stageDir, warm: WARM } });
      expect(r.warmup, describeRun(r)).toBeDefined();
      expect(r.stdout.toString(), describeRun(r)).toBe('seen None None False False\n');
    }
  });

  it("runs the code its run was given, never the loader nor an earlier run's", async () => {
    const { stageDir, root } = await stage();
    await runSandboxed(tool(root, 'tool', 'print("first")'), { prebuild: { stageDir, warm: WARM } });
    for (let i = 0; i < 3; i++) {
      await builtSoon();
      const r = await runSandboxed(tool(root, 'tool', `print("run ${i}")\nprint(len(open(__file__).read()))`), {
        prebuild: { stageDir, warm: WARM },
      });
      expect(r.warmup).toBeDefined();
      expect(r.stdout.toString()).toBe(`run ${i}\n${`print("run ${i}")\nprint(len(open(__file__).read()))`.length}\n`);
    }
  });

  it('is held to its own limits, counted from the run: cpu, wall clock, memory, file size', async () => {
    const { stageDir, root } = await stage();
    const spin = () => tool(root, 'spin', 'while True: pass', { limits: { cpuSeconds: 1 } });
    const spinCold = await runSandboxed(spin());
    const spinWarm = await warmRun(spin, stageDir);
    expect(spinWarm.reason, describeRun(spinWarm)).toBe('cpu');
    // Which of the run's CPU limits fires first (its cgroup's budget, or the process's RLIMIT_CPU) is a race, cold as warm.
    expect(spinWarm.reason).toBe(spinCold.reason);
    // Its RLIMIT_CPU is the run's seconds plus what the warm-up used, rounded up: lowered from the
    // room it was built with (7 + WARM_CPU_SECONDS). The warm-up's CPU time can read as 0 (the
    // kernel charges it by ticks): then the run's seconds alone.
    const rl = () => tool(root, 'rl', 'import resource\nprint(*resource.getrlimit(resource.RLIMIT_CPU))', { limits: { cpuSeconds: 7 } });
    expect((await runSandboxed(rl())).stdout.toString()).toBe('7 8\n');
    const [soft, hard] = (await warmRun(rl, stageDir)).stdout.toString().trim().split(' ').map(Number);
    expect(soft).toBeGreaterThanOrEqual(7);
    expect(soft).toBeLessThan(7 + WARM_CPU_SECONDS);
    expect(hard).toBe((soft as number) + 1);
    const slow = await warmRun(() => tool(root, 'slow', 'import time\ntime.sleep(60)', { limits: { timeoutMs: 500 } }), stageDir);
    expect(slow.reason, describeRun(slow)).toBe('timeout');
    // Python ignores SIGXFSZ: past its file size limit the tool sees EFBIG, warm as cold.
    const big = () =>
      tool(root, 'big', 'open("/forge/artifacts/big", "wb").write(b"x" * 3_000_000)', { limits: { fileSizeBytes: 1 << 20 } });
    const bigCold = await runSandboxed(big());
    const bigWarm = await warmRun(big, stageDir);
    expect(bigCold.stderrTail, describeRun(bigCold)).toContain('OSError: [Errno 27] File too large');
    expect(outcome(bigWarm)).toEqual(outcome(bigCold));
    if (host.cgroups?.memory) {
      const hog = await warmRun(
        () =>
          tool(root, 'hog', 'b = []\nwhile True: b.append(bytearray(1 << 20))', { limits: { memoryBytes: 64 << 20, timeoutMs: 60_000 } }),
        stageDir,
      );
      expect(hog.reason, describeRun(hog)).toBe('memory');
      expect(hog.warmup?.memoryBytes).toBeGreaterThan(0);
    }
  });

  it('says what its warm-up cost; a run that cannot be warm is served as before', async () => {
    const { stageDir, root } = await stage();
    const r = await warmRun(() => tool(root, 'tool', 'print(1)'), stageDir);
    expect(r.warmup?.ms).toBeGreaterThan(0);
    if (host.cgroups?.cpuBudget) expect(r.warmup?.cpuMs).toBeGreaterThanOrEqual(0);
    // A shell script: no loader; a sandbox built ahead still serves it.
    const sh = join(root, 'run.sh');
    writeFileSync(sh, 'echo shell');
    const shell: SandboxProfile = {
      command: ['/bin/sh', '/in/run.sh'],
      mounts: [{ source: sh, target: '/in/run.sh', mode: 'ro', perRun: true }],
    };
    await runSandboxed(shell, { prebuild: { stageDir, warm: WARM } });
    await builtSoon();
    const s = await runSandboxed(shell, { prebuild: { stageDir, warm: WARM } });
    expect(s.stdout.toString()).toBe('shell\n');
    expect(s.prebuilt).toBe(true);
    expect(s.warmup).toBeUndefined();
  });

  it('a run waiting for a sandbox still warming up keeps its process alive until it is answered', async () => {
    const { stageDir, root } = await stage();
    const code = join(root, 'main.py');
    writeFileSync(code, 'print("answered")');
    // Two runs back to back: the second finds the sandbox the first had built still warming up,
    // and nothing else keeps the child process's event loop alive while it waits.
    // The built package, in a plain node process: nothing of a test runner holds its event loop.
    const dist = new URL('../dist/index.js', import.meta.url).href;
    const child = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `
      const module = await import(${JSON.stringify(dist)});
      const profile = {
        command: [${JSON.stringify(python.interpreter)}, '-I', '-B', '/forge/tool/main.py'],
        mounts: [...${JSON.stringify(python.mounts)}, { source: ${JSON.stringify(code)}, target: '/forge/tool/main.py', mode: 'ro', perRun: true }],
      };
      // A preload that takes a while, so the second run comes while the sandbox is warming up.
      const preload = ['asyncio', 'email.mime.multipart', 'http.client', 'xml.etree.ElementTree', 'unittest', 'decimal', 'argparse', 'logging', 'sqlite3', 'statistics', 'csv', 'json'];
      const o = { prebuild: { stageDir: ${JSON.stringify(stageDir)}, warm: { preload } } };
      await module.runSandboxed(profile, o);
      const r = await module.runSandboxed(profile, o);
      console.log(r.stdout.toString().trim(), r.warmup ? 'warm' : 'not warm');
    `,
      ],
      { encoding: 'utf8', timeout: scaled(60_000) },
    );
    const { status: exit, stdout: out, stderr: err } = child;
    expect(exit, err).toBe(0);
    expect(out.trim()).toMatch(/^answered (warm|not warm)$/);
  });

  it("keeps what a preloaded module prints as it is imported out of the run's output", async () => {
    const { stageDir, root } = await stage();
    // `this` prints the Zen of Python when imported.
    const o = { prebuild: { stageDir, warm: { ...WARM, preload: ['this', 'json'] } } };
    await runSandboxed(tool(root, 'tool', 'print("first")'), o);
    await builtSoon();
    const r = await runSandboxed(tool(root, 'tool', 'import sys\nprint("only this", "this" in sys.modules)'), o);
    expect(r.warmup, describeRun(r)).toBeDefined();
    expect(r.stdout.toString()).toBe('only this True\n');
    expect(r.stderrTail).toBe('');
  });

  it('refuses a preload list that is not module names, and a pool budget that is not a number of bytes', async () => {
    const { stageDir, root } = await stage();
    await expect(
      runSandboxed(tool(root, 'tool', 'print(1)'), { prebuild: { stageDir, warm: { preload: ['json', 'os; import evil'] } } }),
    ).rejects.toMatchObject({ code: 'invalid_profile', message: expect.stringContaining('"os; import evil" is not a module name') });
    await expect(
      runSandboxed(tool(root, 'tool', 'print(1)'), { prebuild: { stageDir, warm: { poolBytes: Number.NaN } } }),
    ).rejects.toMatchObject({
      code: 'invalid_profile',
      message: expect.stringContaining('prebuild.warm.poolBytes must be a whole number of bytes'),
    });
  });

  it('leaves the stage as it found it', async () => {
    const { stageDir, root } = await stage();
    await warmRun(() => tool(root, 'tool', 'print(1)'), stageDir);
    await builtSoon();
    await sandboxesGone();
    discardPrebuilt(stageDir);
    expect(readdirSync(stageDir).filter((n) => n.startsWith(`${process.pid}-`))).toEqual([]);
    expect(prebuiltStats().building).toBe(0);
    expect(readFileSync(join(root, 'tool', 'main.py'), 'utf8')).toBe('print(1)');
  });
});

describe('the warm pool', () => {
  /** This test's pool (its stage directory is its own, so is its shape). */
  const poolOf = (stageDir: string) => () => {
    const all = prebuiltStats().pools.filter((p) => p.warm && p.stageDir === stageDir);
    expect(all.length, `one warm pool for ${stageDir}`).toBeLessThanOrEqual(1);
    return all[0];
  };

  it('grows with the runs going at once, keeps one once idle, none once idle for long', async () => {
    const { stageDir, root } = await stage();
    const saved = { ...DEMAND };
    onTestFinished(() => {
      Object.assign(DEMAND, saved);
    });
    const pool = poolOf(stageDir);
    // Three runs at once (their rate, which also grows it, depends on this machine's speed: see
    // demand.test.ts): the pool wants as many.
    const runs = await Promise.all(
      [0, 1, 2].map((i) => runSandboxed(tool(root, `tool-${i}`, `print(${i})`), { prebuild: { stageDir, warm: WARM } })),
    );
    for (const [i, r] of runs.entries()) expect(r.stdout.toString(), describeRun(r)).toBe(`${i}\n`);
    expect(pool()?.wanted, JSON.stringify(pool())).toBeGreaterThanOrEqual(3);
    // Idle times short enough for a test, from the next run on (each run sets the pool's watch).
    // Each step waits for where the pool ends up, never for a state that lasts only a while: a
    // busy machine may run a timer late enough to skip it.
    DEMAND.idleMs = 300;
    DEMAND.idleLongMs = 10 * 60_000;
    await runSandboxed(tool(root, 'tool', 'print("one more")'), { prebuild: { stageDir, warm: WARM } });
    await waitFor(
      () => `the idle pool to keep one (${JSON.stringify(pool())})`,
      () => pool()?.wanted === 1 && (pool()?.ready ?? 0) + (pool()?.building ?? 0) <= 1,
    );
    DEMAND.idleLongMs = 900;
    await runSandboxed(tool(root, 'tool', 'print("and one more")'), { prebuild: { stageDir, warm: WARM } });
    await waitFor(
      () => `the pool idle for long to keep none (${JSON.stringify(pool())})`,
      () => pool()?.wanted === 0 && (pool()?.ready ?? 0) + (pool()?.building ?? 0) === 0,
    );
    // The next run starts as a first one would, and has one warmed for the run after it (kept
    // for as long as usual: a busy machine may take longer than the test's idle times to build it).
    Object.assign(DEMAND, saved);
    const next = await runSandboxed(tool(root, 'tool', 'print("again")'), { prebuild: { stageDir, warm: WARM } });
    expect(next.warmup).toBeUndefined();
    await builtSoon();
    expect(pool()?.ready).toBeGreaterThanOrEqual(1);
  });

  it('warms none past its memory budget: runs start cold, and the stats say why', async () => {
    const { stageDir, root } = await stage();
    const tight = { prebuild: { stageDir, warm: { ...WARM, poolBytes: 1 } } };
    await runSandboxed(tool(root, 'tool', 'print(1)'), tight);
    await builtSoon();
    const cold = await runSandboxed(tool(root, 'tool', 'print(2)'), tight);
    expect(cold.stdout.toString(), describeRun(cold)).toBe('2\n');
    expect(cold.warmup, 'no warm sandbox fits a budget of one byte').toBeUndefined();
    expect(prebuiltStats().held).toMatchObject({ label: expect.stringMatching(/^python3/), budgetBytes: 1 });
    expect(prebuiltStats().held?.neededBytes).toBeGreaterThan(1);
    // The same tool under the default budget warms again.
    const roomy = { prebuild: { stageDir, warm: WARM } };
    await runSandboxed(tool(root, 'tool', 'print(3)'), roomy);
    await builtSoon();
    const warm = await runSandboxed(tool(root, 'tool', 'print(4)'), roomy);
    expect(warm.warmup, describeRun(warm)).toBeDefined();
    expect(prebuiltStats().warmBytes).toBeGreaterThan(0);
    expect(prebuiltStats().warmBudgetBytes).toBeGreaterThan(1);
  });
});
