import { describe, expect, it } from 'vitest';
import { sandboxAsked } from '../src/sandboxModule.js';
import { example, setup } from './helpers.js';

// One file of its own: the module's state is this test's alone (vitest isolates test files).
describe('what an engine that only looks loads', () => {
  it('opening and listing never load @forge/sandbox; the first forge does', async () => {
    const fx = await setup({ forge: { prebuild: false } });
    expect(await fx.forge.listTools()).toEqual([]);
    expect(await fx.forge.listDamaged()).toEqual([]);
    expect(await fx.forge.listSourced()).toEqual([]);
    expect(sandboxAsked()).toBe(false);
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    expect(sandboxAsked()).toBe(true);
  });
});
