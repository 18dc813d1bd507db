import { packageTests } from '../../config/vitest.js';

// Suites start a throwaway PostgreSQL server and spawn writer processes that they kill -9.
export default packageTests({
  testTimeout: 120_000,
  // Not in the fast tier (pnpm test:fast): they start bwrap, PostgreSQL or another process, or take seconds of CPU.
  slow: [
    'test/audit-file.test.ts',
    'test/cache-file.test.ts',
    'test/gaps-file.test.ts',
    'test/postgres.test.ts',
    'test/presence-file.test.ts',
    'test/proposals-file.test.ts',
    'test/queue-file.test.ts',
    'test/registry-file.test.ts',
    'test/runs-file.test.ts',
  ],
});
