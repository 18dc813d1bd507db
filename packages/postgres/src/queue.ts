/**
 * The JobQueue of forge across many hosts: pg-boss (the engine) delivers, forge's table
 * `forge_queue_jobs` keeps what the engine has no place for.
 *
 * The engine's: the job table (`pgboss.job`, one queue), the claim (`fetch`: FOR UPDATE SKIP
 * LOCKED, oldest first), the retry of a job whose worker was lost (`fail` -> state retry), the
 * cancel of a queued job (`cancel`), completion, archiving, and its schema install on start.
 * Forge's: the caller's job id (unique for the queue's lifetime), the payload, the holder's
 * renewed lease, the durable note, the result (never overwritten), the cancel mark of a held job,
 * and the wake-ups (LISTEN/NOTIFY on one channel, each NOTIFY sent after its transaction
 * committed). Publish, claim, finish, cancel and recover are each one transaction holding both the
 * engine's statements and forge's.
 */
import { randomUUID } from 'node:crypto';
import type { ClaimedJob, ExhaustedJob, JobQueue, JobResult, JsonValue, QueueOptions, QueueStats, RecoverReport } from '@forge/queue';
import { checkId, checkWorker, jsonText, QueueError } from '@forge/queue';
import type pg from 'pg';
import PgBoss from 'pg-boss';
import { describeError } from './errors.js';
import { migrate } from './migrate.js';
import { type PoolHandle, poolFor } from './pool.js';
import { onClient, QueueDb, type QueueFail } from './queue-db.js';
import { installEngine } from './queue-install.js';
import { Leases } from './queue-lease.js';
import { QueueListener } from './queue-listen.js';
import { recoverJob } from './queue-recover.js';
import type { PostgresQueueStep } from './queue-steps.js';
import { redactUrl } from './url.js';

export { QUEUE_CHANNEL } from './queue-db.js';
export { POSTGRES_QUEUE_STEPS, type PostgresQueueStep } from './queue-steps.js';

/** Options of {@link openPostgresQueue}: the JobQueue options and where the queue lives. */
export interface PostgresQueueOptions extends QueueOptions {
  /** The engine's queue name (default `forge_calls`): queues of other names in the same database are apart. */
  queue?: string;
  /** The engine's schema (default `pgboss`). */
  engineSchema?: string;
  /** Run forge's migrations and the engine's install on open (default true). */
  migrate?: boolean;
  /** Let the engine's supervisor run here (archiving finished engine rows; default true). */
  supervise?: boolean;
  /** How long a waiting `next()` sleeps at most between looks when nothing woke it (ms, default 5000). */
  rescanMs?: number;
  /** Called right after each named step (crash tests). */
  onStep?: (step: PostgresQueueStep) => void;
  /** What messages call the database when `target` is a pool (a URL: its password is masked anyway). */
  where?: string;
}

const QUEUE_NAME = /^[A-Za-z0-9_]{1,50}$/;

/**
 * Opens the PostgreSQL job queue on `target` (a pool, used as given, or a connection string: a
 * pool of our own, ended on close). Runs forge's versioned migrations (20–29: `forge_queue_jobs`),
 * then the engine's schema install, unless `migrate` is false. Any number of processes on any
 * number of hosts may open the same database and queue name. Errors name the database with its
 * password masked.
 */
