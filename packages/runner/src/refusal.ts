/**
 * Why a call's signal was aborted, for its `cancelled` answer: the reason's message (forge serve
 * says "forge is shutting down (SIGTERM) and the grace period of 1000 ms ended"), else a plain
 * "the call was cancelled" (an abort() without a reason).
 */
export function stopReason(signal: AbortSignal): string {
  const r: unknown = signal.reason;
  if (typeof r === 'string' && r !== '') return r;
  if (r instanceof Error && r.name !== 'AbortError' && r.message !== '') return r.message;
  return 'the call was cancelled';
}

/** A refusal thrown from deep in a step (secrets, binds), turned into the call's audited answer. */
export class RefusalError extends Error {
  constructor(
    readonly kind: string,
    message: string,
    readonly eventType = 'forge.called',
    /** More facts for the refusal's audit entry. */
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }
}
