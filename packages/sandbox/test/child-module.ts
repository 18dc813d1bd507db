/**
 * What a test's child process (helpers.ts, runInChild) loads as `module`: this package's source,
 * the way an embedding process uses it, plus what such a test looks at from inside that process —
 * the launcher pool's counts, and test-utils' waitFor to wait on them. waitFor comes by path (as
 * config/vitest.ts loads time.ts): the package's entry also loads vitest, which belongs in a test
 * worker, not in a plain node process.
 */

export { waitFor } from '../../test-utils/src/wait.js';
export * from '../src/index.js';
export { launcherStats } from '../src/launcher.js';
