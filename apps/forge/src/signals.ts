/** Resolves on the first SIGTERM or SIGINT (and stops listening for them). */
export function untilSignal(): { promise: Promise<string>; dispose(): void } {
  let done!: (s: string) => void;
  const promise = new Promise<string>((r) => (done = r));
  const on = (s: string) => done(s);
  // \`on\`, not \`once\`: a handler that removes itself while the signal is delivered lets a
  // library's own exit hook (signal-exit, loaded with proper-lockfile) see no other listener and
  // re-raise the signal, killing the process before it can close cleanly.
  process.on('SIGTERM', on);
  process.on('SIGINT', on);
  const dispose = () => {
    process.off('SIGTERM', on);
    process.off('SIGINT', on);
  };
  return { promise, dispose };
}

/**
 * What stops a follow (`-f`): SIGINT, SIGTERM, or stdout's reader going away (`| head -1`).
 * `dispose` stops listening for the signals.
 */
export function followStop(gone: AbortSignal): { signal: AbortSignal; dispose(): void } {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return {
    signal: AbortSignal.any([stop.signal, gone]),
    dispose() {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}
