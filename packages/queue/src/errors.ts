/** Stable error codes thrown by this package. Test `error.code`, not `instanceof`. */
export const QUEUE_ERROR_CODES = [
  /** The job id breaks the grammar, or the payload is not JSON (or larger than the cap); the message names the spot. */
  'invalid_job',
  /** A job with this id was published before (it is pending, held or finished): ids are unique for the queue's lifetime. */
  'job_exists',
  /** The job is no longer held by this worker: its lease ran out and another process recovered it, or it was finished. */
  'lease_lost',
  /** The queue was closed; open it again to use it. */
  'closed',
  /** The queue directory cannot be created, read or written, or is not a directory; the message names it. */
  'queue_unusable',
  /** A file operation the queue needs failed (disk full, permissions changed underneath, ...). */
  'io_error',
] as const;

export type QueueErrorCode = (typeof QUEUE_ERROR_CODES)[number];

/** The one error class of `@forge/queue`. `code` is stable; `message` says what, where, and what to do. */
export class QueueError extends Error {
  override readonly name = 'QueueError';
  readonly code: QueueErrorCode;

  constructor(code: QueueErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** The message of an errno-style failure, for the text of a QueueError. */
export function describeCause(err: unknown): string {
  if (err && typeof err === 'object' && 'message' in err) return String((err as { message: unknown }).message);
  return String(err);
}
