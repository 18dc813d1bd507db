/**
 * A database that misbehaves under forge: statements cancelled by `statement_timeout`, and a
 * server frozen (SIGSTOP, as a host under memory pressure or a paused VM). Every answer names the
 * cause and what to check; none hangs; nothing acknowledged is lost; forge works again once the
 * database does, and the log verifies.
 */
import { execFileSync } from 'node:child_process';
import { scaled } from '@forge/test-utils';
import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { exampleSpec, runCli, scratch } from './helpers.js';
import { usePostgres } from './postgres-helpers.js';

const server = usePostgres();

/** A host on its own home and project over the database at `url`, with fib forged. */
async function hostWithFib(url: string) {
  const s = scratch('forge-pg-faults-');
  s.env.FORGE_STORE = url;
  const o = { cwd: s.project, env: s.env, timeoutMs: 180_000 };
  const made = await runCli(['tools', 'forge', s.file('fib.json', JSON.stringify(exampleSpec('fib')))], o);
  expect(made.code, made.stderr).toBe(0);
  return o;
}

/** Sends `signal` to the postmaster and its children (the server's every process). */
function signalServer(signal: NodeJS.Signals): void {
  const kids = execFileSync('ps', ['-o', 'pid=', '--ppid', String(server.pid)], { encoding: 'utf8' })
    .trim()
    .split(/\s+/);
  for (const pid of [String(server.pid), ...kids].filter(Boolean)) {
    try {
      process.kill(Number(pid), signal);
    } catch {
      // gone between the listing and the signal
    }
  }
}

describe('PostgreSQL faults', () => {
  it('statement_timeout cancels a statement stuck behind a lock: the call is refused naming it, then works again', {
    timeout: scaled(300_000),
  }, async () => {
    const url = await server.database();
    const o = await hostWithFib(url);
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    onTestFinished(() => pool.end());
    const db = (/\/\/[^/]*\/([^?]+)/.exec(url) as RegExpExecArray)[1];
    await pool.query(`ALTER DATABASE ${db} SET statement_timeout = '200ms'`);
    // Another session holds the log's head row: every append waits behind it, and is cancelled.
    const holder = await pool.connect();
    await holder.query('BEGIN');
    await holder.query('SELECT * FROM forge_audit_head FOR UPDATE');
    const before = (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM forge_audit_entries')).rows[0]?.n;
    const stuck = await runCli(['tools', 'call', 'fib', '{"n": 5}'], o);
    await holder.query('ROLLBACK');
    holder.release();
    expect(stuck.code).not.toBe(0);
    expect(stuck.stdout + stuck.stderr).toMatch(/statement timeout/);
    expect(stuck.stdout + stuck.stderr).toMatch(/forge doctor/);
    expect((await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM forge_audit_entries')).rows[0]?.n).toBe(before);
    const again = await runCli(['tools', 'call', 'fib', '{"n": 6}'], o);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ ok: true, data: { fib: '8' } });
    const verified = await runCli(['audit', 'verify'], o);
    expect(verified.code, verified.stdout).toBe(0);
  });

  it('a frozen server: a call is refused within the connection wait, naming the cause; once it thaws, calls work and the log verifies', {
    timeout: scaled(300_000),
  }, async () => {
    const url = await server.database();
    const o = await hostWithFib(url);
    signalServer('SIGSTOP');
    let frozen: Awaited<ReturnType<typeof runCli>>;
    try {
      frozen = await runCli(['tools', 'call', 'fib', '{"n": 7}'], { ...o, timeoutMs: 120_000 });
    } finally {
      signalServer('SIGCONT');
    }
    expect(frozen.code).not.toBe(0);
    expect(frozen.stderr).toMatch(/cannot connect to postgres:\/\/forge@\/.*connection timeout.*forge doctor/);
    const thawed = await runCli(['tools', 'call', 'fib', '{"n": 8}'], o);
    expect(thawed.code, thawed.stderr).toBe(0);
    expect(JSON.parse(thawed.stdout)).toMatchObject({ ok: true, data: { fib: '21' } });
    const verified = await runCli(['audit', 'verify'], o);
    expect(verified.code, verified.stdout).toBe(0);
  });
});
