import { it } from 'vitest';

/** Whether this test process is root (CI runs the suite twice: as root, and as an ordinary user). */
export const isRoot = process.getuid?.() === 0;

/**
 * A test that needs root to set itself up (a bind or tmpfs mount, a delegated cgroup, another
 * uid): it runs in CI's root pass and is reported as skipped in the ordinary user's pass.
 */
export const asRoot: typeof it = it.runIf(isRoot) as typeof it;

/** A test of what an ordinary user's forge does: it runs in CI's ordinary-user pass, skipped as root. */
export const asUser: typeof it = it.runIf(!isRoot) as typeof it;
