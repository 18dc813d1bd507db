import { spawn, spawnSync } from 'node:child_process';
import { createPrivateKey } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import {
  generateSigningKeys,
  leafHash,
  MemoryTree,
  noteVerifierKey,
  openNote,
  parseTreeCheckpoint,
  tilePath,
  treeHead,
} from '@forge/audit-chain';
import { scaled } from '@forge/test-utils';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import pg from 'pg';
import { describe, expect, it, onTestFailed, onTestFinished } from 'vitest';
import {
  type Connected,
  connect,
  type Envelope,
  EXAMPLES,
  exampleSpec,
  py,
  runCli,
  type Scratch,
  scratch,
  serveHttp,
  until,
} from './helpers.js';
import { usePostgres } from './postgres-helpers.js';

/**
 * Many hosts over one PostgreSQL database: two front-ends (`forge serve --dispatch`) and two
 * workers (`forge worker`), each with a home and project of its own, as on separate machines.
 * A tool forged through A is listed by B (list_changed) and called through B, and runs on a
 * worker; a worker killed -9 mid-call has the call delivered again; a front-end killed -9
 * mid-call leaves the call to finish on its worker, recorded once; the log exported from the
 * database verifies with the file verifier.
 */

const server = usePostgres();

const AUDIT_CLI = join(EXAMPLES, '..', 'packages', 'audit-chain', 'dist', 'cli.js');

const spec = exampleSpec;
const sleeper = {
  name: 'test.sleep',
  description: 'sleeps, then answers',
  runtime: 'python3',
  input_schema: { type: 'object', properties: { s: { type: 'number' } } },
  impl: 'import json, sys, time\nargs = json.load(sys.stdin)\ntime.sleep(args.get("s", 1))\nprint(json.dumps({"ok": True, "data": "woke"}))\n',
  meta: { timeout_ms: 60_000 },
};

/** A host: its own home and project, with FORGE_STORE set to the database. */
function host(url: string): Scratch {
  const s = scratch('forge-pg-e2e-');
  s.env.FORGE_STORE = url;
  return s;
}

