import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

/**
 * The test settings every package shares: real processes and real bwrap on a 2-core machine,
 * so at most two workers and generous timeouts; in CI, counts also go to test-results.json for
 * the closing summary line (scripts/test-summary.mjs).
 */
export function packageTests(options: { testTimeout?: number } = {}) {
  return defineConfig({
    test: {
      include: ['test/**/*.test.ts'],
      testTimeout: options.testTimeout ?? 60_000,
      hookTimeout: 60_000,
      maxWorkers: 2,
      // Test workers are torn down without their exit handlers: sweep what they left in /tmp.
      globalSetup: [fileURLToPath(new URL('./sweep-tmp.ts', import.meta.url))],
      reporters: process.env.CI ? ['default', ['json', { outputFile: 'test-results.json' }]] : ['default'],
    },
  });
}
