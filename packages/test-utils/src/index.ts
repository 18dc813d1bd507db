/**
 * @forge/test-utils — what forge's test suites share (private; never published).
 */
export { scaled, timeScale } from './time.js';
export { type WaitOptions, waitFor } from './wait.js';
