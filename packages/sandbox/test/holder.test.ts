/**
 * A run with an output directory runs behind a holder (launcher.ts, `holdRun`), which says when
 * the tool is done and whether anything of it is left. When nothing is, the run is answered at
 * once and the sandbox's teardown goes on after the answer; when something is, the run ends with
 * the sandbox, as before. Either way the answer holds everything the tool wrote, and nothing of
 * the tool is running once it is given. In all three ways a run can start: cold, built ahead, warm.
 * A run a sandbox built ahead serves is behind a holder whether or not it has an output directory.
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { type Mount, type RunOptions, type RunResult, runSandboxed, type SandboxProfile } from '../src/index.js';
import { runEnds } from '../src/run.js';
import { builtSoon, pythonRuntime, requireSandbox, stage, tempDir } from './helpers.js';

let python: { interpreter: string; mounts: Mount[] };
beforeAll(async () => {
  await requireSandbox();
  python = await pythonRuntime();
});

/** A Python tool as forge runs one: its code a per-run file, an output directory (so a holder) unless `outputs` is false. */
function tool(root: string, code: string, outputs = true): SandboxProfile {
  const dir = join(root, 'tool');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, 'artifacts'), { recursive: true });
  writeFileSync(join(dir, 'main.py'), code);
  return {
    command: [python.interpreter, '-I', '-B', '/forge/tool/main.py'],
    env: { PYTHONDONTWRITEBYTECODE: '1' },
    mounts: [
      ...python.mounts,
      { source: join(dir, 'main.py'), target: '/forge/tool/main.py', mode: 'ro', perRun: true },
      ...(outputs ? [{ source: join(dir, 'artifacts'), target: '/forge/artifacts', mode: 'rw' as const, perRun: true }] : []),
    ],
  };
}

const MODES = ['cold', 'built ahead', 'warm'] as const;
type Mode = (typeof MODES)[number];

/**
 * Runs `code` in `mode` (built ahead and warm take a sandbox a previous run of the shape had
 * built), and says whether that run was answered at its holder's word.
 */
async function runIn(
  mode: Mode,
  root: string,
  stageDir: string,
  code: string,
  options: () => RunOptions = () => ({}),
  outputs = true,
): Promise<{ r: RunResult; early: boolean }> {
  const counted = async (run: () => Promise<RunResult>) => {
    const before = runEnds().early;
    const r = await run();
    return { r, early: runEnds().early > before };
  };
  if (mode === 'cold') return counted(() => runSandboxed(tool(root, code, outputs), options()));
  const prebuild = { stageDir, ...(mode === 'warm' ? { warm: { env: { PYTHONDONTWRITEBYTECODE: '1' } } } : {}) };
  const served = (r: RunResult) => r.prebuilt && (mode === 'built ahead' || r.warmup !== undefined);
  await builtSoon();
  const first = await counted(() => runSandboxed(tool(root, code, outputs), { ...options(), prebuild }));
  if (served(first.r)) return first;
  // The shape's first run: it had one built for the next, which serves this one's repeat.
  await builtSoon();
  const again = await counted(() => runSandboxed(tool(root, code, outputs), { ...options(), prebuild }));
  expect(served(again.r), `this run must have been served ${mode}`).toBe(true);
  return again;
}

const describeRun = (r: RunResult) => `reason=${r.reason} exit=${r.exitCode} signal=${r.signal}\n--- stderr\n${r.stderrTail}`;

