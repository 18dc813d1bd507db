// How a child process of the cache and run store suites opens the runner's file stores of
// cache-file.test.ts and runs-file.test.ts (from the built runner).
import { fileCacheStore, fileRunStore } from '../../runner/dist/index.js';

/** The file cache store in `dir`, default limits. */
export function openFileCacheStore(dir) {
  return fileCacheStore(dir);
}

/** The file run store over `runsDir`. */
export function openFileRunStore(runsDir) {
  return fileRunStore(runsDir);
}
