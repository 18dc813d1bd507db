import { describe, expect, it } from 'vitest';
import { buildBwrapArgs, type CheckedBind, DEFAULT_LIMITS, type HostLayout, resolveLimits } from '../src/index.js';

const layout: HostLayout = {
  roots: [
    { path: '/bin', symlink: 'usr/bin' },
    { path: '/lib', symlink: 'usr/lib' },
    { path: '/lib64', symlink: 'usr/lib64' },
    { path: '/sbin', symlink: 'usr/sbin' },
  ],
  etcDir: '/run/forge/etc',
  etcDirs: ['/etc/ld.so.conf.d', '/etc/ssl'],
};

describe('buildBwrapArgs', () => {
  it('emits the documented flag set, in order, as an array', () => {
    const binds: CheckedBind[] = [
      { path: '/home/ann/project/data.csv', mode: 'ro', kind: 'file', fd: 99 },
      { path: '/home/ann/project/out', mode: 'rw', kind: 'directory', fd: 98 },
    ];
    const args = buildBwrapArgs(
      {
        command: ['/usr/bin/python3', '-I', '/run/forge/tool/impl.py'],
        env: { API_TOKEN: 's3cret value' },
        mounts: [
          { source: '/home/ann/.forge/runs/r1/tool', target: '/run/forge/tool', mode: 'ro' },
          { source: '/home/ann/.forge/runs/r1/artifacts', target: '/run/forge/artifacts', mode: 'rw' },
        ],
        binds,
      },
      layout,
      { seccomp: 4, binds: [5, 6] },
      resolveLimits({ tmpBytes: 16 << 20 }),
    );
    expect(args).toMatchInlineSnapshot(`
      [
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        "1000",
        "--gid",
        "1000",
        "--hostname",
        "sandbox",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/local/bin:/usr/bin:/bin",
        "--setenv",
        "HOME",
        "/tmp",
        "--setenv",
        "TMPDIR",
        "/tmp",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "API_TOKEN",
        "s3cret value",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/sbin",
        "/sbin",
        "--ro-bind",
        "/run/forge/etc",
        "/etc",
        "--ro-bind",
        "/etc/ld.so.conf.d",
        "/etc/ld.so.conf.d",
        "--ro-bind",
        "/etc/ssl",
        "/etc/ssl",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        "16777216",
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        "--size",
        "16777216",
        "--tmpfs",
        "/dev/shm",
        "--ro-bind",
        "/home/ann/.forge/runs/r1/tool",
        "/run/forge/tool",
        "--bind",
        "/home/ann/.forge/runs/r1/artifacts",
        "/run/forge/artifacts",
        "--ro-bind-fd",
        "5",
        "/home/ann/project/data.csv",
        "--bind-fd",
        "6",
        "/home/ann/project/out",
        "--remount-ro",
        "/",
        "--remount-ro",
        "/dev",
        "--seccomp",
        "4",
        "--chdir",
        "/tmp",
        "--",
        "/usr/bin/python3",
        "-I",
        "/run/forge/tool/impl.py",
      ]
    `);
  });

  it('on a host without merged /usr, binds the real directories read-only', () => {
    const args = buildBwrapArgs(
      { command: ['/bin/true'] },
      { ...layout, roots: [{ path: '/bin' }, { path: '/lib' }] },
      { seccomp: 4, binds: [] },
      resolveLimits(),
    );
    expect(args.join(' ')).toContain('--ro-bind /bin /bin --ro-bind /lib /lib');
    expect(args.join(' ')).not.toContain('--symlink');
  });

  it('refuses a relative command, relative mounts and bad environment names', () => {
    const limits = resolveLimits();
    const plan = { seccomp: 4, binds: [] };
    expect(() => buildBwrapArgs({ command: ['python3'] }, layout, plan, limits)).toThrow(/command\[0\] must be an absolute path/);
    expect(() => buildBwrapArgs({ command: ['/bin/true'], mounts: [{ source: 'rel', mode: 'ro' }] }, layout, plan, limits)).toThrow(
      /mount paths must be absolute/,
    );
    expect(() => buildBwrapArgs({ command: ['/bin/true'], env: { 'BAD-NAME': 'x' } }, layout, plan, limits)).toThrow(
      /not a valid variable name/,
    );
  });
});

describe('resolveLimits', () => {
  it('fills defaults and refuses nonsense with the field named', () => {
    expect(resolveLimits()).toEqual(DEFAULT_LIMITS);
    expect(() => resolveLimits({ cpuSeconds: 0 })).toThrow('limits.cpuSeconds must be a positive integer (got 0)');
    expect(() => resolveLimits({ timeoutMs: 1.5 })).toThrow('limits.timeoutMs must be a positive integer (got 1.5)');
    expect(() => resolveLimits({ addressSpaceBytes: 2 ** 30 })).toThrow(/at least 4 GiB/);
  });
});
