/** A tool file cut in half, through the built CLI: listed damaged, refused, reported by doctor, removed by who may. */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { scaled } from '@forge/test-utils';
import { beforeAll, describe, expect, it } from 'vitest';
import { EXAMPLES, requireCliAndSandbox, runCli, scratch } from './helpers.js';

beforeAll(requireCliAndSandbox);

describe('forge tools: a damaged tool file', () => {
  it('is listed as damaged, refused as tool_damaged, reported by doctor, and removed by an operator', {
    timeout: scaled(600_000),
  }, async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    // Generous: doctor starts a sandbox and probes every runtime, on a machine that may be busy.
    const json = async (args: string[]) => {
      const r = await runCli([...args, '--json'], { ...o, timeoutMs: 120_000 });
      expect(r.stdout, `forge ${args.join(' ')} exited ${r.code}: ${r.stderr}`).not.toBe('');
      return { code: r.code, out: JSON.parse(r.stdout) as Record<string, unknown> & unknown[], stderr: r.stderr };
    };
    expect((await runCli(['tools', 'forge', join(EXAMPLES, 'fib')], o)).code).toBe(0);
    const file = join(s.project, '.forge', 'tools', 'fib.json');
    const text = readFileSync(file, 'utf8');
    writeFileSync(file, text.slice(0, Math.floor(text.length / 2)));
    const problem = expect.stringMatching(/^not valid JSON: /);

    const list = await json(['tools', 'list']);
    expect(list.code, list.stderr).toBe(0);
    expect(list.out).toEqual([{ name: 'fib', scope: 'project', damaged: true, where: file, problem }]);
    const human = await runCli(['tools', 'list'], o);
    expect(human.stdout).toMatch(new RegExp(`fib\\s+project\\s+-\\s+DAMAGED\\s+${file.replaceAll('.', '\\.')}: not valid JSON`));

    const show = await json(['tools', 'show', 'fib']);
    expect(show.code, show.stderr).toBe(1);
    expect(show.out).toEqual({
      ok: false,
      kind: 'tool_damaged',
      message: expect.stringContaining(`"fib" (project scope) is damaged: ${file}: not valid JSON`),
    });

    const call = await runCli(['tools', 'call', 'fib', '{"n": 3}'], { ...o, timeoutMs: 120_000 });
    expect(call.code, call.stdout + call.stderr).toBe(1);
    const envelope = JSON.parse(call.stdout) as { ok: boolean; error: { kind: string; message: string } };
    expect(envelope).toMatchObject({ ok: false, error: { kind: 'tool_damaged' } });
    expect(envelope.error.message).toContain(
      `tool "fib" (project scope) is damaged and was not run: its file ${file} cannot be used (not valid JSON`,
    );
    expect(envelope.error.message).toContain('forge tools remove fib --scope project');
    expect(call.stderr).toContain('tool_damaged');

    const doctor = await json(['doctor']);
    expect(doctor.code, doctor.stderr).toBe(1);
    const checks = (doctor.out as unknown as { checks: { name: string; ok: boolean; detail: string; fix?: string }[] }).checks;
    expect(checks.filter((c) => c.name === 'tool files')).toEqual([
      {
        name: 'tool files',
        ok: false,
        detail: expect.stringContaining(`"fib" (project scope) is damaged: ${file}: not valid JSON`),
        fix: expect.stringContaining('forge tools remove fib --scope project'),
      },
    ]);

    // The file no longer says who forged it: outside every namespace, only an operator may remove it.
    const refused = await json(['tools', 'remove', 'fib']);
    expect(refused.code, refused.stderr).toBe(1);
    expect(refused.out).toMatchObject({ ok: false, kind: 'acl.persona_denied' });
    expect(existsSync(file)).toBe(true);
    writeFileSync(join(s.home, 'policy.json'), JSON.stringify({ operator_personas: ['ops'] }));
    const removed = await runCli(['tools', 'remove', 'fib', '--json'], {
      ...o,
      env: { ...s.env, FORGE_PERSONA: 'ops' },
      timeoutMs: 120_000,
    });
    expect(removed.code, removed.stderr).toBe(0);
    expect(JSON.parse(removed.stdout)).toEqual({ ok: true, damaged: { name: 'fib', where: file, problem }, scope: 'project' });
    expect(existsSync(file)).toBe(false);
    expect((await json(['tools', 'list'])).out).toEqual([]);
    expect(checksOf((await json(['doctor'])).out).filter((c) => c.name === 'tool files')).toEqual([
      { name: 'tool files', ok: true, detail: expect.stringContaining('none damaged') },
    ]);

    // Audited like any remove.
    const tail = await runCli(['audit', 'tail', '-n', '50', '--json'], o);
    const entries = JSON.parse(tail.stdout) as { type: string; data: Record<string, unknown> }[];
    // Audited like any remove: the refusal as an ownership denial, the removal as forge.removed.
    expect(entries.filter((e) => e.type === 'acl.persona_denied').map((e) => e.data)).toEqual([
      expect.objectContaining({ ok: false, name: 'fib', action: 'remove', kind: 'acl.persona_denied' }),
    ]);
    expect(entries.filter((e) => e.type === 'forge.removed').map((e) => e.data)).toEqual([
      { ok: true, name: 'fib', persona: 'ops', session: expect.any(String), scope: 'project', damaged: { path: file, reason: problem } },
    ]);
  });
});

describe('forge doctor: damaged stored files', () => {
  it('reports a damaged proposal file and a pins.json it cannot trust, each with its fix', { timeout: scaled(600_000) }, async () => {
    const s = scratch();
    const proposal = s.file('.forge/toolsmith/proposals/p-0123456789abcdef.json', '{"id": "p-0123456789abcdef", "sta');
    mkdirSync(join(s.home, 'gateway'), { recursive: true, mode: 0o700 });
    const pins = join(s.home, 'gateway', 'pins.json');
    writeFileSync(pins, '{"version": 1, "generation": 2, "serv');
    const r = await runCli(['doctor', '--json'], { cwd: s.project, env: s.env, timeoutMs: 120_000 });
    expect(r.stdout, r.stderr).not.toBe('');
    expect(r.code, r.stdout + r.stderr).toBe(1);
    const checks = checksOf(JSON.parse(r.stdout));
    expect(checks.filter((c) => c.name === 'proposal files')).toEqual([
      {
        name: 'proposal files',
        ok: false,
        detail: expect.stringContaining(`${proposal} is damaged: not valid JSON`),
        fix: 'restore it from a copy, or move it away and propose the tool again',
      },
    ]);
    expect(checks.filter((c) => c.name === 'gateway pins')).toEqual([
      {
        name: 'gateway pins',
        ok: false,
        detail: expect.stringContaining(`${pins} does not match the audit log`),
        fix: expect.stringContaining('forge gateway approve <server>'),
      },
    ]);
    expect(checks.find((c) => c.name === 'gateway pins')?.detail).toContain('it is not valid JSON (cut short?)');
    // Nothing was changed by looking.
    expect(readFileSync(pins, 'utf8')).toBe('{"version": 1, "generation": 2, "serv');
  });
});

function checksOf(report: unknown): { name: string; ok: boolean; detail: string; fix?: string }[] {
  return (report as { checks: { name: string; ok: boolean; detail: string; fix?: string }[] }).checks;
}