export async function openPostgresQueue(target: pg.Pool | string, options: PostgresQueueOptions = {}): Promise<JobQueue> {
  const leaseMs = options.leaseMs ?? 15_000;
  const maxAttempts = options.maxAttempts ?? 2;
  const queue = options.queue ?? 'forge_calls';
  const schema = options.engineSchema ?? 'pgboss';
  if (!Number.isFinite(leaseMs) || leaseMs < 30)
    throw new QueueError('invalid_job', `leaseMs must be a number of at least 30 (got ${leaseMs})`);
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1)
    throw new QueueError('invalid_job', `maxAttempts must be a positive integer (got ${maxAttempts})`);
  if (!QUEUE_NAME.test(queue))
    throw new QueueError('invalid_job', `queue name ${JSON.stringify(queue)} is not valid: use 1 to 50 of A-Z a-z 0-9 _`);
  if (!QUEUE_NAME.test(schema))
    throw new QueueError('invalid_job', `engine schema ${JSON.stringify(schema)} is not valid: use 1 to 50 of A-Z a-z 0-9 _`);
  const h = poolFor(target, 8);
  if (typeof target !== 'string' && options.where !== undefined) h.label = redactUrl(options.where);
  const fail: QueueFail = (what, err) =>
    err instanceof QueueError
      ? err
      : new QueueError('queue_unusable', `${what} on ${h.label} failed: ${describeError(err, h.secrets)}`, { cause: err });
  const boss = new PgBoss({
    db: { executeSql: (text: string, values: unknown[]) => h.pool.query(text, values) },
    schema,
    migrate: options.migrate ?? true,
    supervise: options.supervise ?? true,
    schedule: false,
  });
  boss.on('error', () => {});
  try {
    if (options.migrate ?? true) await migrate(h.pool);
    await installEngine(h.pool, boss, queue);
  } catch (err) {
    await boss.stop({ graceful: false, close: false, wait: true }).catch(() => {});
    if (h.owned) await h.pool.end().catch(() => {});
    throw fail('opening the job queue', err);
  }
  return new PostgresQueue(
    h,
    boss,
    { schema, leaseMs, maxAttempts, queue, rescanMs: options.rescanMs ?? 5000, now: options.now ?? Date.now, onStep: options.onStep },
    fail,
  );
}

interface Settings {
  schema: string;
  leaseMs: number;
  maxAttempts: number;
  queue: string;
  rescanMs: number;
  now: () => number;
  onStep: ((step: PostgresQueueStep) => void) | undefined;
}

class PostgresQueue implements JobQueue {
  readonly kind = 'postgres';
  readonly where: string;
  readonly leaseMs: number;
  private closed = false;
  private readonly db: QueueDb;
  private readonly listen: QueueListener;
  private readonly leases: Leases;

  constructor(
    private readonly h: PoolHandle,
    private readonly boss: PgBoss,
    private readonly s: Settings,
    fail: QueueFail,
  ) {
    this.where = `${h.label}#${s.queue}`;
    this.leaseMs = s.leaseMs;
    this.db = new QueueDb(h, fail);
    this.listen = new QueueListener(h, s.queue, this.where, fail, (id) => this.leases.cancelMarked(id));
    this.leases = new Leases(this.db, {
      queue: s.queue,
      where: this.where,
      leaseMs: s.leaseMs,
      now: s.now,
      step: (name) => this.step(name),
      closed: () => this.closed,
      listen: () => this.listen.ensure(),
    });
  }

  private step(name: PostgresQueueStep): void {
    this.s.onStep?.(name);
  }

  private open(): void {
    if (this.closed) throw new QueueError('closed', `the job queue ${this.where} was closed; open it again to use it`);
  }

  async publish(job: { id: string; payload: JsonValue }): Promise<void> {
    this.open();
    const id = checkId(job?.id);
    const payload = jsonText(job.payload, `the payload of job ${id}`);
    const engineId = randomUUID();
    const added = await this.db.tx(`publishing job ${id} in ${this.where}`, async (c) => {
      const r = await c.query(
        `INSERT INTO forge_queue_jobs (queue, id, engine_id, state, payload, published_at)
         VALUES ($1, $2, $3, 'pending', $4::json, $5) ON CONFLICT DO NOTHING`,
        [this.s.queue, id, engineId, payload, this.s.now()],
      );
      if (r.rowCount === 0) return false;
      this.step('publish.insert');
      await this.boss.send(this.s.queue, { id }, { id: engineId, db: onClient(c) });
      this.step('publish.send');
      return true;
    });
    if (!added) {
      throw new QueueError(
        'job_exists',
        `job ${id} was published to ${this.where} before (ids are unique for the queue's lifetime); use a new id`,
      );
    }
    this.step('publish.commit');
    await this.db.notify(`p:${this.s.queue}`);
    this.step('publish.notify');
  }

