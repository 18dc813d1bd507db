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
import { isConnectionLost, retryLostConnection } from './retry.js';
import { redactUrl } from './url.js';

/** The LISTEN/NOTIFY channel of the queue: payloads `p:<queue>`, `r:<queue>:<id>`, `c:<queue>:<id>`. */
export const QUEUE_CHANNEL = 'forge_queue';

/** The named steps of the Postgres queue (crash tests): each right after its statement. */
export const POSTGRES_QUEUE_STEPS = {
  publish: ['publish.insert', 'publish.send', 'publish.commit', 'publish.notify'],
  claim: ['claim.fetch', 'claim.mark', 'claim.commit'],
  lease: ['lease.armed'],
  renew: ['renew.update'],
  note: ['note.update'],
  finish: ['finish.mark', 'finish.complete', 'finish.commit', 'finish.notify'],
  recover: ['recover.lock', 'recover.engine', 'recover.commit'],
} as const;

/** One named step of POSTGRES_QUEUE_STEPS. */
export type PostgresQueueStep = (typeof POSTGRES_QUEUE_STEPS)[keyof typeof POSTGRES_QUEUE_STEPS][number];

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
/** The engine's own timeout of an active job: its maximum (just under 24 h). Forge's lease decides first. */
const ENGINE_EXPIRE_S = 24 * 3600 - 60;
/** Retries the engine allows: forge's recover decides when a job is exhausted. */
const ENGINE_RETRY_LIMIT = 1_000_000;

type Tx = pg.PoolClient;

interface Held {
  job: ClaimedJob;
  token: string;
  controller: AbortController;
  timer: NodeJS.Timeout;
  chain: Promise<unknown>;
  ended: boolean;
}

interface Waiter {
  key: string;
  wake: () => void;
}

/** A pg-boss `db` over one client: the engine's statement joins our transaction. */
function onClient(c: Tx): PgBoss.Db {
  return { executeSql: (text: string, values: unknown[]) => c.query(text, values) };
}

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
  const fail = (what: string, err: unknown): QueueError =>
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
    await underInstallLock(h.pool, async () => {
      await boss.start();
      await boss.createQueue(queue, { name: queue, policy: 'standard', retryLimit: ENGINE_RETRY_LIMIT, expireInSeconds: ENGINE_EXPIRE_S });
    });
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

