import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, mkdirSync, readFileSync, readlinkSync, symlinkSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { scaled, waitFor } from '@forge/test-utils';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { CLI, connect, exampleSpec, requireCliAndSandbox, rugGateway, runCli, type Scratch, scratch } from './helpers.js';

beforeAll(requireCliAndSandbox);

const SCRIPT = resolve(import.meta.dirname, 'fixtures/tool-dir.sh');

async function forge(s: Scratch, spec: Record<string, unknown>): Promise<void> {
  const r = await runCli(['tools', 'forge', '-'], { cwd: s.project, env: s.env, input: JSON.stringify(spec) });
  expect(r.code, r.stderr).toBe(0);
}

async function exportTo(s: Scratch, dir: string, extra: string[] = []) {
  return runCli(['tools', 'export', dir, ...extra], { cwd: s.project, env: s.env });
}

describe('forge tools export: a tool directory', () => {
  it('a shell uses it alone: lists, reads every control file, runs with JSON argv, stdin and flags, and gets a clean refusal', async () => {
    const s = scratch();
    await forge(s, exampleSpec('fib'));
    await forge(s, exampleSpec('word_count'));
    const dir = join(s.root, 'tools');
    const r = await exportTo(s, dir);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/2 written, 0 unchanged, 0 removed/);
    // Without FORGE_HOME: the executables carry where forge is.
    const env = { ...s.env };
    delete env.FORGE_HOME;
    const sh = spawnSync('bash', [SCRIPT, dir], { cwd: s.root, env, encoding: 'utf8', timeout: scaled(240_000) });
    expect(sh.status, `${sh.stdout}\n${sh.stderr}`).toBe(0);
    expect(sh.stdout).toMatch(/^fib fib\.d word_count word_count\.d $/m);
    expect(sh.stdout.trim().split('\n').at(-1)).toBe('ok');
    // The calls changed the logs and statuses; then the same export again changes nothing.
    expect((await exportTo(s, dir)).stdout).toMatch(/2 written, 0 unchanged, 0 removed/);
    expect(readFileSync(join(dir, 'fib.d', 'log'), 'utf8')).toMatch(/ default {2}validation_failed {2}- {2}-\n$/);
    expect((await exportTo(s, dir)).stdout).toMatch(/0 written, 2 unchanged, 0 removed/);
  });

  it('agent-written text is inert in the control files; a tool a policy forbids is shown refused, and running it is refused', async () => {
    const s = scratch();
    const spec = exampleSpec('fib');
    await forge(s, { ...spec, name: 'shout', description: 'loud \x1b]0;owned\x07 \u202eevil' });
    await forge(s, spec);
    writeFileSync(join(s.home, 'policy.json'), JSON.stringify({ forbidden_tool_names: ['shout'] }));
    const dir = join(s.root, 'tools');
    expect((await exportTo(s, dir)).code).toBe(0);
    const description = readFileSync(join(dir, 'shout.d', 'description'), 'utf8');
    expect(description).toBe('loud \\x1b]0;owned\\x07 \\u202eevil\n');
    const policy = JSON.parse(readFileSync(join(dir, 'shout.d', 'policy'), 'utf8'));
    expect(policy).toMatchObject({ persona: 'default', allowed: false });
    expect(policy.gates[0]).toMatchObject({ gate: 'name', ok: false, kind: 'name_forbidden' });
    expect(JSON.parse(readFileSync(join(dir, 'fib.d', 'policy'), 'utf8')).allowed).toBe(true);
    const run = spawnSync(join(dir, 'shout'), ['{"n":3}'], { env: s.env, encoding: 'utf8', timeout: scaled(120_000) });
    expect(run.status).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(/name_forbidden/);
  });

  it("refuses a directory others could write, one inside forge's state, and leaves files it did not make", async () => {
    const s = scratch();
    await forge(s, exampleSpec('fib'));
    const open = join(s.root, 'open');
    mkdirSync(open);
    chmodSync(open, 0o777);
    const r1 = await exportTo(s, join(open, 'tools'));
    expect(r1.code).toBe(2);
    expect(r1.stderr).toMatch(/open \(above .*tools\) is writable by everyone \(mode 777\).*chmod go-w/);
    const r2 = await exportTo(s, join(s.home, 'tools'));
    expect(r2.code).toBe(2);
    expect(r2.stderr).toMatch(/inside forge's own state/);
    expect(existsSync(join(s.home, 'tools'))).toBe(false);
    const r3 = await exportTo(s, join(s.project, '.forge'));
    expect(r3.code).toBe(2);

    // A file named like a tool that no export made is left alone; the tool is left out (exit 1).
    const dir = join(s.root, 'tools');
    mkdirSync(dir);
    writeFileSync(join(dir, 'fib'), 'mine\n');
    const r4 = await exportTo(s, dir);
    expect(r4.code).toBe(1);
    expect(r4.stderr).toMatch(/fib left out: .*fib exists and was not made by an export/);
    expect(readFileSync(join(dir, 'fib'), 'utf8')).toBe('mine\n');
  });

  it('removes what it made for a tool that is gone, keeping what the operator put beside it; a link in place of a control directory is replaced, not followed', async () => {
    const s = scratch();
    await forge(s, exampleSpec('fib'));
    await forge(s, exampleSpec('word_count'));
    const dir = join(s.root, 'tools');
    expect((await exportTo(s, dir)).code).toBe(0);
    writeFileSync(join(dir, 'fib.d', 'notes'), 'keep me\n');
    // The control directory swapped for a link to elsewhere: the export writes in place of the link.
    const elsewhere = join(s.root, 'elsewhere');
    mkdirSync(elsewhere);
    spawnSync('rm', ['-rf', join(dir, 'word_count.d')]);
    symlinkSync(elsewhere, join(dir, 'word_count.d'));
    const rm = await runCli(['tools', 'remove', 'fib'], { cwd: s.project, env: s.env });
    expect(rm.code, rm.stderr).toBe(0);
    const r = await exportTo(s, dir);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/1 written, 0 unchanged, 1 removed/);
    expect(existsSync(join(dir, 'fib'))).toBe(false);
    expect(readFileSync(join(dir, 'fib.d', 'notes'), 'utf8')).toBe('keep me\n');
    expect(existsSync(join(dir, 'fib.d', 'schema'))).toBe(false);
    expect(lstatSync(join(dir, 'word_count.d')).isDirectory()).toBe(true);
    expect(spawnSync('ls', ['-A', elsewhere], { encoding: 'utf8' }).stdout).toBe('');
    expect(JSON.parse(readFileSync(join(dir, '.forge-tools.json'), 'utf8')).tools).toEqual(['word_count']);
  });

  it('--watch follows forges and removals made by other processes, holds the directory, and lets go on SIGTERM', async () => {
    const s = scratch();
    await forge(s, exampleSpec('fib'));
    const dir = join(s.root, 'tools');
    const { child } = await startWatch(s, dir);
    expect(existsSync(join(dir, 'fib'))).toBe(true);
    // A second exporter is refused while the watch holds the directory.
    const second = await exportTo(s, dir);
    expect(second.code).toBe(2);
    expect(second.stderr).toMatch(new RegExp(`being exported by process ${child.pid}`));

    await forge(s, exampleSpec('word_count'));
    // The executable is written last and removed last: once it is there (or gone), so are its controls.
    await waitFor('word_count to be exported', () => existsSync(join(dir, 'word_count')));
    // A call from another process shows in the tool's log and status.
    const call = spawnSync(join(dir, 'word_count'), ['--text', 'a b'], { env: s.env, encoding: 'utf8', timeout: scaled(120_000) });
    expect(call.status, `${call.stderr} (signal ${call.signal}, error ${call.error?.message})`).toBe(0);
    await waitFor('the call in word_count.d/log', () =>
      / default {2}ok {2}\d+ ms {2}\S+\n$/.test(readFileSync(join(dir, 'word_count.d', 'log'), 'utf8')),
    );
    // The control files are written one after another (log before status): wait for status too.
    const status = await waitFor('the call in word_count.d/status', () => {
      const last = JSON.parse(readFileSync(join(dir, 'word_count.d', 'status'), 'utf8')).last_call;
      return last ?? undefined;
    });
    expect(status).toMatchObject({ persona: 'default', outcome: 'ok' });
    const rm = await runCli(['tools', 'remove', 'fib'], { cwd: s.project, env: s.env });
    expect(rm.code, rm.stderr).toBe(0);
    await waitFor('fib to be removed', () => !existsSync(join(dir, 'fib')));
    expect(existsSync(join(dir, 'fib.d'))).toBe(false);

    // A dotted name keeps its dots; a policy edit shows in the tool's policy file.
    await forge(s, { ...exampleSpec('fib'), name: 'math.fib' });
    await waitFor('math.fib to be exported', () => existsSync(join(dir, 'math.fib')));
    expect(readFileSync(join(dir, 'math.fib.d', 'name'), 'utf8')).toBe('math.fib\n');
    expect(JSON.parse(readFileSync(join(dir, 'math.fib.d', 'status'), 'utf8')).wire_name).toBe('math__fib');
    writeFileSync(join(s.home, 'policy.json'), JSON.stringify({ forbidden_tool_names: ['math.*'] }));
    await waitFor(
      'the policy edit in math.fib.d/policy',
      () => JSON.parse(readFileSync(join(dir, 'math.fib.d', 'policy'), 'utf8')).allowed === false,
    );

    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(existsSync(join(dir, '.forge-tools.lock'))).toBe(false);
  });

  it('--watch follows gateway pins another process approves and removes', async () => {
    const s = scratch();
    rugGateway(s);
    const dir = join(s.root, 'tools');
    const { err } = await startWatch(s, dir);
    expect(existsSync(join(dir, 'rug.hello'))).toBe(false);
    const o = { cwd: s.project, env: s.env, timeoutMs: 60_000 };
    expect((await runCli(['gateway', 'approve', 'rug', 'hello'], o)).code).toBe(0);
    await waitFor(
      () => `rug.hello to be exported (stderr: ${err()})`,
      () => existsSync(join(dir, 'rug.hello.d', 'origin')),
    );
    expect(JSON.parse(readFileSync(join(dir, 'rug.hello.d', 'origin'), 'utf8'))).toMatchObject({
      kind: 'gateway',
      server: 'rug',
      tool: 'hello',
    });
    expect((await runCli(['gateway', 'remove', 'rug', 'hello'], o)).code).toBe(0);
    await waitFor('rug.hello to be removed', () => !existsSync(join(dir, 'rug.hello')));
  });

  it('a lock left by a process that is gone is taken over', async () => {
    const s = scratch();
    await forge(s, exampleSpec('fib'));
    const dir = join(s.root, 'tools');
    mkdirSync(dir);
    // The lock of a process that is gone: its owner record names a pid that cannot be running
    // (beyond pid_max) on this host, in this pid namespace, since this boot.
    mkdirSync(join(dir, '.forge-tools.lock'));
    const owner = {
      host: hostname(),
      pidns: readlinkSync('/proc/self/ns/pid'),
      boot: readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim(),
      pid: 4194305,
      start: '12345',
      token: 'a'.repeat(24),
      time: new Date().toISOString(),
    };
    writeFileSync(join(dir, '.forge-tools.lock', 'owner'), `${JSON.stringify(owner)}\n`);
    const r = await exportTo(s, dir);
    expect(r.code, r.stderr).toBe(0);
    expect(existsSync(join(dir, '.forge-tools.lock'))).toBe(false);
  });
});

