import type { ExhaustedJob, JsonValue } from '@forge/queue';
import { jsonText } from '@forge/queue';
import type PgBoss from 'pg-boss';
import { onClient, type Tx } from './queue-db.js';
import type { PostgresQueueStep } from './queue-steps.js';

/** What recovering one job did: it went back to the queue, it failed (exhausted), or it is an operator's. */
export type RecoverOutcome = 'returned' | 'failed' | { conflict: string } | undefined;

/** What {@link recoverJob} needs of its queue. */
export interface RecoverContext {
  boss: PgBoss;
  queue: string;
  /** The engine's schema. */
  schema: string;
  maxAttempts: number;
  now: () => number;
  step: (name: PostgresQueueStep) => void;
  onExhausted: ((job: ExhaustedJob) => Promise<JsonValue>) | undefined;
}

/**
 * Recovers job `id`, held by a worker whose lease ran out before `expiredBefore`, inside the
 * transaction of `c`: back to the queue by the engine's retry, or failed with the exhausted
 * result once it had its attempts. Undefined when another recover took it or it is no longer
 * expired; a conflict when the engine's job is not active.
 */
export async function recoverJob(c: Tx, ctx: RecoverContext, id: string, expiredBefore: number): Promise<RecoverOutcome> {
  const q = await c.query<{ engine_id: string; attempt: number; payload: string; note: string | null }>(
    `SELECT engine_id, attempt, payload::text AS payload, note::text AS note FROM forge_queue_jobs
     WHERE queue = $1 AND id = $2 AND state = 'claimed' AND lease_expires_at < $3 FOR UPDATE SKIP LOCKED`,
    [ctx.queue, id, expiredBefore],
  );
  const row = q.rows[0];
  if (!row) return undefined;
  ctx.step('recover.lock');
  const engine = await c.query<{ state: string }>(`SELECT state FROM ${ctx.schema}.job WHERE name = $1 AND id = $2`, [
    ctx.queue,
    row.engine_id,
  ]);
  const engineState = engine.rows[0]?.state;
  if (engineState !== 'active') {
    return { conflict: `the engine's job ${row.engine_id} is ${engineState ?? 'missing'}, not active; left for an operator` };
  }
  if (row.attempt >= ctx.maxAttempts) {
    const note = row.note === null ? undefined : (JSON.parse(row.note) as JsonValue);
    const exhausted: ExhaustedJob = {
      id,
      payload: JSON.parse(row.payload) as JsonValue,
      attempts: row.attempt,
      ...(note === undefined ? {} : { note }),
    };
    const payload = ctx.onExhausted ? await ctx.onExhausted(exhausted) : { error: 'worker_lost', attempts: row.attempt };
    await c.query(
      `UPDATE forge_queue_jobs SET state = 'failed', result_payload = $3::json, result_attempt = attempt, finished_at = $4,
         token = NULL, lease_expires_at = NULL WHERE queue = $1 AND id = $2`,
      [ctx.queue, id, jsonText(payload, `the exhausted result of job ${id}`), ctx.now()],
    );
    await ctx.boss.complete(ctx.queue, row.engine_id, {}, { db: onClient(c) });
    ctx.step('recover.engine');
    return 'failed';
  }
  await c.query(
    `UPDATE forge_queue_jobs SET state = 'pending', worker = NULL, token = NULL, lease_expires_at = NULL WHERE queue = $1 AND id = $2`,
    [ctx.queue, id],
  );
  // The engine's retry: the job goes back to state retry and is fetched again.
  await ctx.boss.fail(ctx.queue, row.engine_id, { error: 'worker_lost' }, { db: onClient(c) });
  ctx.step('recover.engine');
  return 'returned';
}
