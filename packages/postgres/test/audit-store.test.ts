/**
 * What the Postgres audit log does beyond the shared suite: group commit (one transaction per
 * batch, many appends per batch), a failed batch rejecting every append of it with nothing
 * stored, NOTIFY after commit coalesced per batch, signed checkpoints in their own table, rotate
 * as a documented no-op, the append-only trigger, and refusing a damaged head or a rolled-back
 * database at open.
 */
import { GENESIS_HASH, generateSigningKeys } from '@forge/audit-chain';
import { waitFor } from '@forge/test-utils';
import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { AUDIT_CHANNEL, openPostgresAuditLog, verifyPostgresAuditLog } from '../src/index.js';
import { codeOf, poolOn, usePostgres } from './helpers.js';

const pgs = usePostgres();

async function openLog(url: string, options: Parameters<typeof openPostgresAuditLog>[1] = {}) {
  const log = await openPostgresAuditLog(url, options);
  onTestFinished(() => log.close());
  return log;
}

describe('group commit', () => {
  it('2000 appends issued at once commit in far fewer transactions, each a run of seqs; nothing lost', async () => {
    const url = await pgs.server().database();
    const batches: { entries: number; firstSeq: number; lastSeq: number }[] = [];
    const log = await openLog(url, { onBatch: (b) => batches.push(b), maxBatchEntries: 300 });
    const pool = poolOn(url);
    const results = await Promise.all(Array.from({ length: 2000 }, (_, i) => log.append('t.burst', { i })));
    expect(results.map((r) => r.seq)).toEqual(Array.from({ length: 2000 }, (_, i) => i + 1));
    expect(batches.reduce((n, b) => n + b.entries, 0)).toBe(2000);
    expect(batches.length).toBeLessThanOrEqual(20);
    expect(batches.every((b) => b.entries <= 300 && b.lastSeq - b.firstSeq + 1 === b.entries)).toBe(true);
    const stored = await pool.query<{ n: string; d: string }>(
      'SELECT count(*) AS n, count(DISTINCT line->>\'i\') AS d FROM (SELECT (substring(line from \'"data":(.*),"prev"\'))::jsonb AS line FROM forge_audit_entries) x',
    );
    expect(stored.rows[0]).toEqual({ n: '2000', d: '2000' });
    expect(await verifyPostgresAuditLog(url)).toMatchObject({ ok: true, entries: 2000 });
    // entries() reads in pages of 1000: across the page boundary, linked from the entry before `from`.
    const seqs: number[] = [];
    for await (const e of log.entries({ from: 999 })) seqs.push(e.seq);
    expect(seqs).toEqual(Array.from({ length: 1002 }, (_, i) => 999 + i));
  });

  it('a batch that fails rejects every append in it, stores nothing of it, and the log goes on', async () => {
    const url = await pgs.server().database();
    const log = await openLog(url);
    await log.append('t.before', 1);
    const pool = poolOn(url);
    // A test-only trigger makes any batch holding a t.poison entry fail inside its transaction.
    await pool.query(`CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.type = 't.poison' THEN RAISE EXCEPTION 'poisoned batch'; END IF; RETURN NEW; END $$;
      CREATE TRIGGER poison BEFORE INSERT ON forge_audit_entries FOR EACH ROW EXECUTE FUNCTION poison();`);
    const same = [log.append('t.a', 1), log.append('t.poison', 2), log.append('t.b', 3)];
    const codes = await Promise.all(same.map(codeOf));
    expect(codes).toEqual(['write_failed', 'write_failed', 'write_failed']);
    const msg = await same[0]?.catch((e: Error) => e.message);
    expect(msg).toMatch(/^append of 3 entries to .* failed and was rolled back: poisoned batch$/);
    expect(await log.head()).toMatchObject({ seq: 1 });
    expect((await pool.query('SELECT count(*)::int AS n FROM forge_audit_entries')).rows[0].n).toBe(1);
    const after = await log.append('t.after', 4);
    expect(after.seq).toBe(2);
    expect(await verifyPostgresAuditLog(url)).toMatchObject({ ok: true, entries: 2 });
  });
  it('a connection killed during COMMIT: the outcome is asked of the server, the batch rejected, nothing stored', async () => {
    const url = await pgs.server().database();
    const log = await openLog(url);
    await log.append('t.before', 1);
    const pool = poolOn(url);
    // A deferred trigger runs at COMMIT: it sleeps there, and the test kills the backend meanwhile.
    await pool.query(`CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.type = 't.slow' THEN PERFORM pg_sleep(30); END IF; RETURN NULL; END $$;
      CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON forge_audit_entries DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW EXECUTE FUNCTION slow_commit();`);
    const slow = log.append('t.slow', 2);
    await waitFor('the COMMIT to sleep in its deferred trigger, and its backend to be killed', async () => {
      const r = await pool.query<{ ok: boolean }>(
        "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()",
      );
      return r.rows.some((x) => x.ok);
    });
    expect(await codeOf(slow)).toBe('write_failed');
    expect((await pool.query('SELECT count(*)::int AS n FROM forge_audit_entries')).rows[0].n).toBe(1);
    expect((await log.append('t.after', 3)).seq).toBe(2);
    expect(await verifyPostgresAuditLog(url)).toMatchObject({ ok: true, entries: 2 });
  });
});

