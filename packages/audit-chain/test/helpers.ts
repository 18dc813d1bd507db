export { tempDir } from '@forge/test-utils';

/** Absolute path of the built CLI (tests run after `build`). */
export const CLI = new URL('../dist/cli.js', import.meta.url).pathname;
/** Absolute path of the built library entry, for child processes. */
export const DIST = new URL('../dist/index.js', import.meta.url).pathname;
