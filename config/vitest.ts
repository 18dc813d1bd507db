import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
// The config is loaded before any package's dependencies resolve: the source, by path.
import { scaled } from '../packages/test-utils/src/time.js';

/**
 * The test settings every package shares: real processes and real bwrap on a 2-core machine,
 * so at most two workers and generous timeouts, each multiplied by `FORGE_TEST_TIME_SCALE`
 * (see packages/test-utils); in CI, counts also go to test-results.json for the closing summary
 * line (scripts/test-summary.mjs).
 */
export function packageTests(options: { testTimeout?: number } = {}) {
  return defineConfig({
    test: {
      include: ['test/**/*.test.ts'],
      testTimeout: scaled(options.testTimeout ?? 60_000),
      hookTimeout: scaled(60_000),
      maxWorkers: 2,
      // Test workers are torn down without their exit handlers: sweep what they left in /tmp.
      globalSetup: [fileURLToPath(new URL('./sweep-tmp.ts', import.meta.url))],
      reporters: process.env.CI ? ['default', ['json', { outputFile: 'test-results.json' }]] : ['default'],
    },
  });
}