/** `forge worker` on its own host, killed when the test ends. */
function worker(s: Scratch) {
  const child = spawn(process.execPath, [join(EXAMPLES, '..', 'apps', 'forge', 'dist', 'cli.js'), 'worker'], {
    cwd: s.project,
    env: s.env,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  onTestFinished(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
  });
  return { child, stderr: () => err, ready: () => err.includes(': worker on postgres queue') };
}

/** The database's audit entries of one type. */
async function entries(pool: pg.Pool, type: string): Promise<{ seq: number; data: Record<string, unknown> }[]> {
  const r = await pool.query<{ line: string }>('SELECT line FROM forge_audit_entries ORDER BY seq');
  return r.rows
    .map((row) => JSON.parse(row.line) as { seq: number; type: string; data: Record<string, unknown> })
    .filter((e) => e.type === type);
}

/** The state and holder of the one job of a call in the queue's table. */
async function jobs(pool: pg.Pool): Promise<{ id: string; state: string; worker: string | null; attempt: number }[]> {
  return (await pool.query('SELECT id, state, worker, attempt FROM forge_queue_jobs ORDER BY published_at')).rows;
}

describe('front-ends and workers on many hosts over PostgreSQL', () => {
  it('forged on A, listed and called on B, run on a worker; workers and front-ends killed -9 mid-call; the exported log verifies', async () => {
    const url = await server.database();
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    onTestFinished(() => pool.end());
    const [hA, hB, hW1, hW2] = [host(url), host(url), host(url), host(url)];
    const w1 = worker(hW1);
    await until(w1.ready, 30_000, w1.stderr);
    const b: Connected = await connect(hB, { args: ['--dispatch'] });
    const a: Connected = await connect(hA, { args: ['--dispatch'] });

    // Forged through A: B hears list_changed (LISTEN/NOTIFY), lists it, calls it; a worker runs it.
    const changed = b.nextListChanged(20_000);
    expect((await a.call('forge_tool', spec('fib'))).env.ok).toBe(true);
    await changed;
    expect((await b.client.listTools()).tools.map((t) => t.name)).toContain('fib');
    const viaB = await b.call('fib', { n: 30 });
    expect(viaB.env, JSON.stringify(viaB.env)).toMatchObject({ ok: true, data: { n: 30, fib: '832040' } });
    await until(
      () => w1.stderr().includes(' fib ok in '),
      10_000,
      () => `${w1.stderr()} B: ${b.stderr()} ${JSON.stringify(viaB.env)}`,
    );
    let called = await entries(pool, 'forge.called');
    expect(called).toHaveLength(1);
    expect(called[0]?.data).toMatchObject({ ok: true, name: 'fib', call_id: expect.stringMatching(/^c/) });
    // The run the worker made is readable on A, another host (the run records are the database's),
    // and the same call on A is a hit of the cache every front-end shares, naming B's run.
    const runId = viaB.env.meta?.run_id as string;
    const manifest = await a.client.readResource({ uri: `forge://runs/${runId}/manifest` });
    const text = manifest.contents[0] && 'text' in manifest.contents[0] ? String(manifest.contents[0].text) : '';
    expect(JSON.parse(text)).toMatchObject({ run_id: runId, kind: 'run', manifest: { ok: true, tool: { name: 'fib' } } });
    const hit = await a.call('fib', { n: 30 });
    expect(hit.env).toMatchObject({ ok: true, data: { fib: '832040' }, meta: { cache: 'hit', seed_run: runId } });

    // A worker killed -9 mid-call: the call is delivered again to the other worker and answered once.
    const changedAgain = b.nextListChanged(20_000);
    expect((await a.call('forge_tool', sleeper)).env.ok).toBe(true);
    await changedAgain;
    const w2 = worker(hW2);
    await until(w2.ready, 30_000, w2.stderr);
    const slow = b.call('test.sleep', { s: 3 });
    let holder: string | null = null;
    await until(
      async () => {
        holder = (await jobs(pool)).find((j) => j.state === 'claimed')?.worker ?? null;
        return holder !== null;
      },
      20_000,
      () => w1.stderr(),
    );
    const [victim, survivor] = holder === `${hostname().replace(/[^A-Za-z0-9_-]/g, '-')}-${w1.child.pid}` ? [w1, w2] : [w2, w1];
    victim.child.kill('SIGKILL');
    const answered = await slow;
    expect(answered.env, JSON.stringify(answered.env)).toMatchObject({ ok: true, data: 'woke' });
    await until(() => /test\.sleep ok in \d+ ms \(attempt 2\)/.test(survivor.stderr()), 10_000, survivor.stderr);
    called = await entries(pool, 'forge.called');
    expect(called.filter((e) => e.data.name === 'fib').map((e) => e.data.cache)).toEqual(['miss', 'hit']);
    const sleepCalls = called.filter((e) => e.data.name === 'test.sleep');
    expect(sleepCalls).toHaveLength(1);

    // A front-end killed -9 mid-call: its call finishes on the worker and is recorded once; B goes on.
    const lost = a.call('test.sleep', { s: 1.5 }).catch(() => undefined);
    await until(
      async () => (await jobs(pool)).filter((j) => j.state === 'claimed').length === 1,
      20_000,
      () => w2.stderr(),
    );
    const pidA = a.transport.pid as number;
    process.kill(pidA, 'SIGKILL');
    await lost;
    await until(
      async () => (await jobs(pool)).every((j) => j.state === 'done'),
      30_000,
      () => JSON.stringify(w2.stderr()),
    );
    expect((await entries(pool, 'forge.called')).filter((e) => e.data.name === 'test.sleep')).toHaveLength(2);
    expect((await b.call('fib', { n: 10 })).env).toMatchObject({ ok: true, data: { fib: '55' } });

    // forge status over the database: B and the live worker; A gone (killed, its record left).
    const st = JSON.parse((await runCli(['status', '--json'], { cwd: hB.project, env: hB.env })).stdout) as {
      members: { name: string; kind: string; alive: boolean; pid: number }[];
      queue: { pending: number };
    };
    const alive = st.members.filter((m) => m.alive);
    expect(alive.map((m) => m.kind).sort()).toEqual(['front-end', 'worker']);
    expect(st.members.find((m) => m.pid === pidA)?.alive).toBe(false);

    // The database's log, exported, verifies with the file verifier (forge-audit).
    const file = join(hB.root, 'exported.log');
    const ex = await runCli(['audit', 'export', file], { cwd: hB.project, env: hB.env });
    expect(ex.code, ex.stderr).toBe(0);
    expect(ex.stdout).toMatch(/entries and \d+ checkpoint\(s\) from postgres:\/\/forge@.*verified/);
    const verified = spawnSync(process.execPath, [AUDIT_CLI, 'verify', file], { encoding: 'utf8' });
    expect(verified.status, verified.stdout + verified.stderr).toBe(0);
    const lines = readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => l !== '');
    const stored = (await pool.query<{ line: string }>('SELECT line FROM forge_audit_entries ORDER BY seq')).rows.map((r) =>
      r.line.replace(/\n$/, ''),
    );
    expect(lines).toEqual(stored);
    expect((await runCli(['audit', 'verify'], { cwd: hB.project, env: hB.env })).code).toBe(0);
  });
});

