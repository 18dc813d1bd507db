import { packageTests } from '../../config/vitest.js';

export default packageTests({
  // Not in the fast tier (pnpm test:fast): they start bwrap, PostgreSQL or another process, or take seconds of CPU.
  slow: [
    'test/pins.test.ts',
    'test/source.calls.test.ts',
    'test/source.network.test.ts',
    'test/source.peers.test.ts',
    'test/source.pins.test.ts',
    'test/source.test.ts',
    'test/spawn-secrets.test.ts',
    'test/upstream.test.ts',
  ],
});
