import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { scaled } from '../../packages/test-utils/src/time.js';

/**
 * The README examples test (scripts/test/*.test.ts), which scripts/test.sh runs after the
 * packages' own tests, once everything is built:
 *   pnpm exec vitest run --config scripts/test/vitest.config.ts
 * Examples run real sandboxes and servers, one at a time; in CI the counts also go to
 * scripts/test/test-results.json.
 */
export default defineConfig({
  test: {
    root: fileURLToPath(new URL('../..', import.meta.url)),
    include: ['scripts/test/*.test.ts'],
    testTimeout: scaled(300_000),
    hookTimeout: scaled(60_000),
    fileParallelism: false,
    globalSetup: [fileURLToPath(new URL('../../config/sweep-tmp.ts', import.meta.url))],
    reporters: process.env.CI ? ['default', ['json', { outputFile: 'scripts/test/test-results.json' }]] : ['default'],
  },
});
