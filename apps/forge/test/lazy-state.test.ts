/**
 * `forge serve` in a repository that has no forge state yet: starting (and listing) creates
 * nothing in the repository; the project's `.forge/tools/` appears only when a tool is forged, and
 * a tool forged there later by another process still reaches the running server (hot reload).
 * One-shot commands that only look write nothing to the audit log either.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { connect, EXAMPLES, exampleSpec, requireCliAndSandbox, runCli, scratch } from './helpers.js';

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
  it('tools list, tools show and status append nothing; the next call writes the policy it ran under, then itself', async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    const forged = await runCli(['tools', 'forge', s.file('fib.json', JSON.stringify(exampleSpec('fib')))], o);
    expect(forged.code, forged.stderr).toBe(0);
    const log = join(s.home, 'audit', 'forge.log');
    const before = readFileSync(log, 'utf8');
    for (const args of [['tools', 'list'], ['tools', 'show', 'fib'], ['status']]) {
      const r = await runCli(args, o);
      expect(r.code, `forge ${args.join(' ')}: ${r.stderr}`).toBe(0);
    }
    expect(readFileSync(log, 'utf8')).toBe(before);

    const called = await runCli(['tools', 'call', 'fib', '{"n":5}'], o);
    expect(called.code, called.stderr).toBe(0);
    const added = readFileSync(log, 'utf8')
      .slice(before.length)
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l).type);
    expect(added).toEqual(['policy.reloaded', 'forge.called']);
  });
});
