/**
 * A connection string's password never shows: redactUrl/redactText, and the errors of every entry
 * point when the server refuses or cannot be reached (real connections: a socket directory with
 * no server, a real server and a database that does not exist).
 */
import { describe, expect, it } from 'vitest';
import {
  exportAuditLog,
  migrate,
  migrationStatus,
  openPostgresAuditLog,
  redactText,
  redactUrl,
  verifyPostgresAuditLog,
} from '../src/index.js';
import { poolOn, tempDir, usePostgres } from './helpers.js';

const pgs = usePostgres();
const SECRET = 'Hunter2-s3cr3t';

describe('redactUrl', () => {
  it('masks the user-info password and password parameters, and leaves the rest as written', () => {
    expect(redactUrl(`postgres://forge:${SECRET}@db.example:5432/forge`)).toBe('postgres://forge:***@db.example:5432/forge');
    expect(redactUrl(`postgresql://forge:${SECRET}@/forge?host=%2Ftmp%2Fx&sslmode=require`)).toBe(
      'postgresql://forge:***@/forge?host=%2Ftmp%2Fx&sslmode=require',
    );
    expect(redactUrl(`postgres://forge@h/db?password=${SECRET}&sslpassword=${SECRET}&application_name=a`)).toBe(
      'postgres://forge@h/db?password=***&sslpassword=***&application_name=a',
    );
    expect(redactUrl('postgres://forge@h/db')).toBe('postgres://forge@h/db');
    // A raw "@" or "/" in the password (not URL-encoded) is masked whole.
    expect(redactUrl('postgres://u:p@ss/w0rd@h/db')).toBe('postgres://u:***@h/db');
  });

  it('redactText masks connection strings and keyword passwords inside any text', () => {
    expect(redactText(`failed on postgres://a:${SECRET}@h/db and host=h password='${SECRET}' dbname=x`)).toBe(
      'failed on postgres://a:***@h/db and host=h password=*** dbname=x',
    );
    expect(redactText(`literal ${SECRET} here`, [SECRET])).toBe('literal *** here');
  });
});

describe('errors never show the password', () => {
  function expectRedacted(err: unknown): void {
    const e = err as Error & { code: string; cause?: Error };
    const all = [e.message, String(e.stack), String(e.cause?.message ?? ''), JSON.stringify(e)].join('\n');
    expect(all).not.toContain(SECRET);
    expect(all).not.toContain(encodeURIComponent(SECRET));
  }

  it('a socket directory with no server: connect_failed with the redacted URL, from every entry point', async () => {
    const dir = await tempDir();
    const url = `postgres://forge:${SECRET}@/postgres?host=${encodeURIComponent(dir)}`;
    const qurl = `postgres://forge@/postgres?host=${encodeURIComponent(dir)}&password=${SECRET}`;
    for (const u of [url, qurl]) {
      const errs = await Promise.all([
        openPostgresAuditLog(u).catch((e: unknown) => e),
        exportAuditLog(u, `${dir}/x.log`).catch((e: unknown) => e),
        verifyPostgresAuditLog(u).catch((e: unknown) => e),
      ]);
      for (const err of errs) {
        expect(err).toMatchObject({ code: 'connect_failed' });
        expect((err as Error).message).toContain('***');
        expectRedacted(err);
      }
    }
  });

  it('a real server that refuses the database: connect_failed naming what is wrong, no password', async () => {
    const server = pgs.server();
    const host = encodeURIComponent(server.dir);
    const url = `postgres://forge:${SECRET}@/no_such_db?host=${host}`;
    const err = (await openPostgresAuditLog(url).catch((e: unknown) => e)) as Error;
    expect(err).toMatchObject({ code: 'connect_failed' });
    expect(err.message).toBe(
      `cannot connect to postgres://forge:***@/no_such_db?host=${host}: database "no_such_db" does not exist; check that the server runs and the connection string is right`,
    );
    expectRedacted(err);
  });

  it('migrate and migrationStatus on a pool that cannot connect: redacted too', async () => {
    const dir = await tempDir();
    const pool = poolOn(`postgres://forge:${SECRET}@/postgres?host=${encodeURIComponent(dir)}`);
    const a = await migrate(pool).catch((e: unknown) => e);
    const b = await migrationStatus(pool).catch((e: unknown) => e);
    expect(a).toMatchObject({ code: 'connect_failed' });
    expect(b).toMatchObject({ code: 'query_failed' });
    expectRedacted(a);
    expectRedacted(b);
  });
});
