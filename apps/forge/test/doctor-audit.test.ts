import { execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { requireCliAndSandbox, runCli } from './helpers.js';

beforeAll(requireCliAndSandbox);

/** A home whose audit directory is its own 256 KiB tmpfs; mounting that fails fails the test, with the reason. */
function homeOnTmpfs(): { home: string; project: string; auditDir: string; env: Record<string, string> } {
  const root = mkdtempSync(join(tmpdir(), 'forge-doctor-audit-'));
  const home = join(root, 'home');
  const project = join(root, 'project');
  const auditDir = join(home, 'audit');
  mkdirSync(auditDir, { recursive: true, mode: 0o700 });
  mkdirSync(join(project, '.forge'), { recursive: true });
  let mounted = false;
  onTestFinished(() => {
    try {
      if (mounted) execFileSync('umount', [auditDir]);
    } finally {
      rmSync(root, { recursive: true, force: true });
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
  return { home, project, auditDir, env };
}

const auditCheck = (stdout: string) =>
  (JSON.parse(stdout) as { checks: { name: string; ok: boolean; detail: string; fix?: string }[] }).checks.find(
    (c) => c.name === 'audit log',
  );

describe('forge doctor: an audit log that cannot be written', () => {
  it('reports a full filesystem and a read-only one, each with the fix, without writing an entry', async () => {
    const h = homeOnTmpfs();
    const o = { cwd: h.project, env: h.env };
    const log = join(h.auditDir, 'forge.log');
    writeFileSync(log, '');
    const filler = join(h.auditDir, 'filler');
    const fd = openSync(filler, 'w');
    try {
      for (;;) writeSync(fd, Buffer.alloc(4096, 1));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
    } finally {
      closeSync(fd);
    }
    const full = await runCli(['doctor', '--json'], o);
    expect(full.code, full.stdout).toBe(1);
    expect(auditCheck(full.stdout)).toEqual({
      name: 'audit log',
      ok: false,
      detail: expect.stringMatching(/has 0 bytes .*free .*audit_unavailable/),
      fix: `free space on the filesystem holding ${h.auditDir} (or raise the quota); forge takes calls again at the next call once an append succeeds`,
    });
    unlinkSync(filler);

    execFileSync('mount', ['-o', 'remount,ro', h.auditDir]);
    const ro = await runCli(['doctor', '--json'], o);
    expect(ro.code, ro.stdout).toBe(1);
    expect(auditCheck(ro.stdout)).toMatchObject({
      ok: false,
      detail: `${h.auditDir} cannot be written (EROFS): forge refuses every call and forge with audit_unavailable`,
      fix: expect.stringContaining(`remount the filesystem holding ${h.auditDir} read-write`),
    });
    execFileSync('mount', ['-o', 'remount,rw', h.auditDir]);
    // Writable again, only under 1 MiB free: still reported (this tmpfs holds 256 KiB).
    expect(auditCheck((await runCli(['doctor', '--json'], o)).stdout)).toMatchObject({
      ok: false,
      detail: expect.stringContaining('under 1048576'),
    });
  });
});
