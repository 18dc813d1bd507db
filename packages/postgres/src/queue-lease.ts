import type { ClaimedJob, JsonValue } from '@forge/queue';
import { QueueError } from '@forge/queue';
import type { QueueDb } from './queue-db.js';
import type { PostgresQueueStep } from './queue-steps.js';

/** A job this handle holds: its lease token, its renewal timer, and the chain its writes queue on. */
export interface Held {
  job: ClaimedJob;
  token: string;
  controller: AbortController;
  timer: NodeJS.Timeout;
  /** The holder's statements (renewals, notes, the finish), one after another. */
  chain: Promise<unknown>;
  ended: boolean;
}

/** A claimed row of `forge_queue_jobs`. */
export interface ClaimedRow {
  id: string;
  payload: string;
  note: string | null;
  attempt: number;
}

/** What the leases of one queue handle need to know. */
export interface LeaseSettings {
  queue: string;
  where: string;
  leaseMs: number;
  now: () => number;
  step: (name: PostgresQueueStep) => void;
  /** True once the handle is closed: renewals stop. */
  closed: () => boolean;
  /** Listens for cancel marks (a cancel may come before this handle listened). */
  listen: () => Promise<void>;
}

/**
 * The jobs one queue handle holds: each lease renewed at a third of its length while held, its
 * signal aborted when the job is cancelled (with the reason) or the lease is lost.
 */
export class Leases {
  readonly #held = new Map<string, Held>();

  constructor(
    private readonly db: QueueDb,
    private readonly s: LeaseSettings,
  ) {}

  /** The job of a claimed row, held from now on: its lease renewed, its cancel mark watched. */
  hold(row: ClaimedRow, worker: string, token: string, expires: number): ClaimedJob {
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
        h.chain = h.chain.then(() => this.#renew(h)).catch(() => {});
      },
      Math.max(10, Math.floor(this.s.leaseMs / 3)),
    );
    h.timer.unref?.();
    this.#held.set(job.id, h);
    this.s.step('lease.armed');
    // A cancel may have been marked before this handle listened: look once.
    void this.s
      .listen()
      .then(() => this.#checkCancel(h))
      .catch(() => {});
    return job;
  }

  /** The job held under `id`, if this handle holds it. */
  get(id: string): Held | undefined {
    return this.#held.get(id);
  }

  /** The hold of `job`, if it is this handle's very job object (not a copy or another attempt). */
  of(job: ClaimedJob): Held | undefined {
    const h = this.#held.get(job?.id);
    return h && h.job === job ? h : undefined;
  }

  /** Stops holding: no more renewals. */
  release(h: Held): void {
    h.ended = true;
    clearInterval(h.timer);
    if (this.#held.get(h.job.id) === h) this.#held.delete(h.job.id);
  }

  /** Stops holding every job (the handle closes). */
  releaseAll(): void {
    for (const h of [...this.#held.values()]) this.release(h);
  }

  /** The lease is gone (recovered, or finished elsewhere): released, and its signal aborted with `lease_lost`. */
  lost(h: Held): void {
    this.release(h);
    if (!h.controller.signal.aborted) {
      h.controller.abort(
        new QueueError(
          'lease_lost',
          `job ${h.job.id} in ${this.s.where} is no longer held by ${h.job.worker}: its lease ran out and it was recovered, or it was finished`,
        ),
      );
    }
  }

  /** A cancel mark was announced for `id`: a held job looks at its row. */
  cancelMarked(id: string): void {
    const h = this.#held.get(id);
    if (h && !h.ended) this.#checkCancel(h).catch(() => {});
  }

  async #renew(h: Held): Promise<void> {
    if (h.ended || this.s.closed()) return;
    const expires = this.s.now() + this.s.leaseMs;
    const r = await this.db.raw<{ cancel_reason: string | null }>(
      `UPDATE forge_queue_jobs SET lease_expires_at = $4 WHERE queue = $1 AND id = $2 AND token = $3 AND state = 'claimed'
       RETURNING cancel_reason`,
      [this.s.queue, h.job.id, h.token, expires],
    );
    this.s.step('renew.update');
    if (r.rowCount === 0) return this.lost(h);
    h.job.leaseExpiresAt = expires;
    const reason = r.rows[0]?.cancel_reason;
    if (reason != null && !h.controller.signal.aborted) h.controller.abort(reason);
  }

  async #checkCancel(h: Held): Promise<void> {
    const r = await this.db.raw<{ cancel_reason: string | null }>(
      'SELECT cancel_reason FROM forge_queue_jobs WHERE queue = $1 AND id = $2 AND token = $3',
      [this.s.queue, h.job.id, h.token],
    );
    const reason = r.rows[0]?.cancel_reason;
    if (reason != null && !h.controller.signal.aborted) h.controller.abort(reason);
  }
}
