/** Stable error codes of this package. Test `error.code`, not `instanceof`. */
export const POLICY_ERROR_CODES = [
  /** A policy document or rules file is not valid; the message names the file, line and rule. */
  'policy_invalid',
  /** A policy file exists but cannot be read (permissions, a directory in its place). */
  'policy_unreadable',
] as const;

export type PolicyErrorCode = (typeof POLICY_ERROR_CODES)[number];

/** The one error class of `@forge/policy`. `code` is stable; `message` says what to do. */
export class PolicyError extends Error {
  override readonly name = 'PolicyError';
  readonly code: PolicyErrorCode;

  constructor(code: PolicyErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}