describe('following the log over PostgreSQL', () => {
  it('forge tools log -f, forge audit tail -f and a watched tool directory on one host show the calls another host makes', async () => {
    const url = await server.database();
    const [a, b] = [host(url), host(url)];
    const forged = await runCli(['tools', 'forge', '-'], { cwd: a.project, env: a.env, input: JSON.stringify(spec('fib')) });
    expect(forged.code, forged.stderr).toBe(0);
    /** A CLI on host b that keeps running: its stdout and stderr so far. */
    const follow = (args: string[]) => {
      const child = spawn(process.execPath, [join(EXAMPLES, '..', 'apps', 'forge', 'dist', 'cli.js'), ...args], {
        cwd: b.project,
        env: b.env,
      });
      let out = '';
      let err = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (err += d.toString()));
      onTestFinished(async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.kill('SIGTERM');
        await new Promise((r) => child.once('exit', r));
      });
      return { child, out: () => out, err: () => err };
    };
    const calls = follow(['tools', 'log', 'fib', '-f', '--json']);
    const tail = follow(['audit', 'tail', '-n', '1000', '-f', '--json']);
    const dir = join(b.root, 'tools');
    const watch = follow(['tools', 'export', dir, '--watch']);
    await until(
      () => watch.err().includes('watching'),
      60_000,
      () => `the watch to start: ${watch.err()}`,
    );
    const rows = () =>
      calls
        .out()
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as { name: string; outcome: string; persona: string });
    for (const n of [7, 8]) {
      const r = await runCli(['run', 'fib', '--n', String(n)], { cwd: a.project, env: a.env });
      expect(r.code, r.stderr).toBe(0);
      const want = n - 6;
      await until(
        () => rows().length >= want,
        30_000,
        () => `call ${want} in forge tools log -f: ${calls.out()} ${calls.err()}`,
      );
      await until(
        () => (tail.out().match(/"type":"forge\.called"/g) ?? []).length >= want,
        30_000,
        () => `call ${want} in forge audit tail -f: ${tail.err()}`,
      );
      await until(
        () => (readFileSync(join(dir, 'fib.d', 'log'), 'utf8').match(/ default {2}ok {2}/g) ?? []).length >= want,
        30_000,
        () => `call ${want} in fib.d/log: ${watch.err()}`,
      );
    }
    expect(rows()).toEqual([
      expect.objectContaining({ name: 'fib', outcome: 'ok', persona: 'default' }),
      expect.objectContaining({ name: 'fib', outcome: 'ok' }),
    ]);
  });
});