describe('change notification', () => {
  it('NOTIFY forge_audit carries the new head seq, after commit, once per batch', async () => {
    const url = await pgs.server().database();
    const log = await openLog(url);
    const listener = new pg.Client({ connectionString: url });
    await listener.connect();
    onTestFinished(() => listener.end());
    const got: { payload: string; committed: number }[] = [];
    const probe = poolOn(url);
    let waiter: (() => void) | undefined;
    listener.on('notification', (n) => {
      // What a listener sees when woken: the entries of that seq are already committed.
      void probe.query<{ seq: string }>('SELECT max(seq) AS seq FROM forge_audit_entries').then((r) => {
        got.push({ payload: n.payload ?? '', committed: Number(r.rows[0]?.seq) });
        waiter?.();
      });
    });
    await listener.query(`LISTEN ${AUDIT_CHANNEL}`);
    const until = (n: number) =>
      new Promise<void>((resolve) => {
        waiter = () => got.length >= n && resolve();
        waiter();
      });
    await Promise.all(Array.from({ length: 100 }, (_, i) => log.append('t.n', { i })));
    await until(1);
    await log.append('t.n', 'one more');
    await until(2);
    expect(got.map((g) => g.payload)).toEqual(['100', '101']);
    for (const g of got) expect(g.committed).toBeGreaterThanOrEqual(Number(g.payload));
  });
});

describe('entries({ follow })', () => {
  /** Collects a follower's entries in the background; `until(n)` waits for n of them. */
  function follow(log: Awaited<ReturnType<typeof openPostgresAuditLog>>, options: { from?: number; pollMs?: number } = {}) {
    const ac = new AbortController();
    const got: number[] = [];
    let waiter: (() => void) | undefined;
    const done = (async () => {
      for await (const e of log.entries({ ...options, follow: true, signal: ac.signal })) {
        got.push(e.seq);
        waiter?.();
      }
    })();
    const until = (n: number) =>
      new Promise<void>((resolve) => {
        waiter = () => got.length >= n && resolve();
        waiter();
      });
    const stop = async () => {
      ac.abort();
      await done;
    };
    return { got, until, stop };
  }

  it('delivers entries committed later by another handle, woken by NOTIFY, until aborted', async () => {
    const url = await pgs.server().database();
    const writer = await openLog(url);
    const reader = await openLog(url);
    await writer.append('t.a', 1);
    const f = follow(reader, { pollMs: 60_000 }); // a long poll: only the notification can wake it in time
    await f.until(1);
    await Promise.all([writer.append('t.a', 2), writer.append('t.a', 3)]);
    await f.until(3);
    await writer.append('t.a', 4);
    await f.until(4);
    await f.stop();
    expect(f.got).toEqual([1, 2, 3, 4]);
  });

  it('from a seq, and with notifications off the poll still delivers', async () => {
    const url = await pgs.server().database();
    const writer = await openLog(url, { notify: false });
    const reader = await openLog(url);
    for (let i = 0; i < 3; i++) await writer.append('t.a', i);
    const f = follow(reader, { from: 3, pollMs: 50 });
    await f.until(1);
    await writer.append('t.a', 'late');
    await f.until(2);
    await f.stop();
    expect(f.got).toEqual([3, 4]);
  });
});

