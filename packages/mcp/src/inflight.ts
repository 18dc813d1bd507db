import type { JSONRPCMessage, RequestId } from '@modelcontextprotocol/server';

/** How long drain() waits by default for the answers of killed calls before it gives up on them. */
const ANSWER_WAIT_MS = 10_000;

/**
 * Tool calls in flight on one or more servers, so close() can let them finish and answer them.
 * A call counts from the moment its handler starts until its answer has been handed to the
 * transport (or the client cancelled it, so no answer is due): the SDK sends a handler's result
 * a few promise turns after the handler returns, and a transport closed in between drops it.
 */
export class Inflight {
  #active = 0;
  #waiters: (() => void)[] = [];
  /** Set by drain(): tool calls arriving from then on are refused (see {@link reason}). */
  closing = false;
  /** Why the servers are stopping, once drain() began (e.g. `forge is shutting down (SIGTERM)`). */
  reason: string | undefined;
  /**
   * Aborted when the grace period ends, with an Error saying why (the runner kills the sandboxes
   * of calls still running and answers them `cancelled` with that message).
   */
  readonly controller = new AbortController();
  readonly #answerWaitMs: number;

  /** @param options.answerWaitMs how long drain() waits for the answers of killed calls (default 10 s). */
  constructor(options: { answerWaitMs?: number } = {}) {
    this.#answerWaitMs = options.answerWaitMs ?? ANSWER_WAIT_MS;
  }

  get active(): number {
    return this.#active;
  }

  /** Counts one call until the returned release runs (idempotent). */
  begin(): () => void {
    this.#active++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (--this.#active === 0) for (const w of this.#waiters.splice(0)) w();
    };
  }

  idle(): Promise<void> {
    return this.#active === 0 ? Promise.resolve() : new Promise((resolve) => this.#waiters.push(resolve));
  }

  /**
   * Refuses new calls, waits up to `graceMs` for those in flight, then aborts them (the abort
   * reason: "`reason` and the grace period of `graceMs` ms ended") and waits for their answers.
   */
  async drain(graceMs: number, reason = 'the forge server is shutting down'): Promise<void> {
    this.closing = true;
    this.reason ??= reason;
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(true), graceMs);
    });
    const done = await Promise.race([this.idle().then(() => false), expired]);
    clearTimeout(timer);
    if (!done) return;
    this.controller.abort(new Error(`${this.reason} and the grace period of ${graceMs} ms ended`));
    // The killed calls are answered within moments; a transport that cannot take an answer (a
    // client that stopped reading) must not hold the shutdown forever. Their outcomes are audited
    // whatever happens here: the runner writes the entry before it answers.
    let wait: NodeJS.Timeout | undefined;
    const answered = await Promise.race([
      this.idle().then(() => true),
      new Promise<false>((resolve) => {
        wait = setTimeout(() => resolve(false), this.#answerWaitMs);
      }),
    ]);
    clearTimeout(wait);
    if (!answered)
      process.emitWarning(
        `forge mcp: ${this.#active} call(s) not answered within ${this.#answerWaitMs} ms after their tools were killed; closing the transport anyway (their outcomes are in the audit log)`,
      );
  }
}

/**
 * One server's tool calls whose answer is not yet handed to its transport, by request id: each
 * holds its place in the {@link Inflight} until its answer is sent (see there for why the
 * handler's end is not enough).
 */
export class UnansweredCalls {
  readonly #byId = new Map<RequestId, () => void>();
  readonly #inflight: Inflight;

  constructor(inflight: Inflight) {
    this.#inflight = inflight;
  }

  /**
   * Counts the call `id` until its answer is sent, or until `signal` aborts (the client cancelled
   * it, or the transport closed: then no answer is due). The returned release lets go of it
   * earlier (idempotent).
   */
  begin(id: RequestId, signal: AbortSignal): () => void {
    const release = this.#inflight.begin();
    this.#byId.set(id, release);
    const forget = () => {
      if (this.#byId.get(id) === release) this.#byId.delete(id);
      release();
    };
    signal.addEventListener('abort', forget, { once: true });
    if (signal.aborted) forget();
    return forget;
  }

  /** The release to run once `message` was handed to the transport, when it answers a counted call. */
  answering(message: JSONRPCMessage): (() => void) | undefined {
    const id = (message as { id?: RequestId }).id;
    if (id === undefined || !('result' in message || 'error' in message)) return undefined;
    const release = this.#byId.get(id);
    if (release) this.#byId.delete(id);
    return release;
  }
}
