import { sweepTempDirs } from '../packages/sandbox/src/tmp.js';

/**
 * vitest global setup for every package: once all test workers are gone, remove the per-process
 * temporary directories of @forge/sandbox that they left (a worker is torn down without its exit
 * handlers), so a test run leaves nothing in /tmp.
 */
export default function setup(): () => void {
  return () => {
    sweepTempDirs();
  };
}
