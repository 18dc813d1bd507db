// How a child process of the toolsmith store suites opens the file stores of gaps-file.test.ts and
// proposals-file.test.ts: the built @forge/toolsmith (by path: conformance does not depend on it).
import { openGapStore, openProposalStore } from '../../toolsmith/dist/index.js';

/** The file gap store in `dir` with the suite's `options` ({maxRecords}). */
export function openFileGapStore(dir, options = {}) {
  return openGapStore({ dir, ...options });
}

/** The file proposal store in `dir`. */
export function openFileProposalStore(dir) {
  return openProposalStore({ dir });
}