/** Host processes whose command line is exactly `argv`. */
function processesRunning(argv: readonly string[]): number[] {
  const want = `${argv.join('\0')}\0`;
  const found: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      if (readFileSync(`/proc/${p}/cmdline`, 'utf8') === want) found.push(Number(p));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

describe.each(MODES)('a run behind a holder, %s', (mode) => {
  it.each([0, 60_000, 1_000_000])(
    "is answered at the holder's word with everything the tool wrote just before it exited (%i bytes of stdout, stderr, events)",
    async (bytes) => {
      const { stageDir, root } = await stage();
      const code = [
        'import os, sys',
        `sys.stdout.write("x" * ${bytes} + "end\\n")`,
        'sys.stderr.write("e" * 3000 + "last\\n")',
        'open("/forge/artifacts/out.txt", "w").write("made")',
        'os.write(3, b"{\\"n\\": 1}\\n" * 500)',
      ].join('\n');
      for (let i = 0; i < 5; i++) {
        let events: Buffer[] = [];
        const { r, early } = await runIn(mode, root, stageDir, code, () => {
          const mine: Buffer[] = [];
          events = mine;
          return { events: (c) => mine.push(c) };
        });
        expect(r.reason, describeRun(r)).toBe('exit');
        expect(r.exitCode, describeRun(r)).toBe(0);
        expect(r.stdoutBytes).toBe(bytes + 4);
        expect(r.stdout.subarray(-4).toString()).toBe('end\n');
        expect(r.stderrTail.endsWith(`${'e'.repeat(100)}last\n`), describeRun(r)).toBe(true);
        expect(Buffer.concat(events).toString()).toBe('{"n": 1}\n'.repeat(500));
        expect(r.eventsBytes).toBe(4500);
        expect(r.outputs?.[0]).toMatchObject({ path: join(root, 'tool', 'artifacts'), files: 1 });
        expect(readFileSync(join(root, 'tool', 'artifacts', 'out.txt'), 'utf8')).toBe('made');
        expect(early, 'the run was answered before its sandbox went').toBe(true);
      }
    },
  );

  it("a tool that leaves a process behind: it is killed before the answer, which then comes at the holder's word", async () => {
    const { stageDir, root } = await stage();
    const tag = `9${Date.now() % 1000}.${Math.floor(Math.random() * 1e6)}`;
    const code = [
      'import subprocess',
      `subprocess.Popen(["/bin/sleep", "${tag}"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)`,
      'print("left one")',
    ].join('\n');
    const { r, early } = await runIn(mode, root, stageDir, code);
    // Looked at at once, without waiting: the holder had killed it.
    const left = processesRunning(['/bin/sleep', tag]);
    expect(r.stdout.toString(), describeRun(r)).toBe('left one\n');
    expect(r.exitCode).toBe(0);
    expect(left).toEqual([]);
    expect(early, 'the run was answered before its sandbox went').toBe(true);
  });
});

describe('a run without an output directory', () => {
  it.each(['built ahead', 'warm'] as const)(
    'served %s, runs behind its holder all the same: answered at its word, its exit status and signal as the tool ended',
    async (mode) => {
      const { stageDir, root } = await stage();
      const exited = await runIn(mode, root, stageDir, 'import sys\nprint("out")\nsys.exit(3)', undefined, false);
      expect(exited.r.stdout.toString(), describeRun(exited.r)).toBe('out\n');
      expect(exited.r).toMatchObject({ reason: 'exit', exitCode: 3, signal: null });
      expect(exited.r.outputs).toBeUndefined();
      expect(exited.early, 'the run was answered before its sandbox went').toBe(true);
      const killed = await runIn(mode, root, stageDir, 'import os\nos.kill(os.getpid(), 9)', undefined, false);
      expect(killed.r, describeRun(killed.r)).toMatchObject({ reason: 'signal', exitCode: null, signal: 'SIGKILL' });
      expect(killed.early).toBe(true);
    },
  );

  it('run cold, ends with its sandbox (no holder)', async () => {
    const { stageDir, root } = await stage();
    const { r, early } = await runIn('cold', root, stageDir, 'print("out")', undefined, false);
    expect(r.stdout.toString(), describeRun(r)).toBe('out\n');
    expect(r.outputs).toBeUndefined();
    expect(early).toBe(false);
  });
});

describe('runs behind holders, many at once', () => {
  it('each is answered with everything its tool wrote, however the event loop orders their pipes', async () => {
    const root = await tempDir();
    const N = 40;
    const profile = (i: number): SandboxProfile => {
      const out = join(root, `out-${i}`);
      mkdirSync(out);
      return {
        command: ['/bin/sh', '-c', `head -c 20000 /dev/zero | tr '\\0' x; printf ' %s\\n' ${i}; printf 'err %s\\n' ${i} >&2`],
        mounts: [{ source: out, target: '/out', mode: 'rw', perRun: true }],
      };
    };
    const runs = await Promise.all(Array.from({ length: N }, (_, i) => runSandboxed(profile(i))));
    runs.forEach((r, i) => {
      expect(r.reason, describeRun(r)).toBe('exit');
      expect(r.stdoutBytes, `run ${i}`).toBe(20_000 + ` ${i}\n`.length);
      expect(r.stdout.subarray(20_000).toString(), `run ${i}`).toBe(` ${i}\n`);
      expect(r.stderrTail, `run ${i}`).toBe(`err ${i}\n`);
    });
  });
});
