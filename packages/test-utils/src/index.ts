/**
 * @forge/test-utils — what forge's test suites share (private; never published).
 */
export { tempDir, tempDirSync } from './dirs.js';
export { killedAfter } from './killed.js';
export { type HostReport, requireSandbox } from './sandbox.js';
export { scaled, timeScale } from './time.js';
export { asRoot, asUser, isRoot } from './users.js';
export { GiveUp, type WaitOptions, waitFor } from './wait.js';