describe('forge serve --tool-dir', () => {
  it('keeps the directory for the served persona while it serves: a call over MCP shows in the log; the lock goes with the server', async () => {
    const s = scratch();
    await forge(s, exampleSpec('fib'));
    const dir = join(s.root, 'tools');
    const c = await connect(s, { args: ['--tool-dir', dir], env: { FORGE_PERSONA: 'ann' } });
    await waitFor(
      () => `the tool directory (server stderr: ${c.stderr()})`,
      () => existsSync(join(dir, 'fib.d', 'policy')),
    );
    expect(JSON.parse(readFileSync(join(dir, 'fib.d', 'policy'), 'utf8')).persona).toBe('ann');
    const { env } = await c.call('fib', { n: 5 });
    expect(env.ok).toBe(true);
    await waitFor('the call in fib.d/log', () => / ann {2}ok {2}/.test(readFileSync(join(dir, 'fib.d', 'log'), 'utf8')));
    expect(existsSync(join(dir, '.forge-tools.lock'))).toBe(true);
    await c.client.close();
    await waitFor('the lock to go with the server', () => !existsSync(join(dir, '.forge-tools.lock')));
    // A directory it may not keep stops the server at start, naming it.
    const bad = await runCli(['serve', '--tool-dir', join(s.home, 'x')], { cwd: s.project, env: s.env });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/inside forge's own state/);
  });
});

