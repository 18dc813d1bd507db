import { packageTests } from '../../config/vitest.js';

// Attacks run real sandboxes, servers and CLIs, often several at once: generous limits.
export default packageTests({
  testTimeout: 120_000,
  // Not in the fast tier (pnpm test:fast): they start bwrap, PostgreSQL or another process, or take seconds of CPU.
  slow: [
    'test/approval.test.ts',
    'test/authority.test.ts',
    'test/cache.test.ts',
    'test/host-state.test.ts',
    'test/inert-text.test.ts',
    'test/paths.test.ts',
    'test/signed-log.test.ts',
    'test/upstream.test.ts',
    'test/wire-names.test.ts',
  ],
});
