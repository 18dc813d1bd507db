import { type FSWatcher, watch } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { QueueError } from './errors.js';
import { ioError, kindOf, list, parseJson, readRegular, renameFile, renameIfThere, syncDir, tempName, writeNew } from './fsx.js';
import { type Ctx, type FileQueueStep, prepareLayout } from './layout.js';
import { checkId, checkJson, checkWorker, idOfName, requestName, serialise } from './names.js';
import {
  cancelPending,
  claimOne,
  finishRequest,
  type PendingKey,
  pendingInOrder,
  publishJob,
  readCancel,
  readLease,
  writeCancel,
} from './ops.js';
import { asResult } from './records.js';
import { recoverQueue } from './recover.js';
import { ChangeSignal } from './signal.js';
import type { ClaimedJob, ExhaustedJob, JobQueue, JobResult, JsonValue, QueueOptions, QueueStats, RecoverReport } from './types.js';

/** Options of the file queue: the JobQueue options, and a hook called right after each named step (crash tests). */
export interface FileQueueOptions extends QueueOptions {
  onStep?: (step: FileQueueStep) => void;
}

/** How often a waiter re-scans even without a change event (a missed event costs at most this). */
const SAFETY_RESCAN_MS = 1000;

interface Held {
  J: string;
  token: string;
  job: ClaimedJob;
  controller: AbortController;
  timer: NodeJS.Timeout;
  watcher?: FSWatcher;
  /** Renewals, notes and the finish of one job run one at a time. */
  chain: Promise<unknown>;
  ended: boolean;
}

/**
 * Opens (creating when missing, mode 0700) the file-native job queue in `dir`, following the
 * CortexFS shared queue file protocol: `dir/{inbox,pending,lease,claimed,done,failed}`. Any number
 * of processes on this host may open the same directory; every decision is made on disk.
 * Throws `queue_unusable` when the directory cannot be created or written.
 */
export async function openFileQueue(dir: string, options: FileQueueOptions = {}): Promise<JobQueue> {
  const leaseMs = options.leaseMs ?? 15_000;
  const maxAttempts = options.maxAttempts ?? 2;
  if (!Number.isFinite(leaseMs) || leaseMs < 30)
    throw new QueueError('invalid_job', `leaseMs must be a number of at least 30 (got ${leaseMs})`);
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1)
    throw new QueueError('invalid_job', `maxAttempts must be a positive integer (got ${maxAttempts})`);
  const q = await prepareLayout(dir);
  const onStep = options.onStep;
  const ctx: Ctx = {
    q,
    leaseMs,
    maxAttempts,
    now: options.now ?? Date.now,
    host: hostname(),
    step: onStep ? (s) => onStep(s) : () => undefined,
  };
  return new FileQueue(ctx);
}

/** Runs a file operation, turning an unexpected failure into `io_error` naming `path` (QueueErrors pass). */
async function guard<T>(what: string, path: string, op: () => Promise<T>): Promise<T> {
  try {
    return await op();
  } catch (err) {
    throw ioError(what, path, err);
  }
}

class FileQueue implements JobQueue {
  readonly kind = 'file';
  readonly where: string;
  readonly leaseMs: number;
  private closed = false;
  private readonly held = new Map<string, Held>();
  private readonly order = new Map<string, PendingKey>();
  private readonly pendingSignal: ChangeSignal;
  private readonly resultSignal: ChangeSignal;
  private lastRecover = 0;

  constructor(private readonly ctx: Ctx) {
    this.where = ctx.q.root;
    this.leaseMs = ctx.leaseMs;
    this.pendingSignal = new ChangeSignal([ctx.q.pending]);
    this.resultSignal = new ChangeSignal([ctx.q.done, ctx.q.failed]);
  }

  private open(): void {
    if (this.closed) throw new QueueError('closed', `the queue ${this.where} was closed; open it again with openFileQueue()`);
  }

  async publish(job: { id: string; payload: JsonValue }): Promise<void> {
    this.open();
    await publishJob(this.ctx, job);
  }

  async claim(worker: string): Promise<ClaimedJob | undefined> {
    this.open();
    checkWorker(worker);
    for (const [J] of await guard('listing', this.ctx.q.pending, () => pendingInOrder(this.ctx, this.order))) {
      const won = await guard('claiming', join(this.ctx.q.claimed, J), () => claimOne(this.ctx, J, worker));
      if (won) return this.hold(J, worker, won.request.payload, won.lease, won.note);
    }
    return undefined;
  }

  async next(
    worker: string,
    options: { signal: AbortSignal; onExhausted?: (job: ExhaustedJob) => Promise<JsonValue> },
  ): Promise<ClaimedJob | undefined> {
    this.open();
    const { signal } = options;
    for (;;) {
      if (this.closed || signal.aborted) return undefined;
      const seen = this.pendingSignal.version;
      if (Date.now() - this.lastRecover >= Math.min(SAFETY_RESCAN_MS, this.ctx.leaseMs)) {
        this.lastRecover = Date.now();
        await recoverQueue(this.ctx, {
          now: this.ctx.now(),
          full: false,
          ...(options.onExhausted ? { onExhausted: options.onExhausted } : {}),
        });
      }
      const job = await this.claim(worker);
      if (job) return job;
      await this.pendingSignal.wait(Math.min(SAFETY_RESCAN_MS, this.ctx.leaseMs), signal, seen);
    }
  }