  async claim(worker: string): Promise<ClaimedJob | undefined> {
    this.open();
    checkWorker(worker);
    for (;;) {
      const token = randomUUID();
      const expires = this.s.now() + this.s.leaseMs;
      const got = await this.db.tx(`claiming a job in ${this.where}`, async (c) => {
        const [engineJob] = await this.boss.fetch<{ id: string }>(this.s.queue, { db: onClient(c) });
        if (!engineJob) {
          await c.query('SELECT 1'); // the engine's fetch swallows errors: an aborted transaction shows here
          return undefined;
        }
        this.step('claim.fetch');
        const r = await c.query<{ id: string; payload: string; note: string | null; attempt: number }>(
          `UPDATE forge_queue_jobs SET state = 'claimed', attempt = attempt + 1, worker = $3, token = $4, lease_expires_at = $5
           WHERE queue = $1 AND engine_id = $2 AND state = 'pending'
           RETURNING id, payload::text AS payload, note::text AS note, attempt`,
          [this.s.queue, engineJob.id, worker, token, expires],
        );
        const row = r.rows[0];
        // An engine job without a pending forge row (never expected): take it out of the engine's queue.
        if (!row) {
          await this.boss.cancel(this.s.queue, engineJob.id, { db: onClient(c) });
          return 'orphan' as const;
        }
        this.step('claim.mark');
        return row;
      });
      if (got === 'orphan') continue;
      if (!got) return undefined;
      this.step('claim.commit');
      return this.leases.hold(got, worker, token, expires);
    }
  }

  async next(
    worker: string,
    options: { signal: AbortSignal; onExhausted?: (job: ExhaustedJob) => Promise<JsonValue> },
  ): Promise<ClaimedJob | undefined> {
    this.open();
    checkWorker(worker);
    const signal = options.signal;
    await this.listen.ensure();
    while (!signal.aborted && !this.closed) {
      // Listen before looking, so that a publish between the look and the sleep wakes us (again
      // after a lost connection; the look below then says why when the database is away).
      if (!this.listen.listener) await this.listen.ensure().catch(() => {});
      let woke = false;
      const nap = this.listen.sleep('p', this.s.rescanMs, signal);
      void nap.done.then(() => {
        woke = true;
      });
      await this.recover(options.onExhausted ? { onExhausted: options.onExhausted } : {});
      const job = await this.claim(worker);
      if (job) {
        nap.cancel();
        return job;
      }
      if (!woke) {
        const r = await this.db.query<{ t: string | null }>(
          `looking at the leases of ${this.where}`,
          "SELECT min(lease_expires_at)::text AS t FROM forge_queue_jobs WHERE queue = $1 AND state = 'claimed'",
          [this.s.queue],
        );
        const next = r.rows[0]?.t;
        if (next != null) {
          const ms = Number(next) - this.s.now() + 5;
          if (ms < this.s.rescanMs) {
            const early = this.listen.sleep('p', ms, signal);
            await Promise.race([nap.done, early.done]);
            nap.cancel();
            early.cancel();
            continue;
          }
        }
      }
      await nap.done;
    }
    return undefined;
  }

  async note(job: ClaimedJob, note: JsonValue): Promise<void> {
    this.open();
    const text = jsonText(note, `the note of job ${job?.id}`);
    const h = this.leases.of(job);
    const run = async () => {
      const r = await this.db.query(
        `saving a note of job ${job.id} in ${this.where}`,
        `UPDATE forge_queue_jobs SET note = $4::json WHERE queue = $1 AND id = $2 AND token = $3 AND state = 'claimed'`,
        [this.s.queue, job.id, h?.token ?? '00000000-0000-0000-0000-000000000000', text],
      );
      this.step('note.update');
      if (!h || r.rowCount === 0) {
        if (h) this.leases.lost(h);
        throw new QueueError('lease_lost', `job ${job.id} in ${this.where} is no longer held by ${job.worker}; its note was not saved`);
      }
    };
    if (!h) return run();
    const p = h.chain.then(run);
    h.chain = p.catch(() => {});
    return p;
  }

