import { packageTests } from '../../config/vitest.js';

export default packageTests({
  // Not in the fast tier (pnpm test:fast): they start bwrap, PostgreSQL or another process, or take seconds of CPU.
  slow: [
    'test/gaps.test.ts',
    'test/proposals.test.ts',
    'test/service-absent.test.ts',
    'test/service-stores.test.ts',
    'test/service.test.ts',
  ],
});
