/**
 * `forge serve` in a repository that has no forge state yet: starting (and listing) creates
 * nothing in the repository; the project's `.forge/tools/` appears only when a tool is forged, and
 * a tool forged there later by another process still reaches the running server (hot reload).
 * One-shot commands that only look write nothing to the audit log either.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { connect, EXAMPLES, exampleSpec, requireCliAndSandbox, rugGateway, runCli, scratch } from './helpers.js';

beforeAll(requireCliAndSandbox);

describe('forge serve and project state', () => {
  it('leaves a repository without .forge/ untouched until a tool is forged, then serves that tool', async () => {
    const s = scratch();
    const repo = join(s.root, 'repo');
    mkdirSync(join(repo, '.git'), { recursive: true });
    const c = await connect(s, { cwd: repo });
    const before = await c.client.listTools();
    expect(before.tools.map((t) => t.name)).not.toContain('fib');
    expect(existsSync(join(repo, '.forge'))).toBe(false);

    // Another process forges into the project: the directory is made now, and the server sees it.
    const changed = c.nextListChanged(10_000);
    const forged = await runCli(['tools', 'forge', join(EXAMPLES, 'fib')], { cwd: repo, env: s.env });
    expect(forged.code, forged.stderr).toBe(0);
    expect(existsSync(join(repo, '.forge', 'tools', 'fib.json'))).toBe(true);
    await changed;
    const after = await c.client.listTools();
    expect(after.tools.map((t) => t.name)).toContain('fib');
    const { env } = await c.call('fib', { n: 10 });
    expect(env).toMatchObject({ ok: true });
  });
});

describe('one-shot commands and the audit log', () => {
  it('tools list, tools show and status append nothing; a call announces its policy only when the log has not already', async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    const forged = await runCli(['tools', 'forge', s.file('fib.json', JSON.stringify(exampleSpec('fib')))], o);
    expect(forged.code, forged.stderr).toBe(0);
    const log = join(s.home, 'audit', 'forge.log');
    const entries = (from = 0) =>
      readFileSync(log, 'utf8')
        .slice(from)
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { type: string; data: { digest?: string; policy?: string } });
    const before = readFileSync(log, 'utf8');
    for (const args of [['tools', 'list'], ['tools', 'show', 'fib'], ['status']]) {
      const r = await runCli(args, o);
      expect(r.code, `forge ${args.join(' ')}: ${r.stderr}`).toBe(0);
    }
    expect(readFileSync(log, 'utf8')).toBe(before);
    const announced = entries().filter((e) => e.type === 'policy.reloaded');
    expect(announced.map((e) => e.type)).toEqual(['policy.reloaded']);

    // The same policy as the forge's: the log says so already, and the call's entry names it.
    const called = await runCli(['tools', 'call', 'fib', '{"n":5}'], o);
    expect(called.code, called.stderr).toBe(0);
    const added = entries(before.length);
    expect(added.map((e) => e.type)).toEqual(['forge.called']);
    expect(added[0]?.data.policy).toBe(announced[0]?.data.digest);

    // Another policy: the next process announces it before its call.
    const mark = readFileSync(log, 'utf8').length;
    writeFileSync(join(s.home, 'policy.json'), JSON.stringify({ breakers: { per_tool_rpm: 1000 } }));
    expect((await runCli(['tools', 'call', 'fib', '{"n":6}'], o)).code).toBe(0);
    const next = entries(mark);
    expect(next.map((e) => e.type)).toEqual(['policy.reloaded', 'forge.called']);
    expect(next[0]?.data.digest).not.toBe(announced[0]?.data.digest);
    expect(next[1]?.data.policy).toBe(next[0]?.data.digest);
  });

  it('looking starts no upstream and writes nothing; a gateway configuration is announced once, by the first process that acts under it, and again when it changes', async () => {
    const s = scratch();
    rugGateway(s);
    const o = { cwd: s.project, env: s.env };
    const log = join(s.home, 'audit', 'forge.log');
    const types = () =>
      existsSync(log)
        ? readFileSync(log, 'utf8')
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l).type as string)
        : [];
    // Only looking, gateway list included, writes nothing: not even the first announcement.
    for (const args of [['gateway', 'list'], ['tools', 'list'], ['tools', 'show', 'rug.hello'], ['status']]) await runCli(args, o);
    expect(types()).toEqual([]);
    // Nor do they start the upstream: listing shows approved tools from their pins.
    expect(existsSync(join(s.root, 'rug-starts'))).toBe(false);
    expect((await runCli(['gateway', 'approve', 'rug', 'hello'], o)).code).toBe(0);
    const starts = () => readFileSync(join(s.root, 'rug-starts'), 'utf8').split('\n').filter(Boolean).length;
    const approved = starts();
    for (const args of [['gateway', 'list'], ['tools', 'list'], ['tools', 'show', 'rug.hello'], ['status']]) {
      const r = await runCli(args, o);
      expect(r.code, `forge ${args.join(' ')}: ${r.stderr}`).toBe(0);
    }
    expect(starts()).toBe(approved);
    const spec = s.file('fib.json', JSON.stringify(exampleSpec('fib')));
    expect((await runCli(['tools', 'forge', spec], o)).code).toBe(0);
    expect((await runCli(['tools', 'call', 'fib', '{"n":5}'], o)).code).toBe(0);
    expect((await runCli(['gateway', 'list'], o)).code).toBe(0);
    expect((await runCli(['tools', 'call', 'fib', '{"n":6}'], o)).code).toBe(0);
    expect(
      types().filter((t) => t === 'gateway.reloaded'),
      types().join(' '),
    ).toHaveLength(1);
    expect(types().filter((t) => t === 'policy.reloaded')).toHaveLength(1);
    expect(starts()).toBe(approved);

    // Another configuration: the next process that acts announces it, once.
    writeFileSync(join(s.home, 'gateway.json'), JSON.stringify({ servers: {} }));
    for (const n of [7, 8]) expect((await runCli(['tools', 'call', 'fib', `{"n":${n}}`], o)).code).toBe(0);
    expect(types().filter((t) => t === 'gateway.reloaded')).toHaveLength(2);
  });
});
