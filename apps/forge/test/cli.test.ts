import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { EXAMPLES, requireCliAndSandbox, runCli, scratch } from './helpers.js';

beforeAll(requireCliAndSandbox);

describe('forge (commands)', () => {
  it('--version, --help, and usage errors exit 2 naming what was wrong', async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    const v = await runCli(['--version'], o);
    expect(v.code, v.stdout + v.stderr).toBe(0);
    expect(v.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
    expect(JSON.parse((await runCli(['--version', '--json'], o)).stdout)).toHaveProperty('version');
    const help = await runCli(['--help'], o);
    expect(help.code, help.stdout + help.stderr).toBe(0);
    for (const w of ['serve', 'tools call', 'audit verify', 'policy check', 'doctor', 'demo']) expect(help.stdout).toContain(w);
    const callHelp = await runCli(['tools', 'call', '--help'], o);
    expect(callHelp.code, callHelp.stdout + callHelp.stderr).toBe(0);
    expect(callHelp.stdout).toContain('usage: forge tools call <name> [<json>|-]');

    const cases: [string[], RegExp][] = [
      [['nonsense'], /unknown command "nonsense"/],
      [['tools', 'frobnicate'], /unknown command "forge tools frobnicate"/],
      [['tools', 'call'], /missing argument <name>[\s\S]*usage: forge tools call/],
      [['tools', 'list', '--bogus'], /unknown option --bogus[\s\S]*usage: forge tools list/],
      [['tools', 'list', '--scope', 'galaxy'], /--scope must be one of/],
      [['tools', 'call', 'fib', '{not json'], /the input is not valid JSON/],
      [['serve', '--http', 'nope'], /--http expects \[host:\]port/],
      [['serve', '--token', 'abc=ann'], /--token applies to --http only/],
      [
        ['serve', '--http', '127.0.0.1:0', '--token', 'a-long-enough-token-0123456789=ann', '--audit-reader', 'mon'],
        /--audit-reader mon: no --token serves persona "mon"/,
      ],
    ];
    for (const [args, re] of cases) {
      const r = await runCli(args, o);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr, args.join(' ')).toMatch(re);
    }
  });

  it('tools forge / list / show, with --json and exit codes', async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    const json = async (args: string[], input?: string) => {
      const r = await runCli([...args, '--json'], { ...o, ...(input !== undefined ? { input } : {}) });
      return { code: r.code, out: JSON.parse(r.stdout) as Record<string, unknown> & unknown[], stderr: r.stderr };
    };

    const made = await json(['tools', 'forge', join(EXAMPLES, 'fib')]);
    expect(made.code, made.stderr).toBe(0);
    expect(made.out).toMatchObject({ ok: true, tool: { name: 'fib', version: 1 }, scope: 'project' });
    const again = await json(['tools', 'forge', join(EXAMPLES, 'fib')]);
    expect(again.code, again.stderr).toBe(1);
    expect(again.out).toMatchObject({ ok: false, kind: 'name_taken' });
    const spec = JSON.parse(readFileSync(join(EXAMPLES, 'word_count', 'tool.json'), 'utf8'));
    spec.impl = readFileSync(join(EXAMPLES, 'word_count', 'main.js'), 'utf8');
    const fromStdin = await json(['tools', 'forge', '-'], JSON.stringify(spec));
    expect(fromStdin.out).toMatchObject({ ok: true, tool: { name: 'word_count' } });

    const list = await json(['tools', 'list']);
    expect(list.code, list.stderr).toBe(0);
    expect((list.out as unknown as { name: string }[]).map((t) => t.name).sort()).toEqual(['fib', 'word_count']);
    const human = await runCli(['tools', 'list'], o);
    expect(human.stdout).toMatch(/fib\s+project\s+v1\s+python3/);

    const show = await json(['tools', 'show', 'fib']);
    expect(show.out).toMatchObject({ name: 'fib', scope: 'project', runtime: 'python3' });
    expect((await runCli(['tools', 'show', 'nope'], o)).code).toBe(1);
  });

  it('tools call / promote / remove, with --json and exit codes', async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    const json = async (args: string[], input?: string) => {
      const r = await runCli([...args, '--json'], { ...o, ...(input !== undefined ? { input } : {}) });
      return { code: r.code, out: JSON.parse(r.stdout) as Record<string, unknown> & unknown[], stderr: r.stderr };
    };
    expect((await runCli(['tools', 'forge', join(EXAMPLES, 'fib')], o)).code).toBe(0);
    const call = await json(['tools', 'call', 'fib', '{"n": 12}']);
    expect(call.code, call.stderr).toBe(0);
    expect(call.out).toMatchObject({ ok: true, data: { n: 12, fib: '144' }, meta: { cache: 'miss' } });
    const fromStdinCall = await json(['tools', 'call', 'fib', '-'], '{"n": 12}');
    expect(fromStdinCall.out).toMatchObject({ ok: true, meta: { cache: 'hit' } });
    const refused = await runCli(['tools', 'call', 'fib', '{"n": -1}'], o);
    expect(refused.code, refused.stdout + refused.stderr).toBe(1);
    expect(JSON.parse(refused.stdout)).toMatchObject({ ok: false, error: { kind: 'validation_failed' } }); // the envelope is still printed
    expect(refused.stderr).toContain('validation_failed');

    const promoted = await json(['tools', 'promote', 'fib']);
    expect(promoted.out).toMatchObject({ ok: true, outcome: 'created' });
    expect((await json(['tools', 'list', '--scope', 'user'])).out).toMatchObject([{ name: 'fib', scope: 'user' }]);
    const removed = await json(['tools', 'remove', 'fib', '--scope', 'project']);
    expect(removed.out).toMatchObject({ ok: true, scope: 'project' });
    expect((await json(['tools', 'show', 'fib'])).out).toMatchObject({ scope: 'user' });
    expect((await json(['tools', 'remove', 'nope'])).code).toBe(1);
  });

  it('audit verify passes, then names the entry a one-byte edit broke; audit tail prints entries', async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    await runCli(['tools', 'forge', join(EXAMPLES, 'fib')], o);
    await runCli(['tools', 'call', 'fib', '{"n": 3}'], o);
    const ok = await runCli(['audit', 'verify', '--json'], o);
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    const v = JSON.parse(ok.stdout);
    expect(v).toMatchObject({ ok: true });
    expect(v.entries).toBeGreaterThanOrEqual(2);
    const tail = await runCli(['audit', 'tail', '--json', '-n', '5'], o);
    expect(tail.code, tail.stdout + tail.stderr).toBe(0);
    const entries = JSON.parse(tail.stdout) as { seq: number; type: string }[];
    expect(entries.map((e) => e.type)).toContain('forge.called');

    const log = join(s.home, 'audit', 'forge.log');
    const lines = readFileSync(log, 'utf8').split('\n');
    const i = lines.findIndex((l) => l.includes('"forge.called"'));
    lines[i] = (lines[i] as string).replace('"fib"', '"fob"');
    writeFileSync(log, lines.join('\n'));
    const bad = await runCli(['audit', 'verify'], o);
    expect(bad.code, bad.stdout + bad.stderr).toBe(1);
    expect(bad.stdout).toMatch(new RegExp(`entry ${i + 1} \\(forge\\.log line ${i + 1}\\) hash_mismatch`));
    const badJson = JSON.parse((await runCli(['audit', 'verify', '--json'], o)).stdout);
    expect(badJson.first_bad).toMatchObject({ seq: i + 1, reason: 'hash_mismatch' });
  });

  it('policy check: file:line:col for a broken file, the effective policy for good ones', async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    writeFileSync(join(s.home, 'policy.json'), JSON.stringify({ forbidden_tool_names: ['deploy_*'] }));
    const good = await runCli(['policy', 'check', '--json'], o);
    expect(good.code, good.stdout + good.stderr).toBe(0);
    const report = JSON.parse(good.stdout);
    expect(report.effective.forbidden_tool_names).toEqual(['forge_*', 'deploy_*']);
    expect(report.files.map((f: { role: string; status: string }) => `${f.role}:${f.status}`)).toEqual([
      'user:ok',
      'workspace:absent',
      'rules:absent',
    ]);

    const broken = join(s.project, '.forge', 'policy.json');
    writeFileSync(broken, '{\n  "breakers": {\n    "per_tool_rpm": "30"\n  }\n}\n');
    const bad = await runCli(['policy', 'check'], o);
    expect(bad.code, bad.stdout + bad.stderr).toBe(1);
    expect(bad.stdout).toMatch(new RegExp(`${broken.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:3:\\d+: breakers.per_tool_rpm`));

    const rules = s.file('my.rules', 'allow coder_t tool:fib execute\nallow coder_t tool:fib exec\n');
    const badRules = await runCli(['policy', 'check', rules], o);
    expect(badRules.code, badRules.stdout + badRules.stderr).toBe(1);
    expect(badRules.stdout).toContain(`${rules}:2: unknown permission "exec"`);
    expect((await runCli(['policy', 'check', join(s.root, 'missing.json')], o)).code).toBe(2);
  });

  it('doctor reports the sandbox, runtimes and vault, with a fix for each problem', async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    const ok = await runCli(['doctor', '--json'], o);
    expect(ok.code, ok.stdout).toBe(0);
    const r = JSON.parse(ok.stdout);
    expect(r.ok).toBe(true);
    expect(r.checks.find((c: { name: string }) => c.name === 'sandbox')).toMatchObject({ ok: true });
    expect(r.runtimes.map((x: { name: string }) => x.name)).toEqual(expect.arrayContaining(['python3', 'node', 'bash']));
    // Who the tool runs as on the host, and how each limit holds.
    const root = process.getuid?.() === 0;
    expect(r.sandboxUser).toEqual(
      root
        ? { uid: 2_000_000_000, gid: 2_000_000_000, droppedFromRoot: true }
        : { uid: process.getuid?.(), gid: process.getgid?.(), droppedFromRoot: false },
    );
    expect(r.checks.find((c: { name: string }) => c.name === 'sandbox uid')).toMatchObject({
      ok: true,
      detail: expect.stringContaining(root ? 'unprivileged host uid 2000000000' : 'runs as this user'),
    });
    // Each limit on its own line, saying what holds it; a real sandbox started and forked.
    const check = (name: string) => r.checks.find((c: { name: string }) => c.name === name);
    expect(check('limit memory')?.detail).toMatch(/^(cgroup: whole run|rlimit: per process only)/);
    expect(check('limit cpu time')?.detail).toMatch(/^(cgroup: whole run|rlimit: per process only)/);
    expect(check('limit processes')?.detail).toMatch(
      root ? /^cgroup: whole run \(every process and thread\)/ : /^(cgroup: whole run|userns: the run's own processes and threads)/,
    );
    expect(r.limits.pids).toBe(check('limit processes')?.detail.split(':')[0]);
    expect(check('trial run')).toMatchObject({
      ok: true,
      detail: expect.stringMatching(
        /^a sandbox started and forked with a call's default limits, beside the \d+ processes and threads uid \d+ runs now/,
      ),
    });
    expect(check('warm sandboxes')?.detail).toMatch(
      /^Python and Node calls start in warm sandboxes built ahead.* holding at most \d+ MiB here/,
    );
    // A warm setting that is not one: doctor names it with the fix, and a command that opens forge refuses it.
    const badWarm = { ...o, env: { ...s.env, FORGE_WARM_POOL_MIB: 'lots' } };
    const warmDoctor = JSON.parse((await runCli(['doctor', '--json'], badWarm)).stdout);
    expect(warmDoctor.checks.find((c: { name: string }) => c.name === 'warm sandboxes')).toMatchObject({
      ok: false,
      detail: 'FORGE_WARM_POOL_MIB="lots" is not a whole number of MiB; give one such as 64, or unset it for the default',
    });
    const warmList = await runCli(['tools', 'list'], { ...o, env: { ...s.env, FORGE_WARM: 'maybe' } });
    expect(warmList.code, warmList.stdout).toBe(2);
    expect(warmList.stderr).toContain('FORGE_WARM="maybe" is neither on nor off; set it to off to start every call cold, or unset it');
    const text = await runCli(['doctor'], o);
    for (const line of text.stdout.split('\n')) expect(line.length, line).toBeLessThan(400);
    if (root) {
      // Root with a sandbox uid that would be root: refused, with the fix, and nothing may run.
      const zero = await runCli(['doctor'], { ...o, env: { ...s.env, FORGE_SANDBOX_UID: '0' } });
      expect(zero.code, zero.stdout + zero.stderr).toBe(1);
      expect(zero.stdout).toContain('FORGE_SANDBOX_UID="0" is not a usable uid');
      expect(zero.stdout).toContain('fix: unset FORGE_SANDBOX_UID');
    }

    writeFileSync(join(s.home, 'secrets.json'), '{"TOKEN": "x"}', { mode: 0o644 });
    const bad = await runCli(['doctor'], o);
    expect(bad.code, bad.stdout + bad.stderr).toBe(1);
    expect(bad.stdout).toMatch(/✗ vault .*mode 0644/);
    expect(bad.stdout).toContain(`fix: chmod 600 ${join(s.home, 'secrets.json')}`);
  });

  it('demo: the guided tour runs end to end and leaves nothing behind', async () => {
    const s = scratch();
    const r = await runCli(['demo', '--json'], { cwd: s.project, env: { ...s.env, TMPDIR: s.root } });
    const report = JSON.parse(r.stdout);
    expect(report.error).toBeUndefined();
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(report.steps.map((x: { ok: boolean }) => x.ok)).toEqual(Array(8).fill(true));
    expect(readdirSync(s.root).filter((n) => n.startsWith('forge-demo-'))).toEqual([]);
  });
});
