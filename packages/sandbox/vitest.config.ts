import { packageTests } from '../../config/vitest.js';

export default packageTests({
  // Not in the fast tier (pnpm test:fast): they start bwrap, PostgreSQL or another process, or take seconds of CPU.
  slow: [
    'test/binds.test.ts',
    'test/busy-user.test.ts',
    'test/cgroup.test.ts',
    'test/descriptors.test.ts',
    'test/egress-ca.test.ts',
    'test/egress-intercept.test.ts',
    'test/egress-node.test.ts',
    'test/egress-secrets.test.ts',
    'test/egress-proxy.test.ts',
    'test/egress.test.ts',
    'test/escape-prebuilt.test.ts',
    'test/escape-warm.test.ts',
    'test/escape.test.ts',
    'test/events.test.ts',
    'test/exports.test.ts',
    'test/holder.test.ts',
    'test/launcher.test.ts',
    'test/prebuilt.test.ts',
    'test/preflight.test.ts',
    'test/probe-cache.test.ts',
    'test/probe.test.ts',
    'test/root-mode.test.ts',
    'test/runtimes.test.ts',
    'test/seccomp.test.ts',
    'test/spawn.test.ts',
    'test/warm-node.test.ts',
    'test/warm.test.ts',
  ],
});
