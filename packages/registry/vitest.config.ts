import { packageTests } from '../../config/vitest.js';

export default packageTests({
  // Not in the fast tier (pnpm test:fast): they start bwrap, PostgreSQL or another process, or take seconds of CPU.
  slow: [
    'test/crash.test.ts',
    'test/static-check.test.ts',
    'test/store.test.ts',
    'test/stores.test.ts',
    'test/watch.test.ts',
    'test/wire-names.test.ts',
  ],
});
