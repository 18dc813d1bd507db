/**
 * The same hostile tool run by root and by an ordinary user (this process dropped to uid 65534
 * in a child): neither may reach host root or the kernel's knobs, and each run says which host
 * uid it ran as. CI runs the suite as root and as an ordinary user; as root, the drop to uid 65534
 * is made here too.
 */
import { chmodSync, chownSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ROOT_SANDBOX_UID } from '../src/index.js';
import { asRoot, isRoot, nodeAs, requireSandbox, tempDir } from './helpers.js';

beforeAll(requireSandbox);

/** The child's body: one hostile run with an output directory, reported as JSON. */
const HOSTILE = (out: string) => `
  const { runSandboxed } = await load('index.ts');
  const r = await runSandboxed({
    command: ['/bin/sh', '-c', [
      'printf "|/out/h.sh" > /proc/sys/kernel/core_pattern 2>/dev/null && echo ESCAPE:core_pattern',
      'echo 1 > /proc/sys/kernel/sysrq 2>/dev/null && echo ESCAPE:sysrq',
      'n=$(cat /proc/keys 2>/dev/null | wc -c); [ "$n" -gt 0 ] && echo ESCAPE:keys',
      'id -u > /out/uid; echo CONTROL:ran',
    ].join('; ')],
    mounts: [{ source: ${JSON.stringify(out)}, target: '/out', mode: 'rw', perRun: true }],
  });
  console.log(JSON.stringify({ stdout: r.stdout.toString(), hostUid: r.hostUid, reason: r.reason, outputs: r.outputs }));`;

describe('root and an ordinary user run the same hostile tool', () => {
  it('as whoever runs the suite (root: the dedicated sandbox uid; a user: that uid), and the kernel stays out of reach', async () => {
    const dir = await tempDir();
    const out = join(dir, 'out');
    mkdirSync(out);
    const { code, out: printed, err } = await nodeAs(HOSTILE(out));
    expect(code, err).toBe(0);
    const r = JSON.parse(printed);
    expect(r.stdout).toContain('CONTROL:ran');
    expect(r.stdout).not.toContain('ESCAPE:');
    expect(r.hostUid).toBe(isRoot ? ROOT_SANDBOX_UID : process.getuid?.());
    expect(readFileSync(join(out, 'uid'), 'utf8')).toBe('1000\n');
  });

  asRoot(
    'as an ordinary user (root drops to uid 65534): the tool runs as that uid, never more, and the kernel stays out of reach',
    async () => {
      const dir = await tempDir();
      chmodSync(dir, 0o755);
      const out = join(dir, 'out');
      mkdirSync(out);
      chownSync(out, 65534, 65534);
      const {
        code,
        out: printed,
        err,
      } = await nodeAs(HOSTILE(out), {
        wrap: ['setpriv', '--reuid', '65534', '--regid', '65534', '--clear-groups', '--'],
      });
      expect(code, err).toBe(0);
      const r = JSON.parse(printed);
      expect(r.stdout).toContain('CONTROL:ran');
      expect(r.stdout).not.toContain('ESCAPE:');
      expect(r.hostUid).toBe(65534);
      expect(readFileSync(join(out, 'uid'), 'utf8')).toBe('1000\n');
    },
  );
});
