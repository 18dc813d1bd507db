import { QueueError } from '@forge/queue';
import type pg from 'pg';
import type { PoolHandle } from './pool.js';
import { QUEUE_CHANNEL, type QueueFail } from './queue-db.js';

interface Waiter {
  key: string;
  wake: () => void;
}

/** A nap of {@link QueueListener.sleep}: settles once woken, timed out or aborted. */
export interface Nap {
  done: Promise<void>;
  cancel(): void;
}

/**
 * The one LISTEN connection of a queue handle and the naps waiting on it: a publish (`p`) wakes
 * the naps keyed `p`, a result (`r:<id>`) those keyed `r:<id>`; a cancel mark (`c:<id>`) goes to
 * `onCancelMark`. A lost connection is made again on the next use, and every nap wakes to look again.
 */
export class QueueListener {
  /** The connection listening, while there is one. */
  listener: pg.PoolClient | undefined;
  #listening: Promise<void> | undefined;
  #closed = false;
  readonly #waiters = new Set<Waiter>();

  constructor(
    private readonly h: PoolHandle,
    private readonly queue: string,
    private readonly where: string,
    private readonly fail: QueueFail,
    private readonly onCancelMark: (id: string) => void,
  ) {}

  /** Ensures the one LISTEN connection of this handle; a lost one is re-made on the next use and every waiter looks again. */
  ensure(): Promise<void> {
    if (this.#listening) return this.#listening;
    if (this.#closed) return Promise.reject(this.#closedError());
    this.#listening = (async () => {
      const c = await this.h.pool.connect();
      if (this.#closed) {
        c.release();
        throw this.#closedError();
      }
      const lost = () => {
        if (this.listener !== c) return;
        this.listener = undefined;
        this.#listening = undefined;
        c.release(true);
        for (const w of this.#waiters) w.wake();
      };
      c.on('error', lost);
      c.on('end', lost);
      c.on('notification', (m) => this.#onNotification(m.payload ?? ''));
      await c.query(`LISTEN ${QUEUE_CHANNEL}`);
      this.listener = c;
    })().catch((err) => {
      this.#listening = undefined;
      throw this.fail('listening for queue changes', err);
    });
    return this.#listening;
  }

  #closedError(): QueueError {
    return new QueueError('closed', `the job queue ${this.where} was closed; open it again to use it`);
  }

  #onNotification(payload: string): void {
    const [kind, queue, id] = payload.split(':');
    if (queue !== this.queue) return;
    if (kind === 'c' && id) {
      this.onCancelMark(id);
      return;
    }
    const key = kind === 'p' ? 'p' : `r:${id}`;
    for (const w of this.#waiters) if (w.key === key) w.wake();
  }

  /** Waits until a notification for `key`, `ms` passed, or `signal` aborted. */
  sleep(key: string, ms: number, signal?: AbortSignal): Nap {
    let waiter: Waiter | undefined;
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const done = new Promise<void>((resolve) => {
      const finish = () => {
        if (waiter) this.#waiters.delete(waiter);
        if (timer) clearTimeout(timer);
        if (onAbort) signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      waiter = { key, wake: finish };
      this.#waiters.add(waiter);
      timer = setTimeout(finish, Math.max(0, ms));
      onAbort = finish;
      signal?.addEventListener('abort', onAbort, { once: true });
    });
    return { done, cancel: () => waiter?.wake() };
  }

  /** Wakes every nap, and stops listening (the connection goes back to the pool). */
  async close(): Promise<void> {
    this.#closed = true;
    for (const w of [...this.#waiters]) w.wake();
    await this.#listening?.catch(() => {});
    const l = this.listener;
    this.listener = undefined;
    this.#listening = undefined;
    if (l) {
      await l.query(`UNLISTEN ${QUEUE_CHANNEL}`).catch(() => {});
      l.release();
    }
  }
}
