import { execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { waitFor } from '@forge/test-utils';
import { onTestFinished } from 'vitest';
import { type Scratch, scratch } from './helpers.js';

/** A scratch home whose audit directory is its own 256 KiB tmpfs, and a project beside it. */
export interface TmpfsHome extends Scratch {
  auditDir: string;
  /** Writes a filler file until the tmpfs has no block left. */
  fill(): void;
  /** Removes the filler. */
  free(): void;
}

/**
 * Mounts a tmpfs (tests run as root in CI) as `<home>/audit` of a scratch home; a mount that fails
 * fails the test with the reason, never skips it. Its cleanup runs after the clients and servers
 * the test opens have closed: unmount (retried while the server lets go), then the scratch goes.
 */
export function tmpfsHome(prefix: string): TmpfsHome {
  const s = scratch(prefix);
  const auditDir = join(s.home, 'audit');
  mkdirSync(auditDir, { mode: 0o700 });
  let mounted = false;
  // Registered after the scratch's removal, so it runs before it.
  onTestFinished(async () => {
    if (!mounted) return;
    // umount fails (busy) while the server still holds the log open; its last error is in the timeout's message.
    await waitFor(
      `the test tmpfs at ${auditDir} to unmount`,
      () => {
        execFileSync('umount', [auditDir], { stdio: 'pipe' });
        mounted = false;
        return true;
      },
      { timeoutMs: 5_000, intervalMs: 100 },
    );
  });
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k,mode=0700', 'tmpfs', auditDir], { stdio: 'pipe' });
    mounted = true;
  } catch (err) {
    const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim();
    throw new Error(
      `this test needs its own tmpfs (run it as root, where mount -t tmpfs works): mount failed: ${stderr || (err as Error).message}`,
    );
  }
  const filler = join(auditDir, 'filler');
  return {
    ...s,
    auditDir,
    fill() {
      const fd = openSync(filler, 'w');
      try {
        for (;;) writeSync(fd, Buffer.alloc(4096, 1));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
      } finally {
        closeSync(fd);
      }
    },
    free() {
      unlinkSync(filler);
    },
  };
}
