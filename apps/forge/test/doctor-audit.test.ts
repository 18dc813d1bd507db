import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect } from 'vitest';
import { asRoot, requireCliAndSandbox, runCli } from './helpers.js';
import { tmpfsHome } from './tmpfs.js';

beforeAll(requireCliAndSandbox);

const auditCheck = (stdout: string) =>
  (JSON.parse(stdout) as { checks: { name: string; ok: boolean; detail: string; fix?: string }[] }).checks.find(
    (c) => c.name === 'audit log',
  );

describe('forge doctor: an audit log that cannot be written', () => {
  asRoot('reports a full filesystem and a read-only one, each with the fix, without writing an entry', async () => {
    const h = tmpfsHome('forge-doctor-audit-');
    const o = { cwd: h.project, env: h.env };
    writeFileSync(join(h.auditDir, 'forge.log'), '');
    h.fill();
    const full = await runCli(['doctor', '--json'], o);
    expect(full.code, full.stdout).toBe(1);
    expect(auditCheck(full.stdout)).toEqual({
      name: 'audit log',
      ok: false,
      detail: expect.stringMatching(/has 0 bytes .*free .*audit_unavailable/),
      fix: `free space on the filesystem holding ${h.auditDir} (or raise the quota); forge takes calls again at the next call once an append succeeds`,
    });
    h.free();

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
