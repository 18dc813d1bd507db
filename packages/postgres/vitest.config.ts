import { packageTests } from '../../config/vitest.js';

export default packageTests({
  // Not in the fast tier (pnpm test:fast): they start bwrap, PostgreSQL or another process, or take seconds of CPU.
  slow: [
    'test/audit-store.test.ts',
    'test/audit-tree.test.ts',
    'test/audit.test.ts',
    'test/cache-audit-pg.test.ts',
    'test/cache-pg.test.ts',
    'test/export.test.ts',
    'test/gaps-pg.test.ts',
    'test/migrate.test.ts',
    'test/pool.test.ts',
    'test/presence.test.ts',
    'test/proposals-pg.test.ts',
    'test/queue.test.ts',
    'test/registry-pg.test.ts',
    'test/registry.test.ts',
    'test/runs-pg.test.ts',
    'test/stores.test.ts',
    'test/url.test.ts',
  ],
});
