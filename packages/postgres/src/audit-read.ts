import { type AuditEntry, AuditError, decodeEntry, GENESIS_HASH } from '@forge/audit-chain';
import type pg from 'pg';
import { describeError, PostgresStoreError } from './errors.js';
import type { PoolHandle } from './pool.js';

/** Channel of the change notification: payload is the new head's seq, sent after each batch commits. */
export const AUDIT_CHANNEL = 'forge_audit';

const PAGE = 1000;

/** `err` as thrown by this package: its own errors as they are, anything else `query_failed`, redacted. */
export function asStoreError(err: unknown, h: PoolHandle, what: string): Error {
  if (err instanceof AuditError || err instanceof PostgresStoreError) return err;
  return new PostgresStoreError('query_failed', `${what} on ${h.label} failed: ${describeError(err, h.secrets)}`, {
    cause: err,
    secrets: h.secrets,
  });
}

/** What readEntries takes (PostgresEntriesOptions, restated here to keep the modules acyclic). */
interface ReadOptions {
  from?: number;
  follow?: boolean;
  signal?: AbortSignal;
  pollMs?: number;
}

/**
 * Entries with seq >= `from`, oldest first, in pages of keyset queries, each line checked (hash,
 * shape) and linked to the one before (the entry before `from` anchors the first). With
 * `follow`, waits for later commits until `signal` aborts. Batches commit in seq order (the head
 * row's lock is held to COMMIT), so a reader never sees a later entry before an earlier one.
 */
export async function* readEntries(h: PoolHandle, o: ReadOptions, assertOpen: () => void): AsyncGenerator<AuditEntry> {
  const from = o.from ?? 1;
  if (!Number.isSafeInteger(from) || from < 1) throw new RangeError(`entries({ from: ${from} }): "from" must be a positive integer`);
  assertOpen();
  try {
    yield* readChecked(h, from, o);
  } catch (err) {
    throw asStoreError(err, h, 'reading audit entries');
  }
}

async function* readChecked(h: PoolHandle, from: number, o: ReadOptions): AsyncGenerator<AuditEntry> {
  const corrupt = (seq: number, why: string) =>
    new AuditError(
      'log_corrupt',
      `audit entry ${seq} in ${h.label} ${why}; run verifyPostgresAuditLog (forge doctor) for the full verdict`,
    );
  let prev: string | undefined;
  let expected = from;
  if (from > 1) {
    const a = (await h.pool.query<{ line: string }>('SELECT line FROM forge_audit_entries WHERE seq = $1', [from - 1])).rows[0];
    if (a) {
      const d = decodeEntry(a.line);
      if (!d.ok) throw corrupt(from - 1, `is damaged: ${d.message}`);
      prev = d.entry.hash;
    }
  } else {
    prev = GENESIS_HASH;
  }
  const waker = o.follow ? await listen(h, o.signal) : undefined;
  try {
    for (;;) {
      if (o.signal?.aborted) return;
      waker?.arm();
      const r = await h.pool.query<{ seq: string; line: string }>(
        'SELECT seq, line FROM forge_audit_entries WHERE seq >= $1 ORDER BY seq LIMIT $2',
        [expected, PAGE],
      );
      for (const row of r.rows) {
        const d = decodeEntry(row.line);
        if (!d.ok) throw corrupt(Number(row.seq), `is damaged: ${d.message}`);
        if (d.entry.seq !== expected || Number(row.seq) !== expected) throw corrupt(expected, 'is missing (sequence gap)');
        if (prev !== undefined && d.entry.prev !== prev) throw corrupt(expected, 'does not link to the entry before it');
        prev = d.entry.hash;
        expected++;
        yield d.entry;
      }
      if (r.rows.length === PAGE) continue;
      if (!waker) return;
      await waker.wait(o.pollMs ?? 1000);
    }
  } finally {
    await waker?.close();
  }
}

/**
 * A LISTEN on its own connection. `arm()` before a read, then `wait()` returns at once if a
 * notification (or the abort) came since, else at the next one or after `pollMs`.
 */
async function listen(h: PoolHandle, signal: AbortSignal | undefined) {
  const client: pg.PoolClient = await h.pool.connect();
  let woken = false;
  let wake: (() => void) | undefined;
  const poke = () => {
    woken = true;
    wake?.();
  };
  client.on('notification', poke);
  client.on('error', poke);
  signal?.addEventListener('abort', poke);
  try {
    await client.query(`LISTEN ${AUDIT_CHANNEL}`);
  } catch (err) {
    client.release(true);
    throw err;
  }
  return {
    arm() {
      woken = false;
    },
    wait(pollMs: number): Promise<void> {
      if (woken || signal?.aborted) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, pollMs);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      }).finally(() => {
        wake = undefined;
      });
    },
    async close() {
      signal?.removeEventListener('abort', poke);
      client.off('notification', poke);
      const ok = await client.query(`UNLISTEN ${AUDIT_CHANNEL}`).then(
        () => true,
        () => false,
      );
      client.off('error', poke);
      client.release(ok ? undefined : true);
    },
  };
}
