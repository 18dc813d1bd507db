import type pg from 'pg';
import type PgBoss from 'pg-boss';

/** The engine's own timeout of an active job: its maximum (just under 24 h). Forge's lease decides first. */
const ENGINE_EXPIRE_S = 24 * 3600 - 60;
/** Retries the engine allows: forge's recover decides when a job is exhausted. */
const ENGINE_RETRY_LIMIT = 1_000_000;

/** Key of the session-level advisory lock around the engine's install (ASCII "forgeq"). */
const INSTALL_LOCK = '112628846781809';

/**
 * Starts the engine (which installs its schema when its `migrate` option says so) and creates
 * `queue` in it, under the install lock (see {@link underInstallLock}).
 */
export async function installEngine(pool: pg.Pool, boss: PgBoss, queue: string): Promise<void> {
  await underInstallLock(pool, async () => {
    await boss.start();
    await boss.createQueue(queue, { name: queue, policy: 'standard', retryLimit: ENGINE_RETRY_LIMIT, expireInSeconds: ENGINE_EXPIRE_S });
  });
}

/**
 * Runs `fn` (the engine's schema install and queue creation) while holding an advisory lock on a
 * connection of its own: processes started at once on a fresh database install one after the
 * other. The engine's install is not safe to run concurrently (two `CREATE SCHEMA` at once: one
 * fails with a duplicate key on `pg_namespace`), and forge's migration lock is taken per
 * transaction on another connection, so it cannot cover it.
 */
async function underInstallLock(pool: pg.Pool, fn: () => Promise<void>): Promise<void> {
  const c = await pool.connect();
  let broken: unknown;
  try {
    await c.query('SELECT pg_advisory_lock($1)', [INSTALL_LOCK]);
    try {
      await fn();
    } finally {
      await c.query('SELECT pg_advisory_unlock($1)', [INSTALL_LOCK]).catch((err: unknown) => {
        // A connection that cannot unlock is destroyed: its session's lock goes with it.
        broken = err;
      });
    }
  } catch (err) {
    broken ??= err;
    throw err;
  } finally {
    c.release(broken instanceof Error ? broken : undefined);
  }
}