describe('checkpoints, rotate, head', () => {
  it('checkpoints go in their own table, signed when a key is given, and verify against the key', async () => {
    const url = await pgs.server().database();
    const keys = generateSigningKeys();
    const log = await openLog(url, { signingKey: keys.privateKey });
    expect(await log.head()).toEqual({ seq: 0, hash: GENESIS_HASH });
    await log.append('t.a', { n: 1 });
    const b = await log.append('t.b', { n: 2 });
    const cp = await log.checkpoint();
    expect(cp).toMatchObject({ entries: 2, head: b.hash, segment: 1 });
    expect(cp.sig).toMatch(/==$/);
    const pool = poolOn(url);
    const rows = await pool.query('SELECT entries, head, "offset", key_id, line FROM forge_audit_checkpoints');
    expect(rows.rows).toEqual([
      {
        entries: '2',
        head: b.hash,
        offset: String(cp.offset),
        key_id: cp.key_id,
        line: expect.stringMatching(/^\{"entries":2,.*"sig":".*"\}\n$/),
      },
    ]);
    const bytes = await pool.query<{ n: string }>('SELECT sum(octet_length(line))::text AS n FROM forge_audit_entries');
    expect(cp.offset).toBe(Number(bytes.rows[0]?.n));
    await log.append('t.c', null);
    expect(await verifyPostgresAuditLog(url, { publicKey: keys.publicKey })).toMatchObject({
      ok: true,
      entries: 3,
      checkpoint: { entries: 2, head: b.hash, signed: true, key_id: cp.key_id },
      uncheckpointed: 1,
    });
    const other = generateSigningKeys();
    expect(await verifyPostgresAuditLog(url, { publicKey: other.publicKey })).toMatchObject({
      ok: false,
      first_bad: { reason: 'signature_invalid', seq: 0 },
      checkpoints_ignored: 1,
    });
  });

  it('rotate() seals nothing (one segment in a database): it commits and returns sealed 0', async () => {
    const url = await pgs.server().database();
    const log = await openLog(url);
    const pending = log.append('t.a', 1);
    expect(await log.rotate()).toEqual({ sealed: 0, path: log.path, entries: 1 });
    await pending;
    expect(log.path).not.toMatch(/password/);
  });
});

describe('integrity at rest and at open', () => {
  it('entries and checkpoints are append-only: UPDATE, DELETE and TRUNCATE are refused', async () => {
    const url = await pgs.server().database();
    const log = await openLog(url);
    await log.append('t.a', 1);
    await log.checkpoint();
    const pool = poolOn(url);
    for (const sql of [
      "UPDATE forge_audit_entries SET type = 'x'",
      'DELETE FROM forge_audit_entries',
      'TRUNCATE forge_audit_entries',
      'DELETE FROM forge_audit_checkpoints',
    ]) {
      await expect(pool.query(sql), sql).rejects.toThrow(/the forge audit log is append-only/);
    }
  });

  it('refuses to open when the head row disagrees with the last entry, or the log is behind its checkpoint', async () => {
    const url = await pgs.server().database();
    const log = await openPostgresAuditLog(url);
    for (let i = 0; i < 5; i++) await log.append('t.a', { i });
    await log.checkpoint();
    await log.close();
    const pool = poolOn(url);
    await pool.query('UPDATE forge_audit_head SET seq = 4 WHERE id = 1');
    expect(await codeOf(openPostgresAuditLog(url))).toBe('log_corrupt');
    // A rollback to an older copy: the last entry gone, the head made to match it.
    await pool.query(`ALTER TABLE forge_audit_entries DISABLE TRIGGER USER;
      DELETE FROM forge_audit_entries WHERE seq = 5;
      UPDATE forge_audit_head SET seq = 4, hash = e.hash, bytes = e.end_offset FROM forge_audit_entries e WHERE e.seq = 4 AND id = 1;`);
    const err = (await openPostgresAuditLog(url).catch((e: unknown) => e)) as Error & { code: string };
    expect(err).toMatchObject({ code: 'log_behind_checkpoint' });
    expect(err.message).toMatch(/has 4 entries, fewer than its checkpoint .*5 entries/);
  });

  it('head() and entries() are refused after close', async () => {
    const url = await pgs.server().database();
    const log = await openPostgresAuditLog(url);
    await log.close();
    expect(await codeOf(log.head())).toBe('closed');
    expect(await codeOf(log.append('t.a', 1))).toBe('closed');
    expect(await codeOf(log.checkpoint())).toBe('closed');
    const iterate = async () => {
      for await (const _ of log.entries()) break;
    };
    expect(await codeOf(iterate())).toBe('closed');
  });
});
