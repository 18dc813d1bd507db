import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Every test spawns the built CLI, often several times: generous limits for a loaded CI machine.
    testTimeout: 120_000,
    hookTimeout: 60_000,
    maxWorkers: 2,
    // In CI, also write counts for the closing summary line (scripts/test-summary.mjs).
    reporters: process.env.CI ? ['default', ['json', { outputFile: 'test-results.json' }]] : ['default'],
  },
});
