import { packageTests } from '../../config/vitest.js';

export default packageTests({
  // Not in the fast tier (pnpm test:fast): they start bwrap, PostgreSQL or another process, or take seconds of CPU.
  slow: [
    'test/damaged.test.ts',
    'test/exports.test.ts',
    'test/http.test.ts',
    'test/http-tlog.test.ts',
    'test/messages.test.ts',
    'test/modern.test.ts',
    'test/resume.test.ts',
    'test/server.test.ts',
    'test/skills.test.ts',
    'test/sourced.test.ts',
    'test/stdio.test.ts',
    'test/surface.test.ts',
    'test/tasks.test.ts',
    'test/toolsmith-approve.test.ts',
    'test/toolsmith.test.ts',
  ],
});