/** Key of the session-level advisory lock around the engine's install (ASCII "forgeq"). */
const INSTALL_LOCK = '112628846781809';

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
  private readonly held = new Map<string, Held>();
  private readonly waiters = new Set<Waiter>();
  private listener: pg.PoolClient | undefined;
  private listening: Promise<void> | undefined;

  constructor(
    private readonly h: PoolHandle,
    private readonly boss: PgBoss,
    private readonly s: Settings,
    private readonly fail: (what: string, err: unknown) => QueueError,
  ) {
    this.where = `${h.label}#${s.queue}`;
    this.leaseMs = s.leaseMs;
  }

  private step(name: PostgresQueueStep): void {
    this.s.onStep?.(name);
  }

  private open(): void {
    if (this.closed) throw new QueueError('closed', `the job queue ${this.where} was closed; open it again to use it`);
  }

  /**
   * Runs `fn` in a transaction on one client; QueueErrors pass, anything else is queue_unusable
   * naming `what`. Run again when the server rolled it back (a deadlock: a claim and a cancel of
   * one job, each holding one of its two rows; a serialization failure), and when the connection
   * was lost before the COMMIT was sent (a database restart): it did not happen. A COMMIT lost on
   * its way has an unknown outcome and is not run again.
   */
  private async tx<T>(what: string, fn: (c: Tx) => Promise<T>): Promise<T> {
    let rollbacks = 0;
    try {
      return await retryLostConnection(
        () => this.tx1(fn),
        (err) => {
          if (err instanceof QueueError || (err as { committing?: boolean }).committing) return false;
          const code = (err as { code?: unknown }).code;
          if ((code === '40P01' || code === '40001') && ++rollbacks < 5) return true;
          return isConnectionLost(err);
        },
      );
    } catch (err) {
      throw this.fail(what, err);
    }
  }

  private async tx1<T>(fn: (c: Tx) => Promise<T>): Promise<T> {
    const c = await this.h.pool.connect();
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
  private async query<R extends pg.QueryResultRow>(what: string, text: string, values: unknown[]): Promise<pg.QueryResult<R>> {
    try {
      return await retryLostConnection(() => this.h.pool.query<R>(text, values));
    } catch (err) {
      throw this.fail(what, err);
    }
  }

  /** NOTIFY after the commit (a NOTIFY inside a transaction takes a global lock at its commit). */
  private async notify(payload: string): Promise<void> {
    await this.h.pool.query('SELECT pg_notify($1, $2)', [QUEUE_CHANNEL, payload]).catch(() => {});
  }

  /** Ensures the one LISTEN connection of this handle; a lost one is re-made on the next use and every waiter looks again. */
  private ensureListening(): Promise<void> {
    if (this.listening) return this.listening;
    if (this.closed) return Promise.reject(new QueueError('closed', `the job queue ${this.where} was closed; open it again to use it`));
    this.listening = (async () => {
      const c = await this.h.pool.connect();
      if (this.closed) {
        c.release();
        throw new QueueError('closed', `the job queue ${this.where} was closed; open it again to use it`);
      }
      const lost = () => {
        if (this.listener !== c) return;
        this.listener = undefined;
        this.listening = undefined;
        c.release(true);
        for (const w of this.waiters) w.wake();
      };
      c.on('error', lost);
      c.on('end', lost);
      c.on('notification', (m) => this.onNotification(m.payload ?? ''));
      await c.query(`LISTEN ${QUEUE_CHANNEL}`);
      this.listener = c;
    })().catch((err) => {
      this.listening = undefined;
      throw this.fail('listening for queue changes', err);
    });
    return this.listening;
  }

  private onNotification(payload: string): void {
    const [kind, queue, id] = payload.split(':');
    if (queue !== this.s.queue) return;
    if (kind === 'c' && id) {
      const h = this.held.get(id);
      if (h && !h.ended) this.checkCancel(h).catch(() => {});
      return;
    }
    const key = kind === 'p' ? 'p' : `r:${id}`;
    for (const w of this.waiters) if (w.key === key) w.wake();
  }

  /** Waits until a notification for `key`, `ms` passed, or `signal` aborted. */
  private sleep(key: string, ms: number, signal?: AbortSignal): { done: Promise<void>; cancel(): void } {
    let waiter: Waiter | undefined;
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const done = new Promise<void>((resolve) => {
      const finish = () => {
        if (waiter) this.waiters.delete(waiter);
        if (timer) clearTimeout(timer);
        if (onAbort) signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      waiter = { key, wake: finish };
      this.waiters.add(waiter);
      timer = setTimeout(finish, Math.max(0, ms));
      onAbort = finish;
      signal?.addEventListener('abort', onAbort, { once: true });
    });
    return { done, cancel: () => waiter?.wake() };
  }

  async publish(job: { id: string; payload: JsonValue }): Promise<void> {
    this.open();
    const id = checkId(job?.id);
    const payload = jsonText(job.payload, `the payload of job ${id}`);
    const engineId = randomUUID();
    const added = await this.tx(`publishing job ${id} in ${this.where}`, async (c) => {
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
    await this.notify(`p:${this.s.queue}`);
    this.step('publish.notify');
  }

  async claim(worker: string): Promise<ClaimedJob | undefined> {
    this.open();
    checkWorker(worker);
    for (;;) {
      const token = randomUUID();
      const expires = this.s.now() + this.s.leaseMs;
      const got = await this.tx(`claiming a job in ${this.where}`, async (c) => {
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
      return this.hold(got, worker, token, expires);
    }
  }

  private hold(
    row: { id: string; payload: string; note: string | null; attempt: number },
    worker: string,
    token: string,
    expires: number,
  ): ClaimedJob {
    const controller = new AbortController();
    const job: ClaimedJob = {
      id: row.id,
      payload: JSON.parse(row.payload) as JsonValue,
      attempt: row.attempt,
      worker,
      ...(row.note === null ? {} : { note: JSON.parse(row.note) as JsonValue }),
      leaseExpiresAt: expires,
      signal: controller.signal,
    };
    const h: Held = { job, token, controller, timer: undefined as unknown as NodeJS.Timeout, chain: Promise.resolve(), ended: false };
    h.timer = setInterval(
      () => {
        h.chain = h.chain.then(() => this.renew(h)).catch(() => {});
      },
      Math.max(10, Math.floor(this.s.leaseMs / 3)),
    );
    h.timer.unref?.();
    this.held.set(job.id, h);
    this.step('lease.armed');
    // A cancel may have been marked before this handle listened: look once.
    void this.ensureListening()
      .then(() => this.checkCancel(h))
      .catch(() => {});
    return job;
  }

  private release(h: Held): void {
    h.ended = true;
    clearInterval(h.timer);
    if (this.held.get(h.job.id) === h) this.held.delete(h.job.id);
  }

  private lost(h: Held): void {
    this.release(h);
    if (!h.controller.signal.aborted) {
      h.controller.abort(
        new QueueError(
          'lease_lost',
          `job ${h.job.id} in ${this.where} is no longer held by ${h.job.worker}: its lease ran out and it was recovered, or it was finished`,
        ),
      );
    }
  }

  private async renew(h: Held): Promise<void> {
    if (h.ended || this.closed) return;
    const expires = this.s.now() + this.s.leaseMs;
    const r = await this.h.pool.query<{ cancel_reason: string | null }>(
      `UPDATE forge_queue_jobs SET lease_expires_at = $4 WHERE queue = $1 AND id = $2 AND token = $3 AND state = 'claimed'
       RETURNING cancel_reason`,
      [this.s.queue, h.job.id, h.token, expires],
    );
    this.step('renew.update');
    if (r.rowCount === 0) return this.lost(h);
    h.job.leaseExpiresAt = expires;
    const reason = r.rows[0]?.cancel_reason;
    if (reason != null && !h.controller.signal.aborted) h.controller.abort(reason);
  }

  private async checkCancel(h: Held): Promise<void> {
    const r = await this.h.pool.query<{ cancel_reason: string | null }>(
      'SELECT cancel_reason FROM forge_queue_jobs WHERE queue = $1 AND id = $2 AND token = $3',
      [this.s.queue, h.job.id, h.token],
    );
    const reason = r.rows[0]?.cancel_reason;
    if (reason != null && !h.controller.signal.aborted) h.controller.abort(reason);
  }

  private heldOf(job: ClaimedJob): Held | undefined {
    const h = this.held.get(job?.id);
    return h && h.job === job ? h : undefined;
  }

  async next(
    worker: string,
    options: { signal: AbortSignal; onExhausted?: (job: ExhaustedJob) => Promise<JsonValue> },
  ): Promise<ClaimedJob | undefined> {
    this.open();
    checkWorker(worker);
    const signal = options.signal;
    await this.ensureListening();
    while (!signal.aborted && !this.closed) {
      // Listen before looking, so that a publish between the look and the sleep wakes us (again
      // after a lost connection; the look below then says why when the database is away).
      if (!this.listener) await this.ensureListening().catch(() => {});
      let woke = false;
      const nap = this.sleep('p', this.s.rescanMs, signal);
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
        const r = await this.query<{ t: string | null }>(
          `looking at the leases of ${this.where}`,
          "SELECT min(lease_expires_at)::text AS t FROM forge_queue_jobs WHERE queue = $1 AND state = 'claimed'",
          [this.s.queue],
        );
        const next = r.rows[0]?.t;
        if (next != null) {
          const ms = Number(next) - this.s.now() + 5;
          if (ms < this.s.rescanMs) {
            const early = this.sleep('p', ms, signal);
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
    const h = this.heldOf(job);
    const run = async () => {
      const r = await this.query(
        `saving a note of job ${job.id} in ${this.where}`,
        `UPDATE forge_queue_jobs SET note = $4::json WHERE queue = $1 AND id = $2 AND token = $3 AND state = 'claimed'`,
        [this.s.queue, job.id, h?.token ?? '00000000-0000-0000-0000-000000000000', text],
      );
      this.step('note.update');
      if (!h || r.rowCount === 0) {
        if (h) this.lost(h);
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
    const h = this.heldOf(job);
    if (!h) return 'conflict';
    const run = async (): Promise<'finished' | 'conflict'> => {
      const ok = await this.tx(`finishing job ${job.id} in ${this.where}`, async (c) => {
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
        this.lost(h);
        return 'conflict';
      }
      this.release(h);
      this.step('finish.commit');
      await this.notify(`r:${this.s.queue}:${job.id}`);
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
    const r = await this.query<{ state: string; payload: string; attempt: number; finished_at: string }>(
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
    await this.ensureListening();
    for (;;) {
      if (options.signal?.aborted || this.closed) return undefined;
      // Listening again before looking (the connection was lost: a restart): a finish between
      // the look and the nap then wakes it. While it cannot listen, it looks again every second.
      const listening =
        this.listener !== undefined ||
        (await this.ensureListening().then(
          () => true,
          () => false,
        ));
      const nap = this.sleep(`r:${id}`, Math.min(deadline - Date.now(), listening ? this.s.rescanMs * 12 : 1000), options.signal);
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
    const outcome = await this.tx(`cancelling job ${id} in ${this.where}`, async (c) => {
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
    if (outcome === 'cancelled') await this.notify(`r:${this.s.queue}:${id}`);
    if (outcome === 'signalled') {
      await this.notify(`c:${this.s.queue}:${id}`);
      const h = this.held.get(id);
      if (h && !h.controller.signal.aborted) h.controller.abort(why);
    }
    return outcome;
  }

  async recover(options: { now?: number; onExhausted?: (job: ExhaustedJob) => Promise<JsonValue> } = {}): Promise<RecoverReport> {
    this.open();
    const now = options.now ?? this.s.now();
    const report: RecoverReport = { returned: [], failed: [], conflicts: [] };
    const r = await this.query<{ id: string }>(
      `looking for lost workers in ${this.where}`,
      "SELECT id FROM forge_queue_jobs WHERE queue = $1 AND state = 'claimed' AND lease_expires_at < $2 ORDER BY lease_expires_at",
      [this.s.queue, now],
    );
    for (const { id } of r.rows) {
      const outcome = await this.tx(`recovering job ${id} in ${this.where}`, async (c) => {
        const q = await c.query<{ engine_id: string; attempt: number; payload: string; note: string | null }>(
          `SELECT engine_id, attempt, payload::text AS payload, note::text AS note FROM forge_queue_jobs
           WHERE queue = $1 AND id = $2 AND state = 'claimed' AND lease_expires_at < $3 FOR UPDATE SKIP LOCKED`,
          [this.s.queue, id, now],
        );
        const row = q.rows[0];
        if (!row) return undefined;
        this.step('recover.lock');
        const engine = await c.query<{ state: string }>(`SELECT state FROM ${this.s.schema}.job WHERE name = $1 AND id = $2`, [
          this.s.queue,
          row.engine_id,
        ]);
        const engineState = engine.rows[0]?.state;
        if (engineState !== 'active') {
          return { conflict: `the engine's job ${row.engine_id} is ${engineState ?? 'missing'}, not active; left for an operator` };
        }
        if (row.attempt >= this.s.maxAttempts) {
          const note = row.note === null ? undefined : (JSON.parse(row.note) as JsonValue);
          const exhausted: ExhaustedJob = {
            id,
            payload: JSON.parse(row.payload) as JsonValue,
            attempts: row.attempt,
            ...(note === undefined ? {} : { note }),
          };
          const payload = options.onExhausted ? await options.onExhausted(exhausted) : { error: 'worker_lost', attempts: row.attempt };
          await c.query(
            `UPDATE forge_queue_jobs SET state = 'failed', result_payload = $3::json, result_attempt = attempt, finished_at = $4,
               token = NULL, lease_expires_at = NULL WHERE queue = $1 AND id = $2`,
            [this.s.queue, id, jsonText(payload, `the exhausted result of job ${id}`), this.s.now()],
          );
          await this.boss.complete(this.s.queue, row.engine_id, {}, { db: onClient(c) });
          this.step('recover.engine');
          return 'failed' as const;
        }
        await c.query(
          `UPDATE forge_queue_jobs SET state = 'pending', worker = NULL, token = NULL, lease_expires_at = NULL WHERE queue = $1 AND id = $2`,
          [this.s.queue, id],
        );
        // The engine's retry: the job goes back to state retry and is fetched again.
        await this.boss.fail(this.s.queue, row.engine_id, { error: 'worker_lost' }, { db: onClient(c) });
        this.step('recover.engine');
        return 'returned' as const;
      });
      if (outcome === undefined) continue;
      this.step('recover.commit');
      if (outcome === 'failed') {
        report.failed.push(id);
        await this.notify(`r:${this.s.queue}:${id}`);
      } else if (outcome === 'returned') {
        report.returned.push(id);
      } else {
        report.conflicts.push({ id, reason: outcome.conflict });
      }
      const h = this.held.get(id);
      if (h && typeof outcome === 'string') this.lost(h);
    }
    if (report.returned.length) await this.notify(`p:${this.s.queue}`);
    return report;
  }

  async stats(): Promise<QueueStats> {
    this.open();
    const r = await this.query<{ state: string; n: string; oldest: string | null }>(
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
    for (const h of [...this.held.values()]) this.release(h);
    for (const w of [...this.waiters]) w.wake();
    await this.listening?.catch(() => {});
    const l = this.listener;
    this.listener = undefined;
    this.listening = undefined;
    if (l) {
      await l.query(`UNLISTEN ${QUEUE_CHANNEL}`).catch(() => {});
      l.release();
    }
    await this.boss.stop({ graceful: false, close: false, wait: true }).catch(() => {});
    if (this.h.owned) await this.h.pool.end().catch(() => {});
  }
}
