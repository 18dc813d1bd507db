/** `forge doctor`: the runtimes on PATH (only an executable file is a runtime); how secrets reach runs. */
import { mkdirSync, realpathSync, writeFileSync } from 'node:fs';
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

describe('forge doctor: secrets', () => {
  it('lists which granted secrets enter sandboxes in their environment and which are delivered by placeholder', async () => {
    const s = scratch();
    mkdirSync(join(s.project, '.forge'), { recursive: true });
    writeFileSync(
      join(s.project, '.forge', 'policy.json'),
      JSON.stringify({
        persona_secret_allow: { coder: ['GITHUB_TOKEN', 'DB_PASSWORD'], ops: ['DB_PASSWORD'] },
        secret_delivery: { GITHUB_TOKEN: { inject: { hosts: ['api.github.com'], headers: ['Authorization'], format: 'Bearer {}' } } },
      }),
    );
    const r = await runCli(['doctor', '--json'], { cwd: s.project, env: s.env });
    const report = JSON.parse(r.stdout) as { checks: { name: string; ok: boolean; detail: string }[] };
    expect(report.checks.find((c) => c.name === 'secrets')).toEqual({
      name: 'secrets',
      ok: true,
      detail:
        '2 granted; by placeholder, never in a sandbox: GITHUB_TOKEN; in the sandbox\'s environment: DB_PASSWORD (an HTTP API credential can stay out: policy secret_delivery, "inject")',
    });
  });
});