  async finish(job: ClaimedJob, result: { status: 'done' | 'failed'; payload: JsonValue }): Promise<'finished' | 'conflict'> {
    this.open();
    if (result?.status !== 'done' && result?.status !== 'failed') {
      throw new QueueError(
        'invalid_job',
        `the status of job ${job?.id}'s result must be "done" or "failed" (got ${JSON.stringify(result?.status)})`,
      );
    }
    const text = jsonText(result.payload, `the result of job ${job?.id}`);
    const h = this.leases.of(job);
    if (!h) return 'conflict';
    const run = async (): Promise<'finished' | 'conflict'> => {
      const ok = await this.db.tx(`finishing job ${job.id} in ${this.where}`, async (c) => {
        const r = await c.query<{ engine_id: string }>(
          `UPDATE forge_queue_jobs SET state = $4, result_payload = $5::json, result_attempt = attempt, finished_at = $6,
             token = NULL, lease_expires_at = NULL
           WHERE queue = $1 AND id = $2 AND token = $3 AND state = 'claimed' RETURNING engine_id`,
          [this.s.queue, job.id, h.token, result.status, text, this.s.now()],
        );
        const row = r.rows[0];
        if (!row) return false;
        this.step('finish.mark');
        await this.boss.complete(this.s.queue, row.engine_id, {}, { db: onClient(c) });
        this.step('finish.complete');
        return true;
      });
      if (!ok) {
        this.leases.lost(h);
        return 'conflict';
      }
      this.leases.release(h);
      this.step('finish.commit');
      await this.db.notify(`r:${this.s.queue}:${job.id}`);
      this.step('finish.notify');
      return 'finished';
    };
    const p = h.chain.then(run);
    h.chain = p.catch(() => {});
    return p;
  }

  async result(id: string): Promise<JobResult | undefined> {
    this.open();
    checkId(id);
    const r = await this.db.query<{ state: string; payload: string; attempt: number; finished_at: string }>(
      `reading the result of job ${id} in ${this.where}`,
      `SELECT state, result_payload::text AS payload, result_attempt AS attempt, finished_at::text AS finished_at
       FROM forge_queue_jobs WHERE queue = $1 AND id = $2 AND state IN ('done', 'failed', 'cancelled')`,
      [this.s.queue, id],
    );
    const row = r.rows[0];
    if (!row) return undefined;
    return {
      id,
      status: row.state as JobResult['status'],
      payload: JSON.parse(row.payload) as JsonValue,
      attempt: row.attempt,
      finishedAt: Number(row.finished_at),
    };
  }