describe('forge tools log', () => {
  it("shows one tool's calls from the verified log, the latest N, and refuses a log that does not verify", async () => {
    const s = scratch();
    await forge(s, exampleSpec('fib'));
    await forge(s, exampleSpec('word_count'));
    const o = { cwd: s.project, env: s.env };
    for (const args of [
      ['run', 'fib', '--n', '3'],
      ['run', 'word_count', '--text', 'x'],
      ['run', 'fib', '--n', '-1'],
    ])
      await runCli(args, o);
    const log = await runCli(['tools', 'log', 'fib'], o);
    expect(log.code, log.stderr).toBe(0);
    const rows = log.stdout.trimEnd().split('\n');
    expect(rows).toHaveLength(2);
    expect(rows[0]).toMatch(/^ +\d+ {2}\S+Z {2}default {2}ok {2}\d+ ms {2}\S+$/);
    expect(rows[1]).toMatch(/ {2}default {2}validation_failed {2}- {2}-$/);
    const last = await runCli(['tools', 'log', 'fib', '-n', '1', '--json'], o);
    // One JSON document (an array), as every command's --json.
    expect(JSON.parse(last.stdout)).toEqual([
      expect.objectContaining({ type: 'forge.called', name: 'fib', ok: false, outcome: 'validation_failed', persona: 'default' }),
    ]);
    // One byte of an entry changed: nothing is shown from that log.
    const file = join(s.home, 'audit', 'forge.log');
    writeFileSync(file, readFileSync(file, 'utf8').replace('"validation_failed"', '"validation_fail3d"'));
    const bad = await runCli(['tools', 'log', 'fib'], o);
    expect(bad.code).toBe(2);
    expect(bad.stdout).toBe('');
    expect(bad.stderr).toMatch(/does not verify .*forge audit verify says more/);
  });
});

