import type { Forge } from '@forge/runner';

/**
 * The engine a server answers with, given open or still opening: requests wait for it, and a
 * watch on it starts once it is open. An engine that failed to open is reported to every request.
 */
export class EngineGate {
  #engine: Forge | undefined;
  readonly #opening: Promise<Forge>;

  constructor(forge: Forge | PromiseLike<Forge>) {
    this.#opening = Promise.resolve(forge);
    if (isPromiseLike(forge))
      this.#opening.then(
        (f) => {
          this.#engine = f;
        },
        () => {},
      );
    else this.#engine = forge;
  }

  /** The engine once open; until then a promise of it, which rejects saying why when it failed to open. */
  ready(): Forge | Promise<Forge> {
    return (
      this.#engine ??
      this.#opening.catch((err: unknown) => {
        throw new Error(`this server has no forge engine (it failed to open, so the session cannot go on): ${(err as Error).message}`);
      })
    );
  }

  /**
   * Starts `watch` on the engine: at once when it is open (so no change in between is missed),
   * else once it opens. The returned stop ends the watch; before the engine opened, it never starts.
   */
  follow(watch: (forge: Forge) => () => void): () => void {
    let stop: (() => void) | undefined;
    let stopped = false;
    const start = (f: Forge) => {
      if (!stopped) stop = watch(f);
    };
    if (this.#engine) start(this.#engine);
    else this.#opening.then(start, () => {});
    return () => {
      stopped = true;
      stop?.();
    };
  }

  /** Runs `then` on the engine once open; nothing when it failed to open. */
  whenOpen(then: (forge: Forge) => unknown): void {
    void this.#opening.then(then).catch(() => {});
  }
}

function isPromiseLike(x: Forge | PromiseLike<Forge>): x is PromiseLike<Forge> {
  return typeof (x as PromiseLike<Forge>).then === 'function';
}
