/**
 * The job queue every forge deployment dispatches calls through: the file-native queue on one
 * host (file.ts), a PostgreSQL queue engine across many (`@forge/postgres`). Delivery is at least
 * once: a job whose worker died is delivered again (`attempt` counts), so what a job does must be
 * safe to repeat or be made so with `note` (a durable progress note the next attempt reads).
 */

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** A job as published: its id (unique for the queue's lifetime: a second publish of it is refused) and its payload. */
export interface JobRequest {
  /** 1 to 100 characters of `A-Z a-z 0-9 _ -`, starting with a letter or digit. */
  id: string;
  payload: JsonValue;
}

/** A job a worker holds: delivered to it alone until it finishes, gives up the lease, or the lease runs out. */
export interface ClaimedJob {
  id: string;
  payload: JsonValue;
  /** 1 for the first delivery, one more for each delivery after a worker was lost. */
  attempt: number;
  /** Who holds it (the `worker` given to `claim`). */
  worker: string;
  /** What an earlier attempt saved with `note` (the last one), if any. */
  note?: JsonValue;
  /** When the lease runs out unless renewed (ms since the epoch); the queue renews it while the job is held. */
  leaseExpiresAt: number;
  /** Aborted when the job is cancelled (`cancel`) or its lease was lost; `reason` says which. */
  signal: AbortSignal;
}

export type JobStatus = 'done' | 'failed' | 'cancelled';

/** A finished job's result, as `wait` and `result` give it. */
export interface JobResult {
  id: string;
  status: JobStatus;
  payload: JsonValue;
  /** The attempt that finished it (0 when it was cancelled before any worker took it). */
  attempt: number;
  finishedAt: number;
}

/** A job whose worker was lost more times than the queue allows: the caller decides its failed result. */
export interface ExhaustedJob {
  id: string;
  payload: JsonValue;
  attempts: number;
  note?: JsonValue;
}

export interface RecoverReport {
  /** Abandoned claims put back to pending. */
  returned: string[];
  /** Abandoned claims over `maxAttempts`, finished as failed. */
  failed: string[];
  /** Entries that disagree (a claim without a lease, a request in two states): left as they are, for an operator. */
  conflicts: { id: string; reason: string }[];
}

export interface QueueStats {
  pending: number;
  claimed: number;
  done: number;
  failed: number;
  /** Age of the oldest pending job (ms), when there is one. */
  oldestPendingMs?: number;
}

export interface JobQueue {
  /** `file` or `postgres`. */
  readonly kind: string;
  /** Where it lives: a directory, or a connection string without its password. */
  readonly where: string;
  /** How long a claim holds without renewal: a job whose worker died is recovered this long after its last renewal. */
  readonly leaseMs: number;
  /** Publishes a job; resolves once it is durable. `job_exists` when the id was published before. */
  publish(job: JobRequest): Promise<void>;
  /** Claims the oldest pending job for `worker`, or resolves undefined when there is none. */
  claim(worker: string): Promise<ClaimedJob | undefined>;
  /**
   * Claims the next job, waiting for one to be published (woken by the queue's own change signal,
   * not by a busy loop) until `signal` aborts (then undefined). Recovers abandoned claims as it goes.
   */
  next(
    worker: string,
    options: { signal: AbortSignal; onExhausted?: (job: ExhaustedJob) => Promise<JsonValue> },
  ): Promise<ClaimedJob | undefined>;
  /** Saves a durable progress note with the claim; a later attempt of the job gets it as `note`. `lease_lost` when the job is no longer held. */
  note(job: ClaimedJob, note: JsonValue): Promise<void>;
  /**
   * Finishes a held job with its result: `finished`, or `conflict` when the job already has a
   * result (never overwritten) or is no longer held by this worker.
   */
  finish(job: ClaimedJob, result: { status: 'done' | 'failed'; payload: JsonValue }): Promise<'finished' | 'conflict'>;
  /** The result of a finished job, or undefined while it is not finished (or unknown). */
  result(id: string): Promise<JobResult | undefined>;
  /** Waits for a job's result without a busy loop; undefined when `signal` aborts or `timeoutMs` passes first. */
  wait(id: string, options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<JobResult | undefined>;
  /**
   * Cancels a job: a pending one is finished as `cancelled` (no worker will take it):
   * `cancelled`; a held one has its worker's `signal` aborted: `signalled` (the worker finishes it);
   * `finished` when it has a result already; `unknown` for an id the queue does not have.
   */
  cancel(id: string, reason: string): Promise<'cancelled' | 'signalled' | 'finished' | 'unknown'>;
  /**
   * Puts claims whose lease ran out back to pending, or, past `maxAttempts`, finishes them as
   * failed with what `onExhausted` returns (default: `{ error: 'worker_lost', attempts }`).
   */
  recover(options?: { now?: number; onExhausted?: (job: ExhaustedJob) => Promise<JsonValue> }): Promise<RecoverReport>;
  stats(): Promise<QueueStats>;
  /** Stops renewing leases and waiting; held jobs stay claimed until their lease runs out. */
  close(): Promise<void>;
}

export interface QueueOptions {
  /** How long a claim holds without renewal (ms, default 15 000); held jobs are renewed every third of it. */
  leaseMs?: number;
  /** Deliveries of a job whose worker is lost before it fails (default 2). */
  maxAttempts?: number;
  /** Clock (ms since the epoch). */
  now?: () => number;
}
