import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onTestFinished } from 'vitest';

/** A fresh temporary directory, removed when the current test finishes. */
export async function tempDir(prefix = 'audit-chain-'): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  onTestFinished(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** Absolute path of the built CLI (tests run after `build`). */
export const CLI = new URL('../dist/cli.js', import.meta.url).pathname;
/** Absolute path of the built library entry, for child processes. */
export const DIST = new URL('../dist/index.js', import.meta.url).pathname;
