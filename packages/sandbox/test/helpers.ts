import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onTestFinished } from 'vitest';
import { probe } from '../src/index.js';

/** A fresh temporary directory, removed when the current test finishes. */
export async function tempDir(prefix = 'forge-sandbox-test-'): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  onTestFinished(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * Fails (never skips) when this host cannot run sandboxes, with the probe's own fix: these tests
 * exist to prove the sandbox holds, so a host without bwrap must not pass them silently.
 */
export async function requireSandbox(): Promise<void> {
  const host = await probe();
  if (!host.ok) {
    throw new Error(`this test needs a working bwrap sandbox: ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')}`);
  }
}
