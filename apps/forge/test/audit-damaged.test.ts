/**
 * One byte changed in a middle entry of forge.log, after its newest checkpoint: forge refuses to
 * append to the broken chain. `forge tools call` and a `forge serve` call are refused
 * (audit_unavailable, naming the entry and the fix), nothing is written, and `forge doctor` says so.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { scaled } from '@forge/test-utils';
import { beforeAll, describe, expect, it } from 'vitest';
import { connect, EXAMPLES, requireCliAndSandbox, runCli, scratch } from './helpers.js';

beforeAll(requireCliAndSandbox);

const lines = (file: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l !== '');

/** Changes one byte of entry `seq` (line `seq` of forge.log, never rotated), same length: the last digit of its time. */
function flipTime(log: string, seq: number): void {
  const all = lines(log);
  const line = all[seq - 1] as string;
  const at = line.indexOf('","type":"') - 2; // `…SS.mmmZ","type"`: the last millisecond digit
  all[seq - 1] = `${line.slice(0, at)}${(Number(line[at]) + 1) % 10}${line.slice(at + 1)}`;
  writeFileSync(log, `${all.join('\n')}\n`);
}

describe('forge over an audit log with a damaged middle entry', () => {
  it('refuses tools call and serve calls naming the entry, appends nothing, and forge doctor reports it', {
    timeout: scaled(300_000),
  }, async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    expect((await runCli(['tools', 'forge', join(EXAMPLES, 'fib')], o)).code).toBe(0);
    const log = join(s.home, 'audit', 'forge.log');
    const checkpoints = `${log}.checkpoints`;
    const first = lines(checkpoints)[0] as string;
    const vouched = (JSON.parse(first) as { entries: number }).entries;
    for (const n of [3, 4, 5]) expect((await runCli(['tools', 'call', 'fib', JSON.stringify({ n })], o)).code).toBe(0);
    // As if those three calls' processes had died before their close checkpoint: the newest
    // checkpoint is the one the forge wrote, and the calls' entries come after it.
    writeFileSync(checkpoints, `${first}\n`);
    const total = lines(log).length;
    const seq = vouched + 2;
    expect(seq).toBeLessThan(total);
    flipTime(log, seq);
    const damaged = readFileSync(log);
    const where = `entry ${seq} (forge.log line ${seq}) hash_mismatch`;

    const verify = await runCli(['audit', 'verify'], o);
    expect(verify.code, verify.stdout + verify.stderr).toBe(1);
    expect(verify.stdout).toContain(where);

    const call = await runCli(['tools', 'call', 'fib', '{"n": 6}'], o);
    expect(call.code, call.stderr).toBe(1);
    const env = JSON.parse(call.stdout) as { ok: boolean; error?: { kind: string; message: string } };
    expect(env).toMatchObject({ ok: false, error: { kind: 'audit_unavailable' } });
    expect(env.error?.message).toContain(`${log}: ${where}`);
    expect(env.error?.message).toContain('forge audit verify');
    expect(readFileSync(log).equals(damaged)).toBe(true);
    expect(readFileSync(checkpoints, 'utf8')).toBe(`${first}\n`);

    const c = await connect(s);
    const served = await c.call('fib', { n: 7 });
    expect(served.result.isError).toBe(true);
    expect(served.env.error?.kind).toBe('audit_unavailable');
    expect(served.env.error?.message).toContain(where);
    await c.client.close();
    expect(readFileSync(log).equals(damaged)).toBe(true);

    // doctor probes the sandbox with a trial run too: slower than the 30 s default on a busy machine.
    const doctor = await runCli(['doctor', '--json'], { ...o, timeoutMs: 120_000 });
    expect(doctor.code, doctor.stdout).toBe(1);
    const check = (JSON.parse(doctor.stdout) as { checks: { name: string; ok: boolean; detail: string; fix?: string }[] }).checks.find(
      (x) => x.name === 'audit chain',
    );
    expect(check).toMatchObject({ ok: false, detail: expect.stringContaining(`${log}: ${where}`) });
    expect(check?.detail).toContain('refuses every call and forge with audit_unavailable');
    expect(check?.fix).toContain('forge audit verify');
    expect(readFileSync(log).equals(damaged)).toBe(true);
  });

  it('a byte changed in an entry a checkpoint already covers (the log as forge leaves it after clean runs): refused too, nothing appended', {
    timeout: scaled(300_000),
  }, async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    expect((await runCli(['tools', 'forge', join(EXAMPLES, 'fib')], o)).code).toBe(0);
    for (const n of [3, 4, 5]) expect((await runCli(['tools', 'call', 'fib', JSON.stringify({ n })], o)).code).toBe(0);
    const log = join(s.home, 'audit', 'forge.log');
    // Every clean run closed with a checkpoint: entry 3 is long covered by one.
    const newest = JSON.parse(lines(`${log}.checkpoints`).at(-1) as string) as { entries: number };
    expect(newest.entries).toBe(lines(log).length);
    flipTime(log, 3);
    const damaged = readFileSync(log);
    const where = 'entry 3 (forge.log line 3) hash_mismatch';
    const call = await runCli(['tools', 'call', 'fib', '{"n": 6}'], o);
    expect(call.code, call.stderr).toBe(1);
    const env = JSON.parse(call.stdout) as { ok: boolean; error?: { kind: string; message: string } };
    expect(env).toMatchObject({ ok: false, error: { kind: 'audit_unavailable' } });
    expect(env.error?.message).toContain(where);
    const c = await connect(s);
    const served = await c.call('fib', { n: 7 });
    expect(served.env.error?.kind).toBe('audit_unavailable');
    await c.client.close();
    expect(readFileSync(log).equals(damaged)).toBe(true);
  });
});
