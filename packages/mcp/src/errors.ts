/** The stable codes of {@link ForgeMcpError}. */
export const FORGE_MCP_ERROR_CODES = ['tokens_required', 'invalid_options', 'listen_failed', 'message_too_large'] as const;
export type ForgeMcpErrorCode = (typeof FORGE_MCP_ERROR_CODES)[number];

/**
 * A server that cannot start as configured: `tokens_required` (a non-loopback bind without bearer
 * tokens), `invalid_options` (a malformed token, persona or origin), `listen_failed` (the address
 * is taken or not ours); `message_too_large` (a stdio server's input ended inside a line over its
 * `maxMessageBytes`: the stream cannot be resynchronised, the session ends; see
 * `StdioServerHandle.failure`). Tool failures are never thrown: they are `isError` results.
 */
export class ForgeMcpError extends Error {
  override readonly name = 'ForgeMcpError';
  constructor(
    readonly code: ForgeMcpErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
