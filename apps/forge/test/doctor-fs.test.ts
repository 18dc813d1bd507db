import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { FS_ANSWER_MS, fileSystemChecks, fsType } from '../src/doctor-fs.js';

/**
 * forge doctor's file system check. The local types are this machine's own, asked of the real
 * `stat`. No network file system or dead server can be made here, so those two are a `stat` of
 * the test's own on PATH: one that says `nfs`, and one that never answers (a process stuck as a
 * process on a dead NFS server is); the check must still return, within its bound.
 */

function fakeStat(script: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'forge-doctor-fs-'));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'stat'), `#!/bin/sh\n${script}\n`);
  chmodSync(join(dir, 'stat'), 0o755);
  return dir;
}

/** Runs `fn` with PATH starting at `dir`. */
async function withPath<T>(dir: string, fn: () => Promise<T>): Promise<T> {
  const before = process.env.PATH;
  process.env.PATH = `${dir}:${before}`;
  try {
    return await fn();
  } finally {
    process.env.PATH = before;
  }
}

describe('forge doctor: file systems', () => {
  it("names this machine's local file systems", async () => {
    const here = await fsType(tmpdir());
    expect(here).toMatchObject({ type: expect.any(String) });
    const checks = await fileSystemChecks({ home: tmpdir(), project: process.cwd() });
    expect(checks[0]).toMatchObject({ name: 'file systems', ok: true });
    expect(checks[0]?.detail).toContain(`temporary directory ${(here as { type: string }).type}`);
  });

  it('a network file system is a warning with its fix', async () => {
    const dir = fakeStat('echo nfs4');
    const checks = await withPath(dir, () => fileSystemChecks({ home: '/h', project: '/p' }));
    expect(checks.map((c) => [c.ok, c.warn])).toEqual([
      [true, true],
      [true, true],
      [true, true],
    ]);
    expect(checks[0]?.detail).toMatch(/is on nfs4, a network file system/);
    expect(checks[0]?.fix).toMatch(/TMPDIR/);
  });

  it(`one that does not answer is a problem, told within ${FS_ANSWER_MS} ms, and forge does not wait for it`, async () => {
    const dir = fakeStat('exec sleep 3600');
    const checks = await withPath(dir, () => fileSystemChecks({ home: '/h', project: '/p' }));
    expect(checks).toHaveLength(3);
    for (const c of checks) {
      expect(c.ok).toBe(false);
      expect(c.detail).toMatch(new RegExp(`did not say what file system it is on within ${FS_ANSWER_MS} ms`));
      expect(c.fix).toMatch(/findmnt -T/);
    }
  });
});
