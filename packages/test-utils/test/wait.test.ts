import { expect, it } from 'vitest';
import { GiveUp, waitFor } from '../src/index.js';

it('returns the first value the check gives that is not undefined, null or false', async () => {
  let n = 0;
  const seen = await waitFor('the third look', () => (++n >= 3 ? { n } : n === 1 ? null : false), { intervalMs: 1 });
  expect(seen).toEqual({ n: 3 });
});

it('takes an error from the check for "not yet", and names it with what it waited for on timeout', async () => {
  await expect(
    waitFor(
      () => 'the file to appear (state: none)',
      () => {
        throw new Error('ENOENT');
      },
      { timeoutMs: 50, intervalMs: 5 },
    ),
  ).rejects.toThrow(/^timed out after \d+ ms waiting for the file to appear \(state: none\) \(last check threw: ENOENT\)$/);
});

it('ends at once when the check gives up: what it waits for can no longer happen', async () => {
  let looks = 0;
  await expect(
    waitFor(
      'a writer to be ready',
      () => {
        looks++;
        throw new GiveUp('writer 1 exited early');
      },
      { timeoutMs: 600_000 },
    ),
  ).rejects.toThrow(GiveUp);
  expect(looks).toBe(1);
});
