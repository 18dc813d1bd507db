import { QueueError } from '@forge/queue';
import type pg from 'pg';
import type PgBoss from 'pg-boss';
import type { PoolHandle } from './pool.js';
import { isConnectionLost, retryLostConnection } from './retry.js';

/** The LISTEN/NOTIFY channel of the queue: payloads `p:<queue>`, `r:<queue>:<id>`, `c:<queue>:<id>`. */
export const QUEUE_CHANNEL = 'forge_queue';

/** A client inside a transaction. */
export type Tx = pg.PoolClient;

/** A pg-boss `db` over one client: the engine's statement joins our transaction. */
export function onClient(c: Tx): PgBoss.Db {
  return { executeSql: (text: string, values: unknown[]) => c.query(text, values) };
}

/** Turns a failure of `what` into the QueueError a caller sees (a QueueError passes as it is). */
export type QueueFail = (what: string, err: unknown) => QueueError;

/** The queue's statements on its pool: transactions, single statements, and wake-ups. */
export class QueueDb {
  readonly #h: PoolHandle;
  readonly #fail: QueueFail;

  constructor(h: PoolHandle, fail: QueueFail) {
    this.#h = h;
    this.#fail = fail;
  }

  /**
   * Runs `fn` in a transaction on one client; QueueErrors pass, anything else is queue_unusable
   * naming `what`. Run again when the server rolled it back (a deadlock: a claim and a cancel of
   * one job, each holding one of its two rows; a serialization failure), and when the connection
   * was lost before the COMMIT was sent (a database restart): it did not happen. A COMMIT lost on
   * its way has an unknown outcome and is not run again.
   */
  async tx<T>(what: string, fn: (c: Tx) => Promise<T>): Promise<T> {
    let rollbacks = 0;
    try {
      return await retryLostConnection(
        () => this.#tx1(fn),
        (err) => {
          if (err instanceof QueueError || (err as { committing?: boolean }).committing) return false;
          const code = (err as { code?: unknown }).code;
          if ((code === '40P01' || code === '40001') && ++rollbacks < 5) return true;
          return isConnectionLost(err);
        },
      );
    } catch (err) {
      throw this.#fail(what, err);
    }
  }

  async #tx1<T>(fn: (c: Tx) => Promise<T>): Promise<T> {
    const c = await this.#h.pool.connect();
    let broken: Error | undefined;
    try {
      await c.query('BEGIN');
      const out = await fn(c);
      try {
        await c.query('COMMIT');
      } catch (err) {
        if (err instanceof Error && isConnectionLost(err)) Object.assign(err, { committing: true });
        throw err;
      }
      return out;
    } catch (err) {
      await c.query('ROLLBACK').catch(() => {});
      // A connection that failed under us is not given back to the pool for the next caller.
      if (isConnectionLost(err)) broken = err instanceof Error ? err : new Error(String(err));
      throw err;
    } finally {
      c.release(broken);
    }
  }

  /** One statement on the pool, run again over a lost connection (every caller's statement is a read or idempotent). */
  async query<R extends pg.QueryResultRow>(what: string, text: string, values: unknown[]): Promise<pg.QueryResult<R>> {
    try {
      return await retryLostConnection(() => this.#h.pool.query<R>(text, values));
    } catch (err) {
      throw this.#fail(what, err);
    }
  }

  /** One statement on the pool, as it is: the lease's own statements, whose failures their callers take. */
  raw<R extends pg.QueryResultRow>(text: string, values: unknown[]): Promise<pg.QueryResult<R>> {
    return this.#h.pool.query<R>(text, values);
  }

  /** NOTIFY after the commit (a NOTIFY inside a transaction takes a global lock at its commit). */
  async notify(payload: string): Promise<void> {
    await this.#h.pool.query('SELECT pg_notify($1, $2)', [QUEUE_CHANNEL, payload]).catch(() => {});
  }
}
