import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { waitFor } from '@forge/test-utils';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type PostgresServer, startPostgres } from '../src/postgres.js';

/** The forge-pg- dirs in the temp dir now. */
function pgDirs(): string[] {
  return readdirSync(tmpdir()).filter((n) => n.startsWith('forge-pg-'));
}

/** Whether `pid` is a live process (a zombie counts as gone). */
function alive(pid: number): boolean {
  try {
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z');
  } catch {
    return false;
  }
}

async function query<T extends pg.QueryResultRow>(url: string, sql: string, params: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

describe('startPostgres', () => {
  let server: PostgresServer;
  beforeAll(async () => {
    server = await startPostgres();
    console.log(`throwaway PostgreSQL: initdb ${server.timings.initdbMs} ms, start ${server.timings.startMs} ms`);
  });
  afterAll(() => server?.stop());

  it('serves a Unix socket in its own dir only, as superuser forge, with fsync on', async () => {
    expect(server.url).toBe(`postgres://forge@/postgres?host=${encodeURIComponent(server.dir)}`);
    expect(server.dir).toMatch(/\/forge-pg-[^/]+$/);
    const [row] = await query<{ user: string; fsync: string; listen: string; sockets: string; sync: string }>(
      server.url,
      `select current_user as user, current_setting('fsync') as fsync, current_setting('listen_addresses') as listen,
              current_setting('unix_socket_directories') as sockets, current_setting('synchronous_commit') as sync`,
    );
    expect(row).toEqual({ user: 'forge', fsync: 'on', listen: '', sockets: server.dir, sync: 'on' });
    expect(existsSync(`${server.dir}/.s.PGSQL.5432`)).toBe(true);
    if (process.getuid?.() === 0) {
      // PostgreSQL refuses root: as root the server runs as the postgres system user.
      const status = readFileSync(`/proc/${server.pid}/status`, 'utf8');
      expect(status).not.toMatch(/^Uid:\s+0\s/m);
    }
  });

  it('database() gives each caller a fresh, isolated database', async () => {
    const a = await server.database();
    const b = await server.database('named_db');
    expect(b).toBe(`postgres://forge@/named_db?host=${encodeURIComponent(server.dir)}`);
    await query(a, 'create table t (id int primary key, v text not null)');
    await query(a, 'insert into t values (1, $1)', ['one']);
    expect(await query(a, 'select * from t')).toEqual([{ id: 1, v: 'one' }]);
    await expect(query(b, 'select * from t')).rejects.toMatchObject({ code: '42P01' }); // no such table there
    await expect(server.database('Bad-Name')).rejects.toThrow(/lowercase letters, digits or _/);
  });

  it('serves concurrent clients: 16 connections × 50 transactional increments lose nothing', async () => {
    const url = await server.database();
    await query(url, 'create table counter (id int primary key, n int not null)');
    await query(url, 'insert into counter values (1, 0)');
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        const c = new pg.Client({ connectionString: url });
        await c.connect();
        try {
          for (let i = 0; i < 50; i++) {
            await c.query('begin');
            await c.query('select n from counter where id = 1 for update');
            await c.query('update counter set n = n + 1 where id = 1');
            await c.query('commit');
          }
        } finally {
          await c.end();
        }
      }),
    );
    expect(await query(url, 'select n from counter')).toEqual([{ n: 800 }]);
  });

  it('a second cluster runs beside the first; stop() ends its postmaster and removes its dir', async () => {
    const other = await startPostgres();
    try {
      expect(other.dir).not.toBe(server.dir);
      const url = await other.database();
      await query(url, 'create table only_here (x int)');
      await query(server.url, 'select 1');
      const [row] = await query<{ n: number }>(url, `select count(*)::int as n from pg_tables where tablename = 'only_here'`);
      expect(row?.n).toBe(1);
    } finally {
      await other.stop();
    }
    expect(existsSync(other.dir)).toBe(false);
    expect(alive(other.pid)).toBe(false);
    await other.stop(); // twice is fine
    // The first server is untouched.
    expect(await query(server.url, 'select 1 as one')).toEqual([{ one: 1 }]);
  });

  it('kill9() SIGKILLs the postmaster, leaves no process of it, no shared memory segment and no dir', async () => {
    const other = await startPostgres();
    const text = readFileSync(`${other.dir}/data/postmaster.pid`, 'utf8');
    const shmid = text.split('\n')[6]?.trim().split(/\s+/)[1] as string;
    const segments = () =>
      readFileSync('/proc/sysvipc/shm', 'utf8')
        .split('\n')
        .slice(1)
        .map((l) => l.trim().split(/\s+/)[1]);
    expect(segments()).toContain(shmid);
    const c = new pg.Client({ connectionString: other.url });
    await c.connect();
    c.on('error', () => {}); // the server goes away under it
    const [backend] = (await c.query<{ pid: number }>('select pg_backend_pid() as pid')).rows;
    await other.kill9();
    await c.end().catch(() => {});
    expect(alive(other.pid)).toBe(false);
    expect(alive(backend?.pid as number)).toBe(false);
    expect(existsSync(other.dir)).toBe(false);
    expect(segments()).not.toContain(shmid);
    expect(await query(server.url, 'select 1 as one')).toEqual([{ one: 1 }]);
  });

  it('when the process that started it dies, its watchdog stops the server and removes the dir', async () => {
    const owner = spawn('sleep', ['600'], { stdio: 'ignore' });
    const gone = new Promise((resolve) => owner.on('exit', resolve));
    try {
      const orphan = await startPostgres({ ownerPid: owner.pid as number });
      expect(await query(orphan.url, 'select 1 as one')).toEqual([{ one: 1 }]);
      owner.kill('SIGKILL');
      await gone;
      await waitFor(
        () => `the watchdog to stop the server (${alive(orphan.pid) ? 'still running' : 'stopped'}) and remove ${orphan.dir}`,
        () => !alive(orphan.pid) && !existsSync(orphan.dir),
        { timeoutMs: 30_000, intervalMs: 50 },
      );
      expect(alive(orphan.pid)).toBe(false);
      expect(existsSync(orphan.dir)).toBe(false);
    } finally {
      owner.kill('SIGKILL');
    }
  });
});

describe('startPostgres without server binaries', () => {
  it('fails with the install command and leaves nothing behind', async () => {
    const before = pgDirs();
    const err = await startPostgres({ bin: '/nonexistent/postgresql/bin' }).catch((e: unknown) => e);
    expect(err).toMatchObject({ name: 'PostgresHarnessError', code: 'postgres_missing' });
    expect((err as Error).message).toContain('apt-get install -y postgresql');
    expect((err as Error).message).toContain('bash scripts/setup.sh');
    expect(pgDirs().filter((d) => !before.includes(d))).toEqual([]);
  });
});
