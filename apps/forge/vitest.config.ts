import { packageTests } from '../../config/vitest.js';

// Every test spawns the built CLI, often several times: generous limits for a loaded CI machine.
export default packageTests({
  testTimeout: 120_000,
  // Not in the fast tier (pnpm test:fast): they start bwrap, PostgreSQL or another process, or take seconds of CPU.
  slow: [
    'test/audit-damaged.test.ts',
    'test/audit-full.test.ts',
    'test/audit.test.ts',
    'test/cli.test.ts',
    'test/contention.test.ts',
    'test/damaged-tool.test.ts',
    'test/doctor-audit.test.ts',
    'test/doctor-fs.test.ts',
    'test/doctor-path.test.ts',
    'test/gateway-cli.test.ts',
    'test/gateway-serve.test.ts',
    'test/hooks-cli.test.ts',
    'test/http.test.ts',
    'test/installed.test.ts',
    'test/lazy-state.test.ts',
    'test/load.test.ts',
    'test/messages.test.ts',
    'test/pattern-latency.test.ts',
    'test/postgres-faults.test.ts',
    'test/postgres.test.ts',
    'test/processes.test.ts',
    'test/publish-guard.test.ts',
    'test/release-versions.test.ts',
    'test/shutdown.test.ts',
    'test/stdio.test.ts',
    'test/stdout-closed.test.ts',
    'test/tool-dir.test.ts',
    'test/toolsmith-cli.test.ts',
    'test/toolsmith-serve.test.ts',
    'test/workers.test.ts',
  ],
});
