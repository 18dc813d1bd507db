import type { Writable } from 'node:stream';

/**
 * Watches a stream the CLI prints to for its reader going away (`forge audit tail | head -1`: `head`
 * exits and the next write fails with EPIPE). Instead of the unhandled 'error' event Node turns into
 * a stack trace, `gone` aborts and `write` drops what comes after: a command that streams (tail -f)
 * stops on `gone`, one that prints a list finishes quietly, and the process exits with the code the
 * command returned. Any other write error (a full disk under `> file`) is reported on `report` once,
 * and the process exits 2: output that was meant to be kept was lost.
 */
export interface GuardedStream {
  /** Aborts when the reader has gone; writes after it are dropped. */
  readonly gone: AbortSignal;
  write(text: string): void;
}

/** Error codes that mean "nobody reads this stream any more", not "the output was lost". */
const READER_GONE = new Set(['EPIPE', 'ERR_STREAM_DESTROYED', 'ECONNRESET']);

export function guardStream(stream: Writable, o: { name: string; report?: (message: string) => void }): GuardedStream {
  const gone = new AbortController();
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (gone.signal.aborted) return;
    gone.abort();
    if (READER_GONE.has(err.code ?? '')) return;
    o.report?.(`forge: cannot write to ${o.name} (${err.code ?? err.message}); the output is incomplete`);
    process.exitCode = 2;
    // Nothing more can be printed; end now rather than run on without a way to say what happened.
    process.exit(2);
  });
  return {
    gone: gone.signal,
    write(text) {
      if (!gone.signal.aborted && !stream.destroyed) stream.write(text);
    },
  };
}
