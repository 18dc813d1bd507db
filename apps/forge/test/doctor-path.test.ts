/** `forge doctor` and the runtimes on PATH: only an executable file is a runtime. */
import { mkdirSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli, scratch } from './helpers.js';

describe('forge doctor: runtimes on PATH', () => {
  it('passes over a directory named bash that comes before the real bash on PATH', async () => {
    const s = scratch();
    const decoy = join(s.root, 'decoy');
    mkdirSync(join(decoy, 'bash'), { recursive: true });
    const r = await runCli(['doctor', '--json'], { cwd: s.project, env: { ...s.env, PATH: `${decoy}:${s.env.PATH}` } });
    const report = JSON.parse(r.stdout) as {
      runtimes: { name: string; version: string; interpreter: string }[];
      checks: { name: string; ok: boolean; detail: string }[];
    };
    const bash = report.runtimes.find((x) => x.name === 'bash');
    expect(bash?.interpreter).not.toContain(decoy);
    expect(bash?.version).toMatch(/^\d+\.\d+/);
    expect(realpathSync(bash?.interpreter ?? '')).toBe(bash?.interpreter);
    expect(report.checks.find((c) => c.name === 'runtime bash')).toMatchObject({ ok: true });
    expect(r.stdout).not.toContain(decoy);
  });
});
