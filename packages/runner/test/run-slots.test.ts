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

  it('the default is at least 2 and at most four per core', () => {
    const n = defaultRunSlots();
    expect(n).toBeGreaterThanOrEqual(2);
    expect(Number.isInteger(n)).toBe(true);
  });
});
