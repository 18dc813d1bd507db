/**
 * Migrations on a real server: a fresh database, a re-run, processes migrating at once (each
 * migration applied exactly once), a failing migration rolled back whole, and a database migrated
 * by a newer forge refused before anything changes.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { MIGRATIONS, type Migration, migrate, migrationStatus, openPostgresAuditLog } from '../src/index.js';
import { codeOf, DIST, poolOn, usePostgres } from './helpers.js';

const run = promisify(execFile);
const LATEST = (MIGRATIONS.at(-1) as Migration).version;
const pgs = usePostgres();

describe('migrate', () => {
  it('migrates a fresh database, then has nothing left to do', async () => {
    const pool = poolOn(await pgs.server().database());
    expect(await migrationStatus(pool)).toEqual({
      current: 0,
      latest: LATEST,
      pending: MIGRATIONS.map((m) => ({ version: m.version, name: m.name })),
      unknown: [],
    });
    const first = await migrate(pool);
    expect(first).toEqual({ applied: MIGRATIONS.map((m) => ({ version: m.version, name: m.name })), current: LATEST, latest: LATEST });
    const tables = await pool.query<{ t: string }>(
      "SELECT table_name AS t FROM information_schema.tables WHERE table_name LIKE 'forge_%' ORDER BY 1",
    );
    expect(tables.rows.map((r) => r.t)).toEqual(
      expect.arrayContaining(['forge_audit_checkpoints', 'forge_audit_entries', 'forge_audit_head', 'forge_migrations']),
    );
    expect(await migrate(pool)).toEqual({ applied: [], current: LATEST, latest: LATEST });
    expect(await migrationStatus(pool)).toMatchObject({ current: LATEST, pending: [], unknown: [] });
    const rows = await pool.query('SELECT version, name, applied_at FROM forge_migrations');
    expect(rows.rows).toHaveLength(MIGRATIONS.length);
    expect(rows.rows[0].applied_at).toBeInstanceOf(Date);
  });

  it('one list for every store: opening the audit log migrates the registry and queue tables too, and a second store opens the same database', async () => {
    const url = await pgs.server().database();
    const log = await openPostgresAuditLog(url);
    await log.append('t.a', 1);
    await log.close();
    const pool = poolOn(url);
    const versions = (await pool.query('SELECT version FROM forge_migrations ORDER BY version')).rows.map((r) => r.version);
    expect(versions).toEqual(MIGRATIONS.map((m) => m.version));
    expect(versions).toEqual(expect.arrayContaining([1, 10, 20]));
    expect(await migrate(pool)).toMatchObject({ applied: [] });
    await (await openPostgresAuditLog(url, { migrate: false })).close();
  });

  it('six processes migrating at once apply each migration exactly once', async () => {
    const url = await pgs.server().database();
    // Slow migrations widen the window in which the processes overlap.
    const list: Migration[] = [
      { version: 1, name: 'one', sql: 'SELECT pg_sleep(0.2); CREATE TABLE m_one (x int)' },
      { version: 2, name: 'two', sql: 'SELECT pg_sleep(0.2); CREATE TABLE m_two (x int); INSERT INTO m_two VALUES (1)' },
      { version: 3, name: 'three', sql: 'INSERT INTO m_two VALUES (2)' },
    ];
    const script = `
      import pg from 'pg';
      const { migrate } = await import(${JSON.stringify(DIST)});
      const pool = new pg.Pool({ connectionString: process.argv[1] });
      const r = await migrate(pool, JSON.parse(process.argv[2]));
      await pool.end();
      process.stdout.write(JSON.stringify(r.applied.map((a) => a.version)));
    `;
    const outs = await Promise.all(
      Array.from({ length: 6 }, () =>
        run(process.execPath, ['--input-type=module', '-e', script, url, JSON.stringify(list)], {
          cwd: new URL('..', import.meta.url).pathname,
        }),
      ),
    );
    const applied = outs.flatMap((o) => JSON.parse(o.stdout) as number[]).sort();
    expect(applied).toEqual([1, 2, 3]);
    const pool = poolOn(url);
    expect((await pool.query('SELECT x FROM m_two ORDER BY x')).rows).toEqual([{ x: 1 }, { x: 2 }]);
    expect((await pool.query('SELECT version FROM forge_migrations ORDER BY version')).rows.map((r) => r.version)).toEqual([1, 2, 3]);
  });

  it('a failing migration is rolled back whole and named; those before it stay', async () => {
    const pool = poolOn(await pgs.server().database());
    const list: Migration[] = [
      { version: 1, name: 'good', sql: 'CREATE TABLE m_good (x int)' },
      { version: 2, name: 'bad', sql: 'CREATE TABLE m_bad (x int); SELECT no_such_function()' },
    ];
    const err = await migrate(pool, list).catch((e: unknown) => e as Error & { code: string });
    expect(err).toMatchObject({ code: 'migration_failed' });
    expect((err as Error).message).toMatch(
      /^migration 2 \("bad"\) failed and was rolled back: function no_such_function\(\) does not exist/,
    );
    expect(await migrationStatus(pool, list)).toMatchObject({ current: 1, pending: [{ version: 2, name: 'bad' }] });
    expect((await pool.query("SELECT to_regclass('m_bad') AS t")).rows[0].t).toBeNull();
  });

  it('refuses a database migrated by a newer forge, changing nothing', async () => {
    const url = await pgs.server().database();
    const pool = poolOn(url);
    await migrate(pool);
    await pool.query("INSERT INTO forge_migrations (version, name) VALUES (99, 'from the future')");
    const err = await migrate(pool).catch((e: unknown) => e as Error & { code: string });
    expect(err).toMatchObject({ code: 'schema_too_new' });
    expect((err as Error).message).toBe(
      `the database was migrated to version 99 ("from the future") by a newer forge; this forge knows versions up to ${LATEST} and refuses to use it: upgrade forge on this machine (or point it at another database)`,
    );
    expect(await migrationStatus(pool)).toMatchObject({
      current: 99,
      latest: LATEST,
      pending: [],
      unknown: [{ version: 99, name: 'from the future' }],
    });
    expect(await codeOf(openPostgresAuditLog(url))).toBe('schema_too_new');
    expect(await codeOf(openPostgresAuditLog(url, { migrate: false }))).toBe('schema_too_new');
  });

  it('with migrate: false, an unmigrated database is refused', async () => {
    const url = await pgs.server().database();
    expect(await codeOf(openPostgresAuditLog(url, { migrate: false }))).toBe('not_migrated');
  });
});
