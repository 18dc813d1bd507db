import { scaled } from './time.js';

/** How {@link waitFor} waits. */
export interface WaitOptions {
  /** The limit before the scale (see time.ts); default 30 s. */
  timeoutMs?: number;
  /** Between two checks; default 20 ms. */
  intervalMs?: number;
}

/**
 * Thrown by a {@link waitFor} check when what it waits for can no longer happen (the process it
 * waits on has exited, say): the wait ends at once with this error instead of at its timeout.
 */
export class GiveUp extends Error {
  override name = 'GiveUp';
}

/**
 * Waits until `check` gives a value other than `undefined`, `false` or `null`, and returns it:
 * the way to wait for an event a test can only observe by looking (a file appearing, a process
 * exiting, a count reaching n) instead of sleeping a fixed time and hoping. On timeout it throws,
 * naming `what` it waited for (a function is called then, to describe the state it gave up in)
 * and the last error `check` threw, if any. A check that throws {@link GiveUp} ends the wait at
 * once with that error; any other error is taken as "not yet" and the check is tried again.
 */
export async function waitFor<T>(
  what: string | (() => string),
  check: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  options: WaitOptions = {},
): Promise<T> {
  const limit = scaled(options.timeoutMs ?? 30_000);
  const interval = options.intervalMs ?? 20;
  const deadline = Date.now() + limit;
  let lastError: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined && v !== null && v !== false) return v;
      lastError = undefined;
    } catch (err) {
      if (err instanceof GiveUp) throw err;
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const why = lastError === undefined ? '' : ` (last check threw: ${(lastError as Error).message ?? String(lastError)})`;
      throw new Error(`timed out after ${limit} ms waiting for ${typeof what === 'function' ? what() : what}${why}`);
    }
    await new Promise((r) => setTimeout(r, interval));
  }
}
