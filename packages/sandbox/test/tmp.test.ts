import { existsSync, rmSync } from 'node:fs';
import { expect, it } from 'vitest';
import { makeStageDir } from '../src/index.js';

it('many stage directories share one exit handler (an embedder opening many engines gets no listener-leak warning)', () => {
  const before = process.listenerCount('exit');
  const dirs = Array.from({ length: 20 }, () => makeStageDir());
  try {
    expect(new Set(dirs).size).toBe(20);
    for (const d of dirs) expect(existsSync(d)).toBe(true);
    expect(process.listenerCount('exit') - before).toBeLessThanOrEqual(1);
  } finally {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
});
