/** The error codes of the proposal file store: Node's errno code read, an Error with a `code` made. */

/** The errno code of a failed file operation (`ENOENT`, `ELOCKED`, …), or undefined. */
export function errno(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code;
}

/** An Error with a stable `code` (`dir_unusable`, `lock_timeout`) and its cause kept. */
export function codedError(code: string, message: string, cause?: unknown): Error {
  return Object.assign(new Error(message, cause === undefined ? undefined : { cause }), { code });
}
