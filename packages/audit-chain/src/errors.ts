/** Stable error codes thrown by this package. Test `error.code`, not `instanceof`. */
export const AUDIT_ERROR_CODES = [
  /** `data` is not I-JSON (NaN, lone surrogate, cycle, Map, …); the message names the path. */
  'invalid_data',
  /** The event type is empty, too long, uses characters outside the grammar, or is reserved. */
  'invalid_type',
  /** One entry line would exceed `maxEntryBytes`. */
  'entry_too_large',
  /** A write or data sync failed; the batch was rolled back and nothing was acknowledged. */
  'write_failed',
  /**
   * The chain is broken after the latest checkpoint (the last entry included): an entry that is
   * damaged or does not link to the one before it. The message names it; appending would extend
   * damage.
   */
  'log_corrupt',
  /** The log is shorter than, or disagrees with, its latest checkpoint (truncated or rolled back). */
  'log_behind_checkpoint',
  /**
   * A signing key is configured, the log holds entries, and no checkpoint signed by that key
   * covers them (its checkpoints were removed, or were never signed): re-anchor it explicitly.
   */
  'log_unanchored',
  /** The writers' lock could not be taken within `lockTimeoutMs`. */
  'lock_timeout',
  /** The log was closed; no further appends are accepted. */
  'closed',
  /** A key file could not be read or is not an Ed25519 key of the expected kind. */
  'invalid_key',
  /** A file the operation needs could not be read or written (missing directory, permissions). */
  'io_error',
] as const;

export type AuditErrorCode = (typeof AUDIT_ERROR_CODES)[number];

/** The one error class of `@forge/audit-chain`. `code` is stable; `message` says what to do. */
export class AuditError extends Error {
  override readonly name = 'AuditError';
  readonly code: AuditErrorCode;

  constructor(code: AuditErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** Human-readable form of an errno-style failure, for messages. */
export function describeCause(err: unknown): string {
  if (err && typeof err === 'object' && 'code' in err && 'message' in err) {
    return String((err as { message: unknown }).message);
  }
  return String(err);
}
