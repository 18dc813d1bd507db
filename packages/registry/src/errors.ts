/**
 * Stable error codes of this package, thrown as `RegistryError` for bugs and environment
 * problems only. Expected outcomes (a name taken, an invalid spec) are returned as
 * `{ ok: false, kind, message }` instead. Test `error.code`, not `instanceof`.
 */
export const REGISTRY_ERROR_CODES = [
  /** A scope root cannot be created, read or written (permissions, a file in the way, a full disk). */
  'root_unusable',
  /** The lock on a tool name could not be taken in time: another process holds it. Retry. */
  'lock_timeout',
  /** An option is malformed: a relative path, a bad session or task id, a scope with no root. */
  'invalid_option',
] as const;

/** One of `REGISTRY_ERROR_CODES`. */
export type RegistryErrorCode = (typeof REGISTRY_ERROR_CODES)[number];

/** The one error class of `@forge/registry`. `code` is stable; `message` says what to do. */
export class RegistryError extends Error {
  override readonly name = 'RegistryError';
  readonly code: RegistryErrorCode;

  constructor(code: RegistryErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}