  async wait(id: string, options: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<JobResult | undefined> {
    this.open();
    checkId(id);
    const deadline = options.timeoutMs === undefined ? Number.POSITIVE_INFINITY : Date.now() + options.timeoutMs;
    await this.listen.ensure();
    for (;;) {
      if (options.signal?.aborted || this.closed) return undefined;
      // Listening again before looking (the connection was lost: a restart): a finish between
      // the look and the nap then wakes it. While it cannot listen, it looks again every second.
      const listening =
        this.listen.listener !== undefined ||
        (await this.listen.ensure().then(
          () => true,
          () => false,
        ));
      const nap = this.listen.sleep(`r:${id}`, Math.min(deadline - Date.now(), listening ? this.s.rescanMs * 12 : 1000), options.signal);
      const r = await this.result(id);
      if (r) {
        nap.cancel();
        return r;
      }
      if (Date.now() >= deadline) {
        nap.cancel();
        return undefined;
      }
      await nap.done;
    }
  }

  async cancel(id: string, reason: string): Promise<'cancelled' | 'signalled' | 'finished' | 'unknown'> {
    this.open();
    checkId(id);
    const why = typeof reason === 'string' && reason ? reason : 'cancelled';
    const outcome = await this.db.tx(`cancelling job ${id} in ${this.where}`, async (c) => {
      const r = await c.query<{ state: string; engine_id: string; attempt: number }>(
        'SELECT state, engine_id, attempt FROM forge_queue_jobs WHERE queue = $1 AND id = $2 FOR UPDATE',
        [this.s.queue, id],
      );
      const row = r.rows[0];
      if (!row) return 'unknown' as const;
      if (row.state === 'pending') {
        await c.query(
          `UPDATE forge_queue_jobs SET state = 'cancelled', cancel_reason = $3, result_payload = $4::json, result_attempt = attempt, finished_at = $5
           WHERE queue = $1 AND id = $2`,
          [this.s.queue, id, why, JSON.stringify({ reason: why }), this.s.now()],
        );
        await this.boss.cancel(this.s.queue, row.engine_id, { db: onClient(c) });
        return 'cancelled' as const;
      }
      if (row.state === 'claimed') {
        await c.query('UPDATE forge_queue_jobs SET cancel_reason = $3 WHERE queue = $1 AND id = $2', [this.s.queue, id, why]);
        return 'signalled' as const;
      }
      return 'finished' as const;
    });
    if (outcome === 'cancelled') await this.db.notify(`r:${this.s.queue}:${id}`);
    if (outcome === 'signalled') {
      await this.db.notify(`c:${this.s.queue}:${id}`);
      const h = this.leases.get(id);
      if (h && !h.controller.signal.aborted) h.controller.abort(why);
    }
    return outcome;
  }

  async recover(options: { now?: number; onExhausted?: (job: ExhaustedJob) => Promise<JsonValue> } = {}): Promise<RecoverReport> {
    this.open();
    const now = options.now ?? this.s.now();
    const report: RecoverReport = { returned: [], failed: [], conflicts: [] };
    const r = await this.db.query<{ id: string }>(
      `looking for lost workers in ${this.where}`,
      "SELECT id FROM forge_queue_jobs WHERE queue = $1 AND state = 'claimed' AND lease_expires_at < $2 ORDER BY lease_expires_at",
      [this.s.queue, now],
    );
    for (const { id } of r.rows) {
      const outcome = await this.db.tx(`recovering job ${id} in ${this.where}`, (c) =>
        recoverJob(c, { ...this.s, boss: this.boss, step: (name) => this.step(name), onExhausted: options.onExhausted }, id, now),
      );
      if (outcome === undefined) continue;
      this.step('recover.commit');
      if (outcome === 'failed') {
        report.failed.push(id);
        await this.db.notify(`r:${this.s.queue}:${id}`);
      } else if (outcome === 'returned') {
        report.returned.push(id);
      } else {
        report.conflicts.push({ id, reason: outcome.conflict });
      }
      const h = this.leases.get(id);
      if (h && typeof outcome === 'string') this.leases.lost(h);
    }
    if (report.returned.length) await this.db.notify(`p:${this.s.queue}`);
    return report;
  }

  async stats(): Promise<QueueStats> {
    this.open();
    const r = await this.db.query<{ state: string; n: string; oldest: string | null }>(
      `counting the jobs of ${this.where}`,
      `SELECT state, count(*)::text AS n, min(published_at)::text AS oldest FROM forge_queue_jobs WHERE queue = $1 GROUP BY state`,
      [this.s.queue],
    );
    const by = new Map(r.rows.map((row) => [row.state, row]));
    const n = (s: string) => Number(by.get(s)?.n ?? 0);
    const oldest = by.get('pending')?.oldest;
    return {
      pending: n('pending'),
      claimed: n('claimed'),
      done: n('done'),
      failed: n('failed') + n('cancelled'),
      ...(oldest == null ? {} : { oldestPendingMs: Math.max(0, this.s.now() - Number(oldest)) }),
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.leases.releaseAll();
    await this.listen.close();
    await this.boss.stop({ graceful: false, close: false, wait: true }).catch(() => {});
    if (this.h.owned) await this.h.pool.end().catch(() => {});
  }
}
