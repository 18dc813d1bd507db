import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { probe, runSandboxed } from '../src/index.js';
import { requireSandbox, tempDir } from './helpers.js';

/** A stand-in bwrap: a real executable that answers --version and fails the trial as told. */
async function fakeBwrap(version: string, trialStderr: string): Promise<string> {
  const dir = await tempDir();
  const path = join(dir, 'bwrap');
  writeFileSync(
    path,
    `#!/bin/sh\nif [ "$1" = "--version" ]; then echo "bubblewrap ${version}"; exit 0; fi\necho ${JSON.stringify(trialStderr)} >&2\nexit 1\n`,
  );
  chmodSync(path, 0o755);
  // As root the trial runs as the sandbox's uid, which must be able to run it.
  chmodSync(dir, 0o755);
  return path;
}

describe('probe', () => {
  it('finds this host able to sandbox, with its layout', async () => {
    await requireSandbox();
    const host = await probe();
    expect(host.ok).toBe(true);
    expect(host.problems).toEqual([]);
    expect(host.bwrap?.version).toMatch(/^\d+\.\d+\.\d+$/);
    expect(host.arch).toMatch(/^(x86_64|aarch64)$/);
    expect(host.roots.map((r) => r.path)).toContain('/bin');
    expect(await probe()).toBe(host); // cached per process
  });

  it('classifies a missing bwrap with the install command, and then refuses to run anything', async () => {
    const host = await probe({ bwrapPath: '/nonexistent/bwrap', refresh: true });
    expect(host.ok).toBe(false);
    expect(host.problems).toContainEqual(expect.objectContaining({ code: 'bwrap_missing', fix: 'apt-get install -y bubblewrap' }));
    await expect(runSandboxed({ command: ['/bin/true'] }, { bwrapPath: '/nonexistent/bwrap' })).rejects.toMatchObject({
      code: 'sandbox_unavailable',
    });
  });

  it('classifies a bwrap that is too old', async () => {
    const host = await probe({ bwrapPath: await fakeBwrap('0.6.2', ''), refresh: true });
    expect(host.problems.map((p) => p.code)).toEqual(['bwrap_too_old']);
    expect(host.problems[0]?.message).toContain('bwrap 0.6.2 is too old');
  });

  it('classifies blocked user namespaces and a masked /proc, each with a fix', async () => {
    const userns = await probe({
      bwrapPath: await fakeBwrap('0.8.0', 'bwrap: Creating new namespace failed: Operation not permitted'),
      refresh: true,
    });
    expect(userns.problems).toEqual([
      expect.objectContaining({ code: 'userns_blocked', fix: expect.stringMatching(/sysctl|seccomp|AppArmor/) }),
    ]);
    const proc = await probe({
      bwrapPath: await fakeBwrap('0.8.0', "bwrap: Can't mount proc on /newroot/proc: Operation not permitted"),
      refresh: true,
    });
    expect(proc.problems).toEqual([expect.objectContaining({ code: 'proc_unmountable' })]);
    const other = await probe({ bwrapPath: await fakeBwrap('0.8.0', 'bwrap: something unexpected'), refresh: true });
    expect(other.problems).toEqual([
      expect.objectContaining({ code: 'sandbox_failed', message: expect.stringContaining('something unexpected') }),
    ]);
  });
});
