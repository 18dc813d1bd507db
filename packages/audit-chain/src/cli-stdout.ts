/**
 * Stdout for the `forge-audit` CLI, whose reader may go away early (`forge-audit tail log | head -1`:
 * `head` exits and the next write fails with EPIPE). Instead of the unhandled 'error' event Node
 * turns into a stack trace, `gone` aborts and later writes are dropped: `tail -f` stops, the other
 * commands finish what they were doing (an append is already durable when its line is printed), and
 * the process exits with the command's own code. Any other write error (a full disk under `> file`)
 * is reported on stderr and the process exits 2.
 */
export interface CliStdout {
  /** Aborts when stdout's reader has gone. */
  readonly gone: AbortSignal;
  /** Writes `s` and a newline, unless the reader has gone. */
  line(s: string): void;
}

/** Error codes that mean "nobody reads this any more", not "the output was lost". */
const READER_GONE = new Set(['EPIPE', 'ERR_STREAM_DESTROYED', 'ECONNRESET']);

export function guardStdout(stdout: NodeJS.WriteStream = process.stdout, stderr: NodeJS.WriteStream = process.stderr): CliStdout {
  const gone = new AbortController();
  // stderr may share the closed pipe (`2>&1 | head -1`): it must not turn into a stack trace either.
  stderr.on('error', () => {});
  stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (gone.signal.aborted) return;
    gone.abort();
    if (READER_GONE.has(err.code ?? '')) return;
    if (!stderr.destroyed) stderr.write(`forge-audit: cannot write to stdout (${err.code ?? err.message}); the output is incomplete\n`);
    process.exit(2);
  });
  return {
    gone: gone.signal,
    line(s) {
      if (!gone.signal.aborted && !stdout.destroyed) stdout.write(`${s}\n`);
    },
  };
}
