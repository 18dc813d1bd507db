import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { configDefaults, defineConfig } from 'vitest/config';
// The config is loaded before any package's dependencies resolve: the source, by path.
import { scaled } from '../packages/test-utils/src/time.js';

/** How one package's tests run (see {@link packageTests}). */
export interface PackageTestOptions {
  /** The per-test limit before the scale; default 60 s. */
  testTimeout?: number;
  /**
   * Test files (paths from the package directory) that are not in the fast tier: they start a
   * child process (bwrap, PostgreSQL, a CLI, a writer) or take seconds of CPU. Every other test
   * file is fast, and the fast tier enforces it (see fast-guard.ts).
   */
  slow?: string[];
}

/** Set by the root's `pnpm test:fast` (config/vitest.fast.ts): run only the fast tier. */
const FAST = process.env.FORGE_TEST_TIER === 'fast';

/** A fast test's limit before the scale: one that needs longer belongs in `slow`. */
export const FAST_TEST_LIMIT_MS = 20_000;

/**
 * The test settings every package shares: real processes and real bwrap on a 2-core machine,
 * so at most two workers and generous timeouts, each multiplied by `FORGE_TEST_TIME_SCALE`
 * (see packages/test-utils); in CI, counts also go to test-results.json for the closing summary
 * line (scripts/test-summary.mjs). In the fast tier the `slow` files are left out, the rest run
 * under fast-guard.ts and a short limit.
 */
export function packageTests(options: PackageTestOptions = {}) {
  const slow = options.slow ?? [];
  return defineConfig({
    plugins: [
      {
        name: 'forge-slow-list',
        // A renamed or removed file must leave the list too, or the list drifts from the tests.
        configResolved(config) {
          const stale = slow.filter((file) => !existsSync(resolve(config.root, file)));
          if (stale.length > 0) {
            throw new Error(`${config.root}/vitest.config.ts lists slow test files that do not exist: ${stale.join(', ')}; remove them`);
          }
        },
      },
    ],
    test: {
      include: ['test/**/*.test.ts'],
      exclude: FAST ? [...configDefaults.exclude, ...slow] : configDefaults.exclude,
      testTimeout: scaled(FAST ? FAST_TEST_LIMIT_MS : (options.testTimeout ?? 60_000)),
      hookTimeout: scaled(FAST ? FAST_TEST_LIMIT_MS : 60_000),
      maxWorkers: 2,
      setupFiles: FAST ? [fileURLToPath(new URL('./fast-guard.ts', import.meta.url))] : [],
      // Test workers are torn down without their exit handlers: sweep what they left in /tmp.
      globalSetup: [fileURLToPath(new URL('./sweep-tmp.ts', import.meta.url))],
      reporters: process.env.CI ? ['default', ['json', { outputFile: 'test-results.json' }]] : ['default'],
    },
  });
}
