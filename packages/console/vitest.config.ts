import { packageTests } from '../../config/vitest.js';

export default packageTests({
  // Not in the fast tier (pnpm test:fast): they start Chromium or write logs for seconds of CPU.
  slow: ['test/audit-index.test.ts', 'test/verify-property.test.ts'],
});
