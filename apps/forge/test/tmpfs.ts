import { execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { onTestFinished } from 'vitest';
import type { Scratch } from './helpers.js';

/** A scratch home whose audit directory is its own 256 KiB tmpfs, and a project beside it. */
export interface TmpfsHome extends Scratch {
  auditDir: string;
  /** Writes a filler file until the tmpfs has no block left. */
  fill(): void;
  /** Removes the filler. */
  free(): void;
}

/**
 * Mounts a tmpfs (tests run as root in CI) as `<home>/audit`; a mount that fails fails the test
 * with the reason, never skips it. Registered first, its cleanup runs last (after the clients and
 * servers the test opens have closed): unmount (retried while the server lets go), then remove.
 */
export function tmpfsHome(prefix: string): TmpfsHome {
  const root = mkdtempSync(join(tmpdir(), prefix));
  const home = join(root, 'home');
  const project = join(root, 'project');
  const auditDir = join(home, 'audit');
  mkdirSync(auditDir, { recursive: true, mode: 0o700 });
  mkdirSync(join(project, '.forge'), { recursive: true });
  let mounted = false;
  onTestFinished(async () => {
    try {
      for (let i = 0; mounted; i++) {
        try {
          execFileSync('umount', [auditDir], { stdio: 'pipe' });
          mounted = false;
        } catch (err) {
          if (i >= 50) throw new Error(`cannot unmount the test tmpfs at ${auditDir}: ${(err as Error).message}`);
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    } finally {
      if (!mounted) rmSync(root, { recursive: true, force: true });
    }
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
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('FORGE_')) env[k] = v;
  Object.assign(env, { FORGE_HOME: home, NO_COLOR: '1' });
  const filler = join(auditDir, 'filler');
  return {
    root,
    home,
    project,
    auditDir,
    env,
    file(rel, text) {
      const p = join(project, rel);
      mkdirSync(dirname(p), { recursive: true });
      writeFileSync(p, text);
      return p;
    },
    otherProject(name) {
      const p = join(root, name);
      mkdirSync(join(p, '.forge'), { recursive: true });
      return p;
    },
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
