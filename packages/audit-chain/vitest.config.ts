import { packageTests } from '../../config/vitest.js';

// Tests spawn real writer processes: longer runs than most packages.
export default packageTests({
  testTimeout: 120_000,
  // Not in the fast tier (pnpm test:fast): they start bwrap, PostgreSQL or another process, or take seconds of CPU.
  slow: [
    'test/adversarial.test.ts',
    'test/cli.test.ts',
    'test/codec-head-entries.test.ts',
    'test/concurrency.test.ts',
    'test/crash.test.ts',
    'test/lock-leftovers.test.ts',
    'test/lock.test.ts',
    'test/live-tree.test.ts',
    'test/merkle-go.test.ts',
    'test/note-go.test.ts',
    'test/proof-cli.test.ts',
    'test/proof-python.test.ts',
    'test/tiles-go.test.ts',
    'test/tiles.test.ts',
    'test/stopped-holder.test.ts',
    'test/tail-follow.test.ts',
    'test/threads.test.ts',
    'test/vectors.test.ts',
    'test/witness.test.ts',
  ],
});
