import { GapStoreError, sanitizeGapRecord } from './gapRecords.js';
import type { GapInput, GapQuery } from './stores.js';
import type { GapRecord } from './types.js';

/** What {@link openGapWriter} needs from a gap store: its name in messages, its clock and its commit. */
export interface GapWriterOptions {
  /** How messages name the store (`gap store <where> is closed; …`). */
  where: string;
  /** The clock for records given without `at`. */
  now: () => number;
  /** Where `note` reports a failure. */
  onError: (err: Error) => void;
  /** Makes one batch of sanitised records durable, in order, all or none; rejects to fail the whole batch. */
  commit: (records: GapRecord[]) => Promise<void>;
  /** Called after a batch failed, before its callers hear of it (the file store forgets its directory). */
  onFailed?: () => void;
}

/** The writing side of a gap store: `record`, `note`, `flush`, `close` of the GapStore interface. */
export interface GapWriter {
  /** Sanitises `r` (`at` defaults to the clock) and queues it; resolves once its batch is committed. */
  record(r: GapInput): Promise<void>;
  /** `record` without waiting: any failure goes to `onError`; never throws. */
  note(r: GapInput): void;
  /** Resolves once every record accepted so far is committed or has failed. */
  flush(): Promise<void>;
  /** The records accepted and not yet committed (queued, or in the batch being committed), in order. */
  pending(): readonly GapRecord[];
  /** Refuses later records (`closed`), then flushes. */
  close(): Promise<void>;
}

/**
 * The group commit every gap store writes through: the records of the calls of one tick go to
 * `commit` as one batch (one lock and one sync, or one transaction), and the batches run one at
 * a time in the order they were queued. Rejects with a {@link GapStoreError}: `invalid_record`
 * (naming the field), `closed`, or what `commit` threw.
 */
export function openGapWriter(o: GapWriterOptions): GapWriter {
  let queue: { record: GapRecord; resolve: () => void; reject: (err: Error) => void }[] = [];
  /** The batch `commit` is writing now. */
  let committing: readonly GapRecord[] = [];
  let running: Promise<void> | undefined;
  let closed = false;

  const drain = async (): Promise<void> => {
    while (queue.length > 0) {
      const batch = queue;
      queue = [];
      committing = batch.map((p) => p.record);
      try {
        await o.commit(committing as GapRecord[]);
        committing = [];
        for (const p of batch) p.resolve();
      } catch (err) {
        committing = [];
        o.onFailed?.();
        for (const p of batch) p.reject(err as Error);
      }
    }
    running = undefined;
  };

  const record = (r: GapInput): Promise<void> => {
    if (closed) return Promise.reject(new GapStoreError('closed', `gap store ${o.where} is closed; open it again to record`));
    const s = sanitizeGapRecord({ ...r, at: r.at ?? o.now() });
    if (!s.ok) return Promise.reject(new GapStoreError('invalid_record', `${s.message}; not recorded`, { field: s.field }));
    return new Promise<void>((resolve, reject) => {
      queue.push({ record: s.record, resolve, reject });
      // Callers of the same tick share one batch: the drain starts after they have queued.
      running ??= Promise.resolve().then(drain);
    });
  };

  const flush = async (): Promise<void> => {
    while (running !== undefined) await running;
  };

  return {
    record,
    note(r) {
      try {
        record(r).catch((err: Error) => o.onError(err));
      } catch (err) {
        o.onError(err as Error);
      }
    },
    flush,
    pending: () => [...committing, ...queue.map((p) => p.record)],
    async close() {
      closed = true;
      await flush();
    },
  };
}

/**
 * The RangeErrors of a gap store's `summary`, thrown before anything is read: a threshold below 1
 * or a negative window.
 */
export function checkGapQuery(q: GapQuery): void {
  if (!(q.threshold >= 1)) throw new RangeError(`summary: threshold must be at least 1 (got ${q.threshold})`);
  if (!(q.windowMs >= 0)) throw new RangeError(`summary: windowMs must be at least 0 (got ${q.windowMs})`);
}
