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
 * How long a query waits for a connection of a pool of ours before it fails (ms): a pool whose
 * connections are all held (or a server that does not answer) is an error that names itself,
 * never a wait without end.
 */
export const DEFAULT_CONNECTION_WAIT_MS = 20_000;

/**
 * Wraps `target`: a `pg.Pool` is used as given; a connection string gets a pool of its own of
 * `max` connections, waiting at most `waitMs` for one, whose clients' connection errors, idle or
 * checked out, are swallowed (pg would otherwise crash the process) and reported on the next query instead.
 */
export function poolFor(target: pg.Pool | string, max = 4, waitMs = DEFAULT_CONNECTION_WAIT_MS): PoolHandle {
  if (typeof target !== 'string') return { pool: target, owned: false, label: 'the database', secrets: [] };
  const secrets = secretsOf(target);
  let pool: pg.Pool;
  try {
    pool = new pg.Pool({ connectionString: target, max, connectionTimeoutMillis: waitMs });
  } catch (err) {
    throw new PostgresStoreError('connect_failed', `connection string ${redactUrl(target)} is invalid: ${describeError(err, secrets)}`, {
      cause: err,
      secrets,
    });
  }
  pool.on('error', () => {});
  // The same for a client while it is checked out: between two queries of a transaction, or
  // while a query is being written, a server restart makes pg emit 'error' on the client itself,
  // which with no listener ends the process (a worker died so on a restart). Its next query
  // rejects instead, and the code holding it releases it as broken.
  pool.on('connect', (client) => client.on('error', () => {}));
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
