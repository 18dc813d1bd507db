import { describe, expect, it } from 'vitest';
import { Inflight } from '../src/inflight.js';

describe('Inflight.drain', () => {
  it('aborts the calls still in flight when the grace period ends, with the reason and the grace period', async () => {
    const inflight = new Inflight();
    const release = inflight.begin();
    // Lets time pass: the call being drained ends 20 ms after it was aborted (its tool killed), inside the grace period.
    inflight.controller.signal.addEventListener('abort', () => setTimeout(release, 20));
    await inflight.drain(50, 'forge is shutting down (SIGTERM)');
    expect(inflight.closing).toBe(true);
    expect(inflight.active).toBe(0);
    expect((inflight.controller.signal.reason as Error).message).toBe(
      'forge is shutting down (SIGTERM) and the grace period of 50 ms ended',
    );
  });

  it('gives up on answers that cannot be delivered (a client that stopped reading), with a warning', async () => {
    const inflight = new Inflight({ answerWaitMs: 100 });
    inflight.begin(); // never released: its answer is stuck in the transport
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on('warning', onWarning);
    try {
      // It returns (a drain that waited for the stuck answer would never end: the test's timeout).
      await inflight.drain(50);
      await new Promise((r) => setImmediate(r));
      expect(warnings).toEqual([
        'forge mcp: 1 call(s) not answered within 100 ms after their tools were killed; closing the transport anyway (their outcomes are in the audit log)',
      ]);
    } finally {
      process.off('warning', onWarning);
    }
  });
});
