/**
 * Launchers started ahead of need (hosts where runs join a pids cgroup, that is as root): a run
 * that takes one must be exactly as confined as one that starts its own, and waiting launchers
 * must never keep the embedding process alive or outlive it.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { waitFor } from '@forge/test-utils';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { type CheckedBind, checkBind, closeBinds, type HostInfo, probe, runSandboxed } from '../src/index.js';
import { controlLine, launcherStats, shellQuote } from '../src/launcher.js';
import { requireSandbox, runInChild, tempDir } from './helpers.js';

let host: HostInfo;
beforeAll(async () => {
  await requireSandbox();
  host = await probe();
});
const usesCgroups = () => typeof host.processLimit === 'object';

function mustBind(req: Parameters<typeof checkBind>[0], roots: string[]): CheckedBind {
  const c = checkBind(req, { roots, deny: [] });
  if (!c.ok) throw new Error(c.message);
  onTestFinished(() => closeBinds([c.bind]));
  return c.bind;
}

/**
 * Waits until a launcher is ready (they are started right after a run takes one), and says how
 * many are. Only where runs use cgroups: elsewhere none is ever started ahead (launch() schedules
 * no refill for a run without cgroups), so there is nothing to wait for.
 */
async function readySoon(): Promise<number> {
  if (!usesCgroups()) return launcherStats().ready;
  return waitFor('a launcher started ahead to be ready', () => launcherStats().ready > 0 && launcherStats().ready, { intervalMs: 10 });
}

describe('shell quoting of the control line', () => {
  it('keeps every byte of an argument, quotes and newlines included', () => {
    const args = ["it's", 'two\nlines', '$HOME `id` "x"', '', '\\n;&|'];
    const line = controlLine([], ['/bin/printf', '%s\\0', ...args]);
    expect(line).not.toContain('\n'); // one line: the ready launcher reads exactly one
    const out = execFileSync('/bin/sh', ['-c', `NL='\n'; ${line}`]);
    expect(out.toString().split('\0').slice(0, -1)).toEqual(args);
    expect(shellQuote("a'b")).toBe("'a'\\''b'");
  });
});

describe('runs that take a ready launcher', () => {
  it('start warm after the first run (as root), with binds, limits and stdin as a fresh launcher has them', async () => {
    const root = await tempDir();
    mkdirSync(join(root, 'in'));
    writeFileSync(join(root, 'in', 'data.txt'), 'INPUT');
    writeFileSync(join(root, 'out.txt'), '');
    await runSandboxed({ command: ['/bin/true'] });
    const before = launcherStats();
    if (usesCgroups()) expect(await readySoon()).toBeGreaterThan(0);
    for (let i = 0; i < 3; i++) {
      const inDir = mustBind({ path: join(root, 'in') }, [root]);
      const outFile = mustBind({ path: join(root, 'out.txt'), mode: 'rw' }, [root]);
      const r = await runSandboxed(
        {
          command: [
            '/bin/sh',
            '-c',
            'cat "$0/data.txt"; read -r x; echo " $x $(ulimit -n)"; echo "run $1" >> "$2"',
            inDir.path,
            String(i),
            outFile.path,
          ],
          binds: [inDir, outFile],
          limits: { openFiles: 77 },
        },
        { stdin: `stdin-${i}\n` },
      );
      expect(r.reason, r.stderrTail).toBe('exit');
      expect(r.exitCode, r.stderrTail).toBe(0);
      expect(r.stdout.toString()).toBe(`INPUT stdin-${i} 77\n`);
      await readySoon();
    }
    expect(readFileSync(join(root, 'out.txt'), 'utf8')).toBe('run 0\nrun 1\nrun 2\n');
    const after = launcherStats();
    if (usesCgroups()) {
      expect(after.warmStarts - before.warmStarts).toBe(3);
    } else {
      // Without cgroups nothing is gained by starting early, so nothing is.
      expect(after.warmStarts).toBe(0);
      expect(after.ready).toBe(0);
    }
  });

  it('hold the run to its own process limit (a fork loop hits processes 8)', async () => {
    await runSandboxed({ command: ['/bin/true'] });
    await readySoon();
    const before = launcherStats().warmStarts;
    const r = await runSandboxed({
      command: ['/bin/sh', '-c', 'i=0; while [ $i -lt 40 ]; do sleep 5 & i=$((i+1)); done 2>/dev/null; ls /proc | grep -c "^[0-9]"'],
      limits: { processes: 8, timeoutMs: 10_000 },
    });
    expect(Number(r.stdout.toString().trim()), r.stderrTail).toBeLessThanOrEqual(8);
    if (usesCgroups()) {
      expect(launcherStats().warmStarts).toBe(before + 1);
      expect(r.processLimitHit).toBe(true);
    }
  });

  it('serve runs in flight together, each with its own output', async () => {
    const results = await Promise.all(Array.from({ length: 6 }, (_, i) => runSandboxed({ command: ['/bin/sh', '-c', `echo run-${i}`] })));
    expect(results.map((r) => r.stdout.toString())).toEqual(Array.from({ length: 6 }, (_, i) => `run-${i}\n`));
  });
});

describe('waiting launchers and the embedding process', () => {
  it('a process that ran sandboxes exits on its own, and its waiting launchers exit with it', async () => {
    // A waiting launcher that held the event loop would keep the child from closing until the
    // test's own timeout.
    const {
      code,
      out,
      err,
      child: p,
    } = await runInChild(
      `for (let i = 0; i < 3; i++) {
        const r = await module.runSandboxed({ command: ['/bin/echo', 'ok' + i] });
        process.stdout.write(r.stdout);
        // Where runs use cgroups, a launcher is started ahead after each run: one waits ready.
        if (${usesCgroups()}) await module.waitFor('a launcher started ahead to be ready', () => module.launcherStats().ready > 0);
      }`,
    );
    expect(code, err).toBe(0);
    expect(out).toBe('ok0\nok1\nok2\n');
    const mine = () =>
      execFileSync('ps', ['-eo', 'pid,args'], { encoding: 'utf8' })
        .split('\n')
        .filter((l) => l.includes(`/run-${p.pid}-`));
    await waitFor(
      () => `the child's launchers to exit with it (left: ${mine().join('; ')})`,
      () => mine().length === 0,
      { timeoutMs: 2000, intervalMs: 50 },
    );
    expect(mine()).toEqual([]);
  });
});

describe('a kill at any moment of start-up', () => {
  it('ends the run at once, even while bwrap is still setting up (60 aborts at random moments)', async () => {
    // Killing only the launcher's process group while bwrap sets up could leave the sandbox's first
    // process without its parent-death signal, in a session of its own: the run's cgroup (as root)
    // is killed too, and without one bwrap's children are (kill-tree.ts). A missed kill leaves the
    // 600 s sleep running and the run unanswered: the test's own time limit fails it.
    for (let i = 0; i < 60; i++) {
      const ac = new AbortController();
      const run = runSandboxed({ command: ['/bin/sh', '-c', 'sleep 600'], limits: { timeoutMs: 900_000 } }, { signal: ac.signal });
      setTimeout(() => ac.abort(), Math.random() * 12);
      const r = await run;
      expect(r.reason, `abort ${i} did not end the run`).toBe('signal');
    }
  });
});
