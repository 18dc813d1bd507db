import { describe, expect, it } from 'vitest';
import { defaultRunSlots, RunSlots } from '../src/runSlots.js';

describe('RunSlots', () => {
  it('lets `size` runs in, the rest in the order they came; a release hands its slot to the next', async () => {
    const slots = new RunSlots(2);
    const order: number[] = [];
    const a = await slots.take();
    const b = await slots.take();
    const waiting = [3, 4, 5].map((n) =>
      slots.take().then((release) => {
        order.push(n);
        return release;
      }),
    );
    expect(slots.waiting).toBe(3);
    a();
    a(); // a second release of the same slot changes nothing
    const r3 = (await waiting[0]) as () => void;
    expect(order).toEqual([3]);
    b();
    r3();
    for (const w of waiting.slice(1)) (await w)();
    expect(order).toEqual([3, 4, 5]);
    // Every slot is free again: two at once without waiting.
    const both = await Promise.all([slots.take(), slots.take()]);
    expect(slots.waiting).toBe(0);
    for (const r of both) r();
  });

  it('a waiter whose signal aborts leaves the line with a release that does nothing', async () => {
    const slots = new RunSlots(1);
    const held = await slots.take();
    const ac = new AbortController();
    const gone = slots.take(ac.signal);
    const next = slots.take();
    ac.abort();
    (await gone)(); // frees nothing
    expect(slots.waiting).toBe(1);
    held();
    (await next)();
    const aborted = new AbortController();
    aborted.abort();
    const again = await slots.take(aborted.signal); // a slot is free: taken anyway
    again();
  });

  it('a holder the system would not start waits for another run to end, never for one that waits too', async () => {
    const slots = new RunSlots(3);
    const a = await slots.take();
    // Alone: no end to wait for, the refusal stands.
    expect(await slots.afterAnotherEnds()).toBe(false);
    const b = await slots.take();
    const c = await slots.take();
    // b waits for a run's end (a and c run); c waits too (a runs); then a ends: both go again.
    const bAgain = slots.afterAnotherEnds();
    const cAgain = slots.afterAnotherEnds();
    let settled = 0;
    void Promise.all([bAgain, cAgain]).then(() => settled++);
    await Promise.resolve();
    expect(settled).toBe(0);
    a();
    expect(await bAgain).toBe(true);
    expect(await cAgain).toBe(true);
    // Both hold a slot, neither runs: the second to stall has no running holder to wait for.
    const b2 = slots.afterAnotherEnds();
    expect(await slots.afterAnotherEnds()).toBe(false);
    c();
    expect(await b2).toBe(true);
    // A release handed to a run waiting for a slot wakes a stalled holder as well.
    const d = slots.take();
    const e = slots.take();
    const g = slots.take();
    expect(slots.waiting).toBe(1);
    const ac = new AbortController();
    const stalled = slots.afterAnotherEnds(ac.signal);
    (await d)();
    expect(await stalled).toBe(true);
    expect(slots.waiting).toBe(0);
    (await g)();
    // An abort ends the wait with false; the next release then finds nothing to wake.
    const aborted = slots.afterAnotherEnds(ac.signal);
    ac.abort();
    expect(await aborted).toBe(false);
    (await e)();
    b();
    expect(slots.waiting).toBe(0);
    const all = await Promise.all([slots.take(), slots.take(), slots.take()]);
    for (const r of all) r();
  });

  it('the default is at least 2 and at most four per core', () => {
    const n = defaultRunSlots();
    expect(n).toBeGreaterThanOrEqual(2);
    expect(Number.isInteger(n)).toBe(true);
  });
});
