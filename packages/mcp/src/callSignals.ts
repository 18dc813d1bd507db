/** The abort signal of a tool call, joined from whoever may stop it: the client, the shutdown, the caller. */

/**
 * The request's own signal, aborted with a reason that says who stopped the call: the SDK aborts
 * it when the client cancels (`notifications/cancelled`, with its reason) or the transport closes.
 */
export function clientSignal(signal: AbortSignal): AbortSignal {
  const because = (r: unknown) =>
    new Error(typeof r === 'string' && r !== '' ? `the client cancelled the call (${r})` : 'the client cancelled the call or went away');
  if (signal.aborted) return AbortSignal.abort(because(signal.reason));
  const ac = new AbortController();
  signal.addEventListener('abort', () => ac.abort(because(signal.reason)), { once: true });
  return ac.signal;
}

/**
 * One signal that aborts when any of `signals` does, and `dispose()` to let go of them. Not
 * `AbortSignal.any`: on Node 20 every signal it makes stays referenced from each long-lived source
 * (the server's shutdown signal), one for every call the server ever answered.
 */
export function joinSignals(signals: readonly AbortSignal[]): { signal: AbortSignal; dispose(): void } {
  const ac = new AbortController();
  const gone = signals.find((s) => s.aborted);
  if (gone) {
    ac.abort(gone.reason);
    return { signal: ac.signal, dispose() {} };
  }
  const listeners = signals.map((s) => {
    const on = () => ac.abort(s.reason);
    s.addEventListener('abort', on, { once: true });
    return () => s.removeEventListener('abort', on);
  });
  return {
    signal: ac.signal,
    dispose() {
      for (const off of listeners) off();
    },
  };
}
