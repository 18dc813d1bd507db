import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { makeStageDir } from '../src/index.js';
import { sweepTempDirs } from '../src/tmp.js';

it('many stage directories share one exit handler (an embedder opening many engines gets no listener-leak warning)', () => {
  const before = process.listenerCount('exit');
  const dirs = Array.from({ length: 20 }, () => makeStageDir());
  try {
    expect(new Set(dirs).size).toBe(20);
    for (const d of dirs) expect(existsSync(d)).toBe(true);
    expect(process.listenerCount('exit') - before).toBeLessThanOrEqual(1);
  } finally {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
});

it("sweeps a live process's directories only when told it is done with them, and never this process's own", () => {
  const make = (pid: number) => mkdtempSync(join(tmpdir(), `forge-sandbox-sweeptest-${pid}-`));
  // The parent (vitest's main process) is alive for the whole test.
  const live = make(process.ppid);
  const own = make(process.pid);
  try {
    sweepTempDirs('sweeptest');
    expect(existsSync(live)).toBe(true);
    sweepTempDirs('sweeptest', () => true);
    expect(existsSync(live)).toBe(false);
    expect(existsSync(own)).toBe(true);
  } finally {
    rmSync(live, { recursive: true, force: true });
    rmSync(own, { recursive: true, force: true });
  }
});