describe('forge run', () => {
  it('calls by name here, or through FORGE_TOOL_PATH: the first executable of that name, left to right', async () => {
    const s = scratch();
    await forge(s, exampleSpec('fib'));
    const o = { cwd: s.project, env: s.env };
    const direct = await runCli(['run', 'fib', '--n', '9'], o);
    expect(direct.code, direct.stderr).toBe(0);
    expect(JSON.parse(direct.stdout)).toEqual({ n: 9, fib: '34' });
    const unknown = await runCli(['run', 'nope', '--x', '1'], o);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/unknown_tool/);

    const dir = join(s.root, 'tools');
    expect((await exportTo(s, dir)).code).toBe(0);
    const first = join(s.root, 'first');
    mkdirSync(first);
    // Not executable, and a directory: neither is a hit.
    writeFileSync(join(first, 'fib'), '#!/bin/sh\necho wrong\n', { mode: 0o644 });
    mkdirSync(join(first, 'fib.d'));
    const viaPath = await runCli(['run', 'fib', '{"n":8}'], { cwd: s.root, env: { ...s.env, FORGE_TOOL_PATH: `${first}:${dir}` } });
    expect(viaPath.code, viaPath.stderr).toBe(0);
    expect(JSON.parse(viaPath.stdout)).toEqual({ n: 8, fib: '21' });
    const missing = await runCli(['run', 'word_count'], { cwd: s.root, env: { ...s.env, FORGE_TOOL_PATH: first } });
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no executable "word_count" in FORGE_TOOL_PATH/);
  });
});

/** `forge tools export DIR --watch` in the scratch project, once it says it is watching (killed when the test ends). */
async function startWatch(s: Scratch, dir: string): Promise<{ child: ChildProcessWithoutNullStreams; err: () => string }> {
  const child = spawn(process.execPath, [CLI, 'tools', 'export', dir, '--watch'], { cwd: s.project, env: s.env });
  onTestFinished(() => void child.kill('SIGKILL'));
  const err = collect(child);
  await waitFor(
    () => `the watch to start (stderr: ${err()})`,
    () => err().includes('watching'),
    { timeoutMs: 60_000 },
  );
  return { child, err };
}

function collect(child: ChildProcessWithoutNullStreams): () => string {
  let text = '';
  child.stderr.on('data', (d) => (text += d));
  child.stdout.on('data', () => {});
  return () => text;
}
