import pg from 'pg';
import { describeError, PostgresStoreError } from './errors.js';
import { redactUrl, secretsOf } from './url.js';

/** A pool to use, whether the caller gave one or a connection string (then it is ours to end). */
export interface PoolHandle {
  pool: pg.Pool;
  /** Whether this package created the pool (and so ends it on close). */
  owned: boolean;
  /** What to call the database in messages: the redacted URL, or "the database". */
  label: string;
  /** Passwords to scrub from messages. */
  secrets: string[];
}

/**
 * Wraps `target`: a `pg.Pool` is used as given; a connection string gets a pool of its own of
 * `max` connections whose idle-client errors are swallowed (pg would otherwise crash the process)
 * and reported on the next query instead.
 */
export function poolFor(target: pg.Pool | string, max = 4): PoolHandle {
  if (typeof target !== 'string') return { pool: target, owned: false, label: 'the database', secrets: [] };
  const secrets = secretsOf(target);
  let pool: pg.Pool;
  try {
    pool = new pg.Pool({ connectionString: target, max });
  } catch (err) {
    throw new PostgresStoreError('connect_failed', `connection string ${redactUrl(target)} is invalid: ${describeError(err, secrets)}`, {
      cause: err,
      secrets,
    });
  }
  pool.on('error', () => {});
  return { pool, owned: true, label: redactUrl(target), secrets };
}

/** Connects once to prove the server is there, mapping failure to `connect_failed` (redacted). */
export async function checkConnection(h: PoolHandle): Promise<void> {
  try {
    const c = await h.pool.connect();
    c.release();
  } catch (err) {
    throw new PostgresStoreError(
      'connect_failed',
      `cannot connect to ${h.label}: ${describeError(err, h.secrets)}; check that the server runs and the connection string is right`,
      { cause: err, secrets: h.secrets },
    );
  }
}
