import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { scaled } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import type { HostProblem } from '../src/index.js';
import { seccompProblem } from '../src/probe.js';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Fails with the install hint when util-linux's unshare is missing (never skips). */
function requireUnshare(): void {
  try {
    execFileSync('unshare', ['--version'], { stdio: 'ignore' });
  } catch {
    throw new Error('this test needs unshare (util-linux): apt-get install -y util-linux');
  }
}

/**
 * The problems `probe()` reports when run inside a user namespace whose `user.max_user_namespaces`
 * is 1, as a non-root uid of a namespace nested in it (that one counts): every sandbox's own user
 * namespace is then refused with ENOSPC, as on a host where the limit is 0.
 */
function probeWithNoUserNamespacesLeft(): HostProblem[] {
  const probe = `import('@forge/sandbox').then((m) => m.probe()).then((i) => process.stdout.write(JSON.stringify(i.problems)))`;
  const inner = `exec unshare --user --map-user=1000 --map-group=1000 --fork ${JSON.stringify(process.execPath)} -e ${JSON.stringify(probe)}`;
  const r = spawnSync(
    'unshare',
    ['--user', '--map-root-user', '--fork', 'sh', '-c', `echo 1 > /proc/sys/user/max_user_namespaces && ${inner}`],
    {
      cwd: pkg,
      encoding: 'utf8',
      timeout: scaled(60_000),
    },
  );
  if (r.status !== 0) throw new Error(`the namespace could not be made or the probe failed (exit ${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout) as HostProblem[];
}

describe('host preflight: causes made for real here', () => {
  it('no user namespaces left (user.max_user_namespaces reached in an enclosing namespace): named, with the sysctl that fixes it', () => {
    requireUnshare();
    const problems = probeWithNoUserNamespacesLeft();
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatchObject({ code: 'userns_blocked' });
    expect(problems[0]?.message).toMatch(/limit of user namespaces is reached \(or set to 0\).*ENOSPC/);
    expect(problems[0]?.fix).toMatch(/sysctl -w user\.max_user_namespaces=15000/);
    expect(problems[0]?.fix).not.toMatch(/seccomp/);
  });
});

describe('host preflight: seccomp', () => {
  it("is found in this kernel's /proc/self/status; a kernel without it is named, with the fix", () => {
    expect(seccompProblem(readFileSync('/proc/self/status', 'utf8'))).toBeUndefined();
    const without = readFileSync('/proc/self/status', 'utf8').replace(/^Seccomp.*\n/gm, '');
    expect(seccompProblem(without)).toMatchObject({ code: 'seccomp_unavailable', fix: expect.stringContaining('CONFIG_SECCOMP_FILTER') });
  });
});
