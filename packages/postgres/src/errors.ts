import { redactText } from './url.js';

/** Stable error codes of `@forge/postgres`. Test `error.code`, not `instanceof`. */
export const POSTGRES_ERROR_CODES = [
  /** The server could not be reached or refused the connection (the message names it, redacted). */
  'connect_failed',
  /** A query failed; the batch or operation it belonged to was rolled back. */
  'query_failed',
  /** A migration failed; its transaction was rolled back and nothing of it is applied. */
  'migration_failed',
  /** The database was migrated by a newer forge: this version refuses to use it (fail closed). */
  'schema_too_new',
  /** The database is not migrated, or not to the version this code needs. */
  'not_migrated',
  /** The database's encoding is not UTF8, so entry lines could not be stored byte for byte. */
  'wrong_encoding',
  /** A file could not be written (export). */
  'io_error',
] as const;

export type PostgresErrorCode = (typeof POSTGRES_ERROR_CODES)[number];

/**
 * The one error class of `@forge/postgres`. Its message never holds a connection password: every
 * message, the cause's included, goes through {@link redactText}.
 */
export class PostgresStoreError extends Error {
  override readonly name = 'PostgresStoreError';
  readonly code: PostgresErrorCode;

  constructor(code: PostgresErrorCode, message: string, options?: { cause?: unknown; secrets?: readonly string[] }) {
    super(
      redactText(message, options?.secrets),
      options?.cause === undefined ? undefined : { cause: redactCause(options.cause, options.secrets) },
    );
    this.code = code;
  }
}

/** A copy-safe view of an error with its message redacted (pg errors keep their SQLSTATE `code`). */
function redactCause(cause: unknown, secrets: readonly string[] | undefined): unknown {
  if (!(cause instanceof Error)) return typeof cause === 'string' ? redactText(cause, secrets) : cause;
  const clean = redactText(cause.message, secrets);
  if (clean === cause.message && !(cause.stack ?? '').includes('://')) return cause;
  cause.message = clean;
  if (cause.stack) cause.stack = redactText(cause.stack, secrets);
  return cause;
}

/** The message of any thrown value, redacted. */
export function describeError(err: unknown, secrets?: readonly string[]): string {
  const text = err instanceof Error ? err.message || String((err as { code?: unknown }).code ?? err.name) : String(err);
  // pg's words for a pool wait that ran out, said with what it means and what to do.
  if (text === 'timeout exceeded when trying to connect')
    return 'no database connection came free in time: every connection of the pool was in use, or the server did not answer; check `forge doctor`, or raise the pool size';
  return redactText(text, secrets);
}
