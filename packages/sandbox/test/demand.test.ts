/**
 * How many sandboxes of a shape are kept built ahead (demand.ts): following the shape's recent
 * rate and concurrency up to a bound, fewer once idle, and warm ones within a memory budget.
 */
import { describe, expect, it } from 'vitest';
import { DEMAND, Demand, warmBudget } from '../src/demand.js';

describe("a shape's demand", () => {
  it('wants one waiting for a run now and then, more for a burst, never more than the bound', () => {
    const d = new Demand();
    d.built(200);
    d.take(0);
    expect(d.wanted(0, 1)).toBe(1);
    // Two runs 5 s apart: still one.
    d.take(5000);
    expect(d.wanted(5000, 1)).toBe(1);
    // Twenty runs within a second, each sandbox 200 ms to build: four would be taken meanwhile.
    const burst = new Demand();
    burst.built(200);
    for (let i = 0; i < 20; i++) burst.take(10_000 + i * 50);
    expect(burst.wanted(11_000, 1)).toBe(DEMAND.maxPerShape);
    // Six at once want six, but the bound holds.
    expect(new Demand().wanted(0, 6)).toBe(DEMAND.maxPerShape);
    expect(new Demand().wanted(0, 3)).toBe(3);
  });

  it('forgets runs older than its window', () => {
    const d = new Demand();
    d.built(200);
    for (let i = 0; i < 20; i++) d.take(i * 50);
    expect(d.wanted(1000, 0)).toBeGreaterThan(1);
    d.take(DEMAND.windowMs * 3);
    expect(d.wanted(DEMAND.windowMs * 3, 0)).toBe(1);
  });

  it('keeps one once idle for a while, none once idle for long', () => {
    const d = new Demand();
    d.take(0);
    expect(d.idleWanted(DEMAND.idleMs - 1, 4)).toBe(4);
    expect(d.idleWanted(DEMAND.idleMs, 4)).toBe(1);
    expect(d.idleWanted(DEMAND.idleLongMs, 1)).toBe(0);
  });
});

describe('the warm budget', () => {
  it('is the budget given, and never more than a quarter of the available memory', () => {
    const meminfo = warmBudget(Number.MAX_SAFE_INTEGER);
    expect(meminfo.availableBytes, 'this host says MemAvailable in /proc/meminfo').toBeGreaterThan(0);
    expect(meminfo.bytes).toBe(Math.floor((meminfo.availableBytes as number) / 4));
    expect(warmBudget(1).bytes).toBe(1);
  });
});
