import type { Migration } from './migration.js';

/**
 * The job queue's versioned migrations (versions 20–29 of the package's list): forge's own table
 * beside the engine's. pg-boss installs and migrates its own schema (`pgboss`) on start, after these.
 */
export const QUEUE_MIGRATIONS: readonly Migration[] = [
  {
    version: 20,
    name: 'job queue',
    sql: `
      -- One row per forge job (id unique for the queue's lifetime), keyed by the caller's id. The
      -- delivery itself (the claim, the retry after a lost worker) is the engine's: engine_id is
      -- the pg-boss job in queue "queue". Payloads, notes and results are kept as json (their
      -- exact text); times are ms since the epoch by the clock of the process that wrote them.
      CREATE TABLE forge_queue_jobs (
        queue text NOT NULL,
        id text NOT NULL,
        engine_id uuid NOT NULL UNIQUE,
        state text NOT NULL CHECK (state IN ('pending', 'claimed', 'done', 'failed', 'cancelled')),
        payload json NOT NULL,
        published_at bigint NOT NULL,
        attempt integer NOT NULL DEFAULT 0,
        worker text,
        token uuid,
        lease_expires_at bigint,
        note json,
        cancel_reason text,
        result_payload json,
        result_attempt integer,
        finished_at bigint,
        PRIMARY KEY (queue, id)
      );
      CREATE INDEX forge_queue_jobs_claimed ON forge_queue_jobs (queue, lease_expires_at) WHERE state = 'claimed';
      CREATE INDEX forge_queue_jobs_pending ON forge_queue_jobs (queue, published_at) WHERE state = 'pending';
    `,
  },
];
