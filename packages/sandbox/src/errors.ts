/** Stable error codes of this package. Test `error.code`, not `instanceof`. */
export const SANDBOX_ERROR_CODES = [
  /** The host cannot build the sandbox (see `probe()` for the cause and its fix). Nothing ran. */
  'sandbox_unavailable',
  /** A bind path was refused: outside the allowed roots, a symlink, a special file, denied. */
  'bind_denied',
  /** The runtime name is not in the table; the message lists the available ones. */
  'unknown_runtime',
  /** The profile is malformed (relative paths, bad limits, …); the message names the field. */
  'invalid_profile',
  /**
   * The run ended, but what the tool wrote to a per-run output directory could not be copied out
   * of the sandbox into that directory (not writable, for one); the message names it.
   */
  'output_unmoved',
] as const;

export type SandboxErrorCode = (typeof SANDBOX_ERROR_CODES)[number];

/** The one error class of `@forge/sandbox`. `code` is stable; `message` says what to do. */
export class SandboxError extends Error {
  override readonly name = 'SandboxError';
  readonly code: SandboxErrorCode;
  /**
   * True when the system was short of descriptors or processes and nothing was started: the same
   * run may start once other runs of this process have ended and freed theirs.
   */
  readonly transient: boolean;

  constructor(code: SandboxErrorCode, message: string, options?: { cause?: unknown; transient?: boolean }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.transient = options?.transient === true;
  }
}
