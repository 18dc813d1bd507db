import { packageTests } from '../../config/vitest.js';

export default packageTests({
  // Not in the fast tier (pnpm test:fast): they start bwrap, PostgreSQL or another process, or take seconds of CPU.
  slow: ['test/breakers.test.ts', 'test/reload.test.ts', 'test/settle.test.ts'],
});