  private hold(
    J: string,
    worker: string,
    payload: JsonValue,
    lease: { token: string; attempt: number; expires_at: number },
    note?: JsonValue,
  ): ClaimedJob {
    const controller = new AbortController();
    const job: ClaimedJob = {
      id: idOfName(J) as string,
      payload,
      attempt: lease.attempt,
      worker,
      ...(note === undefined ? {} : { note }),
      leaseExpiresAt: lease.expires_at,
      signal: controller.signal,
    };
    const h: Held = {
      J,
      token: lease.token,
      job,
      controller,
      timer: setInterval(() => this.serial(h, () => this.renew(h)), Math.max(10, Math.floor(this.ctx.leaseMs / 3))),
      chain: Promise.resolve(),
      ended: false,
    };
    h.timer.unref();
    try {
      h.watcher = watch(join(this.ctx.q.claimed, J), { persistent: false }, (_e, name) => {
        if (name === null || String(name) === 'cancel') this.serial(h, () => this.checkCancel(h));
      });
      h.watcher.on('error', () => h.watcher?.close());
    } catch {
      // No inotify watch: the check at each renewal still notices a cancel.
    }
    this.held.set(job.id, h);
    void this.serial(h, () => this.checkCancel(h));
    return job;
  }

  private serial<T>(h: Held, op: () => Promise<T>): Promise<T> {
    const run = h.chain.then(op, op);
    h.chain = run.catch(() => undefined);
    return run;
  }

  private release(h: Held): void {
    h.ended = true;
    clearInterval(h.timer);
    h.watcher?.close();
    if (this.held.get(h.job.id) === h) this.held.delete(h.job.id);
  }

  private lose(h: Held, why: string): void {
    this.release(h);
    h.controller.abort(
      new QueueError(
        'lease_lost',
        `job ${h.job.id} is no longer held by ${h.job.worker}: ${why}; stop working on it (it was or will be delivered again)`,
      ),
    );
  }

  private async checkCancel(h: Held): Promise<void> {
    if (h.ended || h.controller.signal.aborted) return;
    const reason = await readCancel(this.ctx, h.J);
    if (reason !== undefined) h.controller.abort(reason);
  }

  private async stillHeld(h: Held, name = 'worker'): Promise<boolean> {
    const lease = await readLease(this.ctx, h.J, name);
    if (lease?.token !== h.token) return false;
    return (await kindOf(join(this.ctx.q.claimed, h.J, h.J))) === 'file';
  }

  private async renew(h: Held): Promise<void> {
    if (h.ended) return;
    try {
      if (!(await this.stillHeld(h))) return this.lose(h, 'its lease ran out and another process recovered it');
      await this.checkCancel(h);
      const ldir = join(this.ctx.q.lease, h.J);
      const lease = await readLease(this.ctx, h.J);
      if (!lease || h.ended) return;
      const expires = this.ctx.now() + this.ctx.leaseMs;
      const tmp = join(ldir, tempName('renew'));
      await writeNew(tmp, JSON.stringify({ ...lease, expires_at: expires }));
      this.ctx.step('renew.temp');
      renameFile(tmp, join(ldir, 'worker'));
      this.ctx.step('renew.rename');
      await syncDir(ldir);
      this.ctx.step('renew.sync');
      h.job.leaseExpiresAt = expires;
    } catch {
      // A failed renewal is retried at the next tick; if the lease runs out meanwhile, the check above notices.
    }
  }

  private heldFor(job: ClaimedJob): Held {
    const h = this.held.get(job?.id);
    if (!h || h.job !== job) {
      throw new QueueError(
        'lease_lost',
        `job ${job?.id} is not held through this queue (${this.where}); only the process that claimed it may note or finish it`,
      );
    }
    return h;
  }

  async note(job: ClaimedJob, note: JsonValue): Promise<void> {
    this.open();
    const value = checkJson(note, `the note of job ${job?.id}`);
    const h = this.heldFor(job);
    const bytes = serialise({ note: value, at: this.ctx.now(), attempt: job.attempt }, `the note of job ${job.id}`);
    await this.serial(h, async () => {
      if (h.ended || !(await this.stillHeld(h))) {
        throw new QueueError(
          'lease_lost',
          `job ${job.id} is no longer held by ${job.worker}, so its note was not saved; stop working on it`,
        );
      }
      const ldir = join(this.ctx.q.lease, h.J);
      const tmp = join(ldir, tempName('note'));
      try {
        await writeNew(tmp, bytes);
        this.ctx.step('note.temp');
        renameFile(tmp, join(ldir, 'note.json'));
        this.ctx.step('note.rename');
        await syncDir(ldir);
        this.ctx.step('note.sync');
      } catch (err) {
        throw ioError('saving the note', join(ldir, 'note.json'), err);
      }
    });
  }

