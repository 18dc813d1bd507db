/** Requests in flight on one or more servers, so close() can let them finish. */
export class Inflight {
  #active = 0;
  #waiters: (() => void)[] = [];
  /** Set by drain(): new tool calls are refused from then on. */
  closing = false;
  /** Aborted when the grace period ends: the runner kills the sandboxes of calls still running. */
  readonly controller = new AbortController();

  get active(): number {
    return this.#active;
  }

  async run<T>(op: () => Promise<T>): Promise<T> {
    this.#active++;
    try {
      return await op();
    } finally {
      if (--this.#active === 0) for (const w of this.#waiters.splice(0)) w();
    }
  }

  idle(): Promise<void> {
    return this.#active === 0 ? Promise.resolve() : new Promise((resolve) => this.#waiters.push(resolve));
  }

  /** Refuses new calls, waits up to `graceMs` for those in flight, then aborts them and waits for their answers. */
  async drain(graceMs: number): Promise<void> {
    this.closing = true;
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(true), graceMs);
    });
    const done = await Promise.race([this.idle().then(() => false), expired]);
    clearTimeout(timer);
    if (done) this.controller.abort(new Error('the server is shutting down'));
    await this.idle();
  }
}
