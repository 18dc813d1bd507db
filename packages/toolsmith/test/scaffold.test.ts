import { describe, expect, it } from 'vitest';

describe('@forge/toolsmith', () => {
  it('builds and loads', async () => {
    const mod = await import('../src/index.js');
    expect(typeof mod).toBe('object');
  });
});
