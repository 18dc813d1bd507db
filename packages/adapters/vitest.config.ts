import { packageTests } from '../../config/vitest.js';

export default packageTests({
  // Not in the fast tier (pnpm test:fast): they run tools in bwrap.
  slow: ['test/frameworks.test.ts'],
});