  async finish(job: ClaimedJob, result: { status: 'done' | 'failed'; payload: JsonValue }): Promise<'finished' | 'conflict'> {
    this.open();
    if (result?.status !== 'done' && result?.status !== 'failed') {
      throw new QueueError(
        'invalid_job',
        `finish of job ${job?.id}: status must be 'done' or 'failed' (got ${JSON.stringify(result?.status)})`,
      );
    }
    const payload = checkJson(result.payload, `the result of job ${job?.id}`);
    const h = this.held.get(job?.id);
    if (!h || h.job !== job) return 'conflict';
    return this.serial(h, async () => {
      if (h.ended || !(await this.stillHeld(h))) {
        this.lose(h, 'its lease was recovered before it finished');
        return 'conflict';
      }
      const ldir = join(this.ctx.q.lease, h.J);
      // Sealing the lease (worker -> finishing) is the arbitration with a recoverer, which renames it too.
      if (!(await renameIfThere(join(ldir, 'worker'), join(ldir, 'finishing')))) {
        this.lose(h, 'its lease was recovered before it finished');
        return 'conflict';
      }
      this.ctx.step('finish.seal');
      this.release(h);
      if (!(await this.stillHeld(h, 'finishing'))) {
        await renameIfThere(join(ldir, 'finishing'), join(ldir, 'worker'));
        return 'conflict';
      }
      const ok = await guard('finishing', join(this.ctx.q.claimed, h.J), () =>
        finishRequest(this.ctx, h.J, result.status, {
          status: result.status,
          payload,
          attempt: job.attempt,
          finished_at: this.ctx.now(),
          worker: job.worker,
        }),
      );
      this.resultSignal.fire(`${h.J}.result`);
      return ok ? 'finished' : 'conflict';
    });
  }

  async result(id: string): Promise<JobResult | undefined> {
    this.open();
    const J = requestName(checkId(id));
    for (const state of ['done', 'failed'] as const) {
      const r = await readRegular(join(this.ctx.q[state], `${J}.result`), 32 * 1024 * 1024);
      if (r.kind !== 'file') continue;
      const res = asResult(parseJson(r.text), id);
      if (res) return res;
    }
    return undefined;
  }

  async wait(id: string, options: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<JobResult | undefined> {
    this.open();
    checkId(id);
    const deadline = options.timeoutMs === undefined ? Number.POSITIVE_INFINITY : Date.now() + options.timeoutMs;
    for (;;) {
      const seen = this.resultSignal.version;
      const r = await this.result(id);
      if (r) return r;
      const left = deadline - Date.now();
      if (this.closed || options.signal?.aborted || left <= 0) return undefined;
      await this.resultSignal.wait(Math.min(SAFETY_RESCAN_MS, left), options.signal, seen);
    }
  }

  async cancel(id: string, reason: string): Promise<'cancelled' | 'signalled' | 'finished' | 'unknown'> {
    this.open();
    return guard('cancelling a job in', this.where, () => this.cancelJob(id, reason));
  }

  private async cancelJob(id: string, reason: string): Promise<'cancelled' | 'signalled' | 'finished' | 'unknown'> {
    const J = requestName(checkId(id));
    const why = typeof reason === 'string' && reason ? reason : 'cancelled';
    for (let tries = 0; tries < 20; tries++) {
      if (await this.result(id)) return 'finished';
      if ((await kindOf(join(this.ctx.q.pending, J))) === 'file') {
        if ((await cancelPending(this.ctx, J, why)) === 'cancelled') {
          this.resultSignal.fire(`${J}.result`);
          return 'cancelled';
        }
        continue;
      }
      if ((await kindOf(join(this.ctx.q.claimed, J))) === 'dir') {
        const w = await writeCancel(this.ctx, J, why);
        if (w !== 'gone') return 'signalled';
        continue;
      }
      return (await this.result(id)) ? 'finished' : 'unknown';
    }
    throw new QueueError('io_error', `cancel of job ${id} in ${this.where} kept racing with workers; try again`);
  }

  async recover(options: { now?: number; onExhausted?: (job: ExhaustedJob) => Promise<JsonValue> } = {}): Promise<RecoverReport> {
    this.open();
    const report = await guard('recovering', this.where, () =>
      recoverQueue(this.ctx, {
        now: options.now ?? this.ctx.now(),
        full: true,
        ...(options.onExhausted ? { onExhausted: options.onExhausted } : {}),
      }),
    );
    if (report.failed.length) this.resultSignal.fire(null);
    return report;
  }

  async stats(): Promise<QueueStats> {
    this.open();
    const { q } = this.ctx;
    const count = async (dir: string) => (await list(dir)).filter((n) => idOfName(n) !== undefined).length;
    const pending = await pendingInOrder(this.ctx, this.order);
    const oldest = pending[0]?.[1].publishedAt;
    return {
      pending: pending.length,
      claimed: await count(q.claimed),
      done: await count(q.done),
      failed: await count(q.failed),
      ...(oldest === undefined ? {} : { oldestPendingMs: Math.max(0, this.ctx.now() - oldest) }),
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const h of [...this.held.values()]) this.release(h);
    this.pendingSignal.close();
    this.resultSignal.close();
  }
}