describe('forge doctor over PostgreSQL', () => {
  it('checks the store: reachable, migrated, clock skew, queue, the chain; a server it cannot reach is named without the password', async () => {
    const url = await server.database();
    const h = host(url);
    const r = await runCli(['doctor', '--json'], { cwd: h.project, env: h.env, timeoutMs: 120_000 });
    const report = JSON.parse(r.stdout) as { checks: { name: string; ok: boolean; detail: string; fix?: string }[] };
    const by = (name: string) => report.checks.find((c) => c.name === name);
    expect(by('store')).toMatchObject({ ok: true, detail: expect.stringMatching(/^PostgreSQL \d+\.\d+.* at postgres:\/\/forge@\//) });
    expect(by('migrations')).toMatchObject({ ok: true, detail: expect.stringMatching(/^at version (\d+) of \1$/) });
    expect(by('clock skew')).toMatchObject({
      ok: true,
      detail: expect.stringMatching(/^this host is (ahead of|behind) the database by \d+ ms$/),
    });
    expect(by('queue')).toMatchObject({ ok: true, detail: '0 pending, 0 running, 0 done, 0 failed' });
    expect(by('audit log')).toMatchObject({ ok: true, detail: expect.stringMatching(/entries in postgres:\/\/forge@.*chain intact$/) });

    const bad = {
      ...h.env,
      FORGE_STORE: `postgres://forge:hunter2-secret@localhost/forge?host=${encodeURIComponent(join(h.root, 'no-server'))}`,
    };
    const down = await runCli(['doctor', '--json'], { cwd: h.project, env: bad, timeoutMs: 120_000 });
    expect(down.code, down.stdout + down.stderr).toBe(1);
    expect(down.stdout + down.stderr).not.toContain('hunter2-secret');
    const store = (JSON.parse(down.stdout) as { checks: { name: string; ok: boolean; detail: string; fix?: string }[] }).checks.find(
      (c) => c.name === 'store',
    );
    expect(store).toMatchObject({
      ok: false,
      detail: expect.stringContaining('postgres://forge:***@'),
      fix: expect.stringContaining('start the server'),
    });
    // A store that is not a database URL is refused by every command, the password still masked.
    const wrong = await runCli(['status'], { cwd: h.project, env: { ...h.env, FORGE_STORE: 'mysql://u:pw-shh@db/x' } });
    expect(wrong.code, wrong.stdout + wrong.stderr).toBe(2);
    expect(wrong.stderr).toContain('--store (FORGE_STORE) must be a postgres:// connection string, or "files" (got "mysql://u:***@db/x")');
  });
});

describe('the connection budget over PostgreSQL', () => {
  it('40 HTTP sessions one after another that never say goodbye, calling through two workers; then the holder of a call killed -9: every call answered, a fixed number of connections, the call taken over within a lease and recorded once', {
    timeout: scaled(300_000),
  }, async () => {
    const url = await server.database();
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    onTestFinished(() => pool.end());
    const [w1, w2] = [worker(host(url)), worker(host(url))];
    await until(
      () => w1.ready() && w2.ready(),
      30_000,
      () => w1.stderr() + w2.stderr(),
    );
    const { url: mcp, child } = await serveHttp(host(url), ['--dispatch']);
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    /** Connections listening (their last statement a LISTEN): one per watcher before, now one per process and purpose. */
    const listening = async () =>
      (
        await pool.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN %'",
        )
      ).rows[0]?.n ?? -1;
    const text = (r: unknown) => JSON.parse((r as { content: { text: string }[] }).content[0]?.text ?? '{}') as Envelope;
    for (let i = 0; i < 40; i++) {
      const client = new Client({ name: `session-${i}`, version: '1.0.0' });
      await client.connect(new StreamableHTTPClientTransport(mcp));
      if (i === 0) {
        for (const spec of [py('echo', 'print(json.dumps({"ok": True, "data": args}))'), sleeper]) {
          const made = await client.callTool({ name: 'forge_tool', arguments: spec });
          expect(made.isError, JSON.stringify(made)).toBe(false);
        }
      }
      expect((await client.listTools()).tools.map((t) => t.name)).toContain('echo');
      // A new input each time: a cache hit would never reach a worker.
      const env = text(await client.callTool({ name: 'echo', arguments: { i } }));
      expect(env, `session ${i}: ${JSON.stringify(env)} ${stderr} ${w1.stderr()} ${w2.stderr()}`).toMatchObject({ ok: true, data: { i } });
      // Gone without a DELETE, as most clients leave.
      await client.close();
    }
    // Three processes, each listening once for tools and once for the queue, whatever the sessions.
    expect(await listening()).toBeLessThanOrEqual(6);

    // The worker holding a call killed -9 after all that: the other takes it over.
    const client = new Client({ name: 'session-last', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(mcp));
    onTestFinished(() => client.close().catch(() => {}));
    const slow = client.callTool({ name: 'test.sleep', arguments: { s: 4 } });
    let holder: string | null = null;
    await until(
      async () => {
        holder = (await jobs(pool)).find((j) => j.state === 'claimed')?.worker ?? null;
        return holder !== null;
      },
      30_000,
      () => w1.stderr() + w2.stderr(),
    );
    const name = (w: ReturnType<typeof worker>) => `${hostname().replace(/[^A-Za-z0-9_-]/g, '-')}-${w.child.pid}`;
    const [victim, survivor] = holder === name(w1) ? [w1, w2] : [w2, w1];
    const killedAt = Date.now();
    victim.child.kill('SIGKILL');
    const answered = text(await slow);
    const tookOver = Date.now() - killedAt;
    expect(answered, `${JSON.stringify(answered)} ${survivor.stderr()}`).toMatchObject({ ok: true, data: 'woke' });
    // The worker says so once the answer is stored, so the caller may have it first.
    await until(
      () => /test\.sleep ok in \d+ ms \(attempt 2\)/.test(survivor.stderr()),
      30_000,
      () => `the survivor to report the call it took over (attempt 2):\n${survivor.stderr()}\n--- the killed holder:\n${victim.stderr()}`,
    );
    // Within a lease (15 s) of the kill, plus the run itself (4 s), with room for a busy host: a
    // bound on a takeover that must happen, not a speed.
    expect(tookOver).toBeLessThan(15_000 + 4_000 + scaled(30_000));
    const sleeps = (await entries(pool, 'forge.called')).filter((e) => e.data.name === 'test.sleep');
    expect(sleeps).toHaveLength(1);
    expect(sleeps[0]?.data).toMatchObject({ ok: true, call_id: expect.stringMatching(/^c/) });

    const exited = new Promise<number | null>((res) => child.once('exit', (code) => res(code)));
    child.kill('SIGTERM');
    expect(await exited, stderr).toBe(0);
  });
});

describe('a database restart under a front-end and a worker', () => {
  it('every call after the restart is answered ok, each with its one forge.called; none answered internal', {
    timeout: scaled(300_000),
  }, async () => {
    const url = await server.database();
    const w = worker(host(url));
    // On a failure, a timeout included, where it stood and what both processes said.
    let step = 'starting the worker';
    let a: Connected | undefined;
    onTestFailed(() => {
      console.error(`restart test failed while ${step}\nfront-end stderr:\n${a?.stderr() ?? ''}\nworker stderr:\n${w.stderr()}`);
    });
    await until(w.ready, 30_000, w.stderr);
    step = 'connecting the front-end';
    a = await connect(host(url), { args: ['--dispatch'] });
    step = 'forging';
    expect((await a.call('forge_tool', py('echo', 'print(json.dumps({"ok": True, "data": args}))'))).env.ok).toBe(true);
    expect((await a.call('forge_tool', sleeper)).env.ok).toBe(true);
    expect((await a.call('echo', { i: -1 })).env).toMatchObject({ ok: true });
    // Two calls in flight (one running on the worker, one waiting in the queue) when every
    // connection of both processes is terminated; the pools still hold others as idle.
    const inFlight = [a.call('test.sleep', { s: 1.5 }), a.call('test.sleep', { s: 0.5 })];
    const probe = new pg.Pool({ connectionString: url, max: 1 });
    await until(
      async () => (await jobs(probe)).some((j) => j.state === 'claimed'),
      20_000,
      () => w.stderr(),
    );
    await probe.end();
    step = 'restarting PostgreSQL';
    await server.restart();
    step = 'waiting for the two calls in flight';
    const answers: Envelope[] = (await Promise.all(inFlight)).map((r) => r.env);
    for (let i = 0; i < 15; i++) {
      step = `calling echo ${i} after the restart`;
      answers.push((await a.call('echo', { i })).env);
    }
    step = 'checking the log';
    // An answer is ok, or says plainly that it could not be recorded; never internal.
    const wrong = answers.filter((e) => !e.ok && e.error?.kind !== 'audit_unavailable');
    expect(wrong, `${a.stderr()} worker: ${w.stderr()}`).toEqual([]);
    expect(
      answers.slice(2).filter((e) => !e.ok),
      'calls made after the restart',
    ).toEqual([]);
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    onTestFinished(() => pool.end());
    // Every answered call that was recorded has exactly one forge.called, and every ok one was recorded.
    const called = (await entries(pool, 'forge.called')).filter((e) => e.data.name === 'echo' || e.data.name === 'test.sleep');
    const okAnswers = answers.filter((e) => e.ok).length + 1;
    expect(called.filter((e) => e.data.ok).length, JSON.stringify(answers.slice(0, 2))).toBe(okAnswers);
    expect(new Set(called.map((e) => e.data.call_id)).size).toBe(called.length);
  });
});

describe('the audit tree of a database served over HTTP', () => {
  it('forge serve --http with --store postgres serves the database’s tiles and signed tree checkpoint, as the entries give them', {
    timeout: scaled(180_000),
  }, async () => {
    const url = await server.database();
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    onTestFinished(() => pool.end());
    const h = host(url);
    const keys = generateSigningKeys();
    h.env.FORGE_AUDIT_KEY = join(h.root, 'audit.key');
    writeFileSync(h.env.FORGE_AUDIT_KEY, keys.privateKey, { mode: 0o600 });
    const vkey = noteVerifierKey('forge-operator', createPrivateKey(keys.privateKey));
    const { url: mcp } = await serveHttp(h);
    const client = new Client({ name: 'tree', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(mcp));
    onTestFinished(() => client.close());
    expect(
      (await client.callTool({ name: 'forge_tool', arguments: py('echo', 'print(json.dumps({"ok": True, "data": args}))') })).isError,
    ).toBe(false);
    for (let i = 0; i < 5; i++) expect((await client.callTool({ name: 'echo', arguments: { i } })).isError).toBe(false);
    const get = (rel: string) => fetch(new URL(`/audit/log/${rel}`, mcp));
    // The entries in the database, as leaves: the tree a monitor must find.
    const lines = (await pool.query<{ line: string }>('SELECT line FROM forge_audit_entries ORDER BY seq')).rows.map((r) =>
      r.line.slice(0, -1),
    );
    const tree = new MemoryTree();
    for (const l of lines) tree.append(Buffer.from(l, 'utf8'));
    const size = (await pool.query<{ tree_size: string }>('SELECT tree_size FROM forge_audit_head WHERE id = 1')).rows[0]?.tree_size;
    expect(Number(size)).toBe(lines.length);
    expect(lines.length).toBeLessThan(256);
    const partial = await get(tilePath({ level: 0, index: 0, width: lines.length }));
    expect(partial.status).toBe(200);
    expect(Buffer.from(await partial.arrayBuffer()).equals(Buffer.concat(lines.map((l) => leafHash(Buffer.from(l, 'utf8')))))).toBe(true);
    // Past what the tree holds, and a full tile it does not have yet: not found.
    expect((await get(tilePath({ level: 0, index: 0, width: lines.length + 1 }))).status).toBe(404);
    expect((await get(tilePath({ level: 0, index: 0, width: 256 }))).status).toBe(404);
    // The checkpoint is the newest the database recorded (the server writes one within seconds
    // of an append), signed by the operator's key, and its head is the head of the entries it covers.
    const newest = async () =>
      (await pool.query<{ note: string; size: string }>('SELECT note, size FROM forge_audit_tree_checkpoints ORDER BY id DESC LIMIT 1'))
        .rows[0];
    await until(
      async () => Number((await newest())?.size ?? 0) >= lines.length,
      scaled(60_000),
      () => 'a tree checkpoint covering the calls in the database',
    );
    const note = (await newest())?.note;
    const now = (await pool.query<{ line: string }>('SELECT line FROM forge_audit_entries ORDER BY seq')).rows.map((r) =>
      r.line.slice(0, -1),
    );
    for (const l of now.slice(tree.size)) tree.append(Buffer.from(l, 'utf8'));
    const served = await get('checkpoint');
    expect(served.status).toBe(200);
    const text = await served.text();
    expect(text).toBe(note);
    const opened = openNote(text, [vkey]);
    expect(opened.ok).toBe(true);
    const cp = parseTreeCheckpoint((opened as { text: string }).text);
    if (typeof cp === 'string') throw new Error(cp);
    expect(Buffer.from(cp.root).equals(Buffer.from(treeHead(tree, cp.size)))).toBe(true);
    expect((await fetch(new URL('/audit/log/checkpoint', mcp), { method: 'POST' })).status).toBe(405);
  });
});
