/**
 * Time limits in tests scale with the machine: `FORGE_TEST_TIME_SCALE` (a number ≥ 1, default 1)
 * multiplies every limit given through {@link scaled}, so a slow or loaded machine raises them all
 * in one place instead of each test guessing. Limits bound a wait; they never assert speed.
 */
export function timeScale(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.FORGE_TEST_TIME_SCALE;
  if (raw === undefined || raw === '') return 1;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 1) {
    throw new Error(`FORGE_TEST_TIME_SCALE is "${raw}": give a number of at least 1 (e.g. 3 on a loaded machine), or leave it unset`);
  }
  return n;
}

/** `ms` times the machine's scale (see {@link timeScale}). */
export function scaled(ms: number): number {
  return Math.round(ms * timeScale());
}
