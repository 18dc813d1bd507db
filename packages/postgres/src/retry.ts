import { setTimeout as sleep } from 'node:timers/promises';

/**
 * SQLSTATEs of a connection the server ended or could not give: class 08 (connection exception),
 * `57P01` admin shutdown, `57P02` crash shutdown, `57P03` cannot connect now (starting up).
 */
const LOST_STATES = /^(08...|57P0[123])$/;
/** What a socket says when the server went away under it, or is not there yet. */
const LOST_SOCKET = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ENOENT', 'ETIMEDOUT']);
/** pg's own words for a connection that ended, and for a pool wait that ran out. */
const LOST_WORDS = /^(Connection terminated|Client has encountered a connection error|timeout exceeded when trying to connect)/;

/**
 * Whether `err` (or its cause) says the connection was lost or could not be made: a restart, a
 * network cut, a server still starting. Such a statement did not run, or ran in a transaction the
 * server rolled back, unless it was the COMMIT itself (whose fate is unknown).
 */
export function isConnectionLost(err: unknown): boolean {
  for (let e = err as { code?: unknown; message?: unknown; cause?: unknown } | undefined, n = 0; e && n < 4; e = e.cause as typeof e, n++) {
    if (typeof e.code === 'string' && (LOST_STATES.test(e.code) || LOST_SOCKET.has(e.code))) return true;
    if (typeof e.message === 'string' && LOST_WORDS.test(e.message)) return true;
  }
  return false;
}

/** How long a statement is tried again over a lost connection (a restart takes a few seconds). */
export const RECONNECT_WINDOW_MS = 30_000;

/**
 * Runs `fn`, and again (backing off from 50 ms to 1 s) while it fails with a lost connection and
 * `RECONNECT_WINDOW_MS` has not passed; `fn` must be safe to run again after such a failure
 * (a read, an idempotent write, or a transaction whose COMMIT was not sent). The last error
 * otherwise.
 */
export async function retryLostConnection<T>(fn: () => Promise<T>, canRetry: (err: unknown) => boolean = isConnectionLost): Promise<T> {
  const deadline = Date.now() + RECONNECT_WINDOW_MS;
  let wait = 50;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (!canRetry(err) || Date.now() + wait > deadline) throw err;
      await sleep(wait);
      wait = Math.min(wait * 2, 1000);
    }
  }
}
