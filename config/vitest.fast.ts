import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// Read by packageTests (config/vitest.ts) as each package's config loads below.
process.env.FORGE_TEST_TIER = 'fast';

/**
 * The fast tier, `pnpm test:fast` at the root: every package's test files except those its
 * vitest.config.ts lists as `slow`, with no child process allowed (fast-guard.ts) and a short
 * limit per test, two workers across all packages. The full tier stays `pnpm test`.
 */
export default defineConfig({
  test: {
    root: fileURLToPath(new URL('..', import.meta.url)),
    projects: [
      'packages/*/vitest.config.ts',
      'apps/*/vitest.config.ts',
      // The repository's own checks that need no build: the source tree's shape, no bare sleeps in tests.
      { test: { name: 'repo', include: ['scripts/test/shape.test.ts', 'scripts/test/sleeps.test.ts'] } },
    ],
    maxWorkers: 2,
  },
});
