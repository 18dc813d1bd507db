import { execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, unlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openAuditLog, verifyLog } from '@forge/audit-chain';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createForge, type Forge } from '../src/index.js';
import { asRoot, type Entry, failed, failingWrite, okData, py, requireSandbox } from './helpers.js';

/**
 * A forge whose audit directory is its own 256 KiB tmpfs, mounted in this test process's own
 * mount namespace: root only (CI's root pass). Mounting that fails fails the test with the
 * reason: there is no way to test a full disk without one.
 */
async function fullDiskForge(): Promise<{ forge: Forge; auditDir: string; fill(): void; free(): void; entries(): Entry[] }> {
  await requireSandbox();
  const root = mkdtempSync(join(tmpdir(), 'forge-audit-full-'));
  const home = join(root, 'home');
  const project = join(root, 'project');
  const auditDir = join(home, 'audit');
  mkdirSync(auditDir, { recursive: true, mode: 0o700 });
  mkdirSync(join(project, '.forge'), { recursive: true, mode: 0o700 });
  let mounted = false;
  let forge: Forge | undefined;
  onTestFinished(async () => {
    try {
      await forge?.close({ graceMs: 2000 });
    } finally {
      if (mounted) execFileSync('umount', [auditDir]);
      rmSync(root, { recursive: true, force: true });
    }
  });
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k,mode=0700', 'tmpfs', auditDir], { stdio: 'pipe' });
    mounted = true;
  } catch (err) {
    const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim();
    throw new Error(
      `this test needs a tmpfs of its own for the audit directory (run it as root, where mount -t tmpfs works): mount failed: ${stderr || (err as Error).message}`,
    );
  }
  forge = await createForge({ env: {}, home, project });
  const filler = join(auditDir, 'filler');
  return {
    forge,
    auditDir,
    /** Writes a file until the filesystem has no block left. */
    fill() {
      const fd = openSync(filler, 'w');
      const block = Buffer.alloc(4096, 1);
      try {
        for (;;) writeSync(fd, block);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
      } finally {
        closeSync(fd);
      }
    },
    free() {
      unlinkSync(filler);
    },
    entries: () =>
      readFileSync(join(auditDir, 'forge.log'), 'utf8')
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as Entry),
  };
}

/** Runs `op` until it is answered with a failure (at most 60 times); the ok answers before it, and that one. */
async function untilRefused<T extends { ok: boolean }>(op: () => Promise<T>): Promise<{ answered: T[]; last: T }> {
  const answered: T[] = [];
  for (let i = 0; i < 60; i++) {
    const r = await op();
    if (!r.ok) return { answered, last: r };
    answered.push(r);
  }
  throw new Error('60 answers in a row on a full filesystem: the audit log never reported a failed append');
}

const echo = py('fs.echo', 'print(json.dumps({"ok": True, "data": args}))');

describe('audit log on a full filesystem (fails closed)', () => {
  asRoot('answers nothing it cannot audit, refuses while full, records one recovery entry once writable', async () => {
    const fx = await fullDiskForge();
    const { forge } = fx;
    expect(await forge.forgeTool(echo)).toMatchObject({ ok: true });
    expect(okData(await forge.callTool('fs.echo', { n: 1 }))).toEqual({ n: 1 });

    fx.fill();
    // tmpfs allocates whole pages: the log's last page may still take a few entries. Every call
    // answered ok until the first failure must have its entry in the log.
    const { answered, last: ran } = await untilRefused(() => forge.callTool('fs.echo', { n: 2 }));
    const called = fx.entries().filter((e) => e.type === 'forge.called');
    for (const a of answered) expect(called.map((e) => e.data.run_id)).toContain(a.meta.run_id);
    // The tool ran, but its forge.called entry could not be written: the answer is withheld.
    const err = failed(ran, 'audit_unavailable');
    expect(err.message).toContain(join(fx.auditDir, 'forge.log'));
    expect(err.message).toContain('ENOSPC');
    expect(err.message).toContain(`free space on the filesystem holding ${fx.auditDir}`);
    const runId = ran.meta.run_id as string;
    const runs = join(forge.paths.runsDir);
    const dir = readdirSync(runs).find((n) => n.endsWith(`_${runId}`)) as string;
    const manifest = JSON.parse(readFileSync(join(runs, dir, 'run_manifest.json'), 'utf8'));
    expect(manifest).toMatchObject({
      answered: 'audit_unavailable',
      audit_append: { ok: false, entry: 'forge.called', errno: 'ENOSPC' },
    });

    // Closed: nothing runs and nothing is forged while the log takes no appends.
    const before = readdirSync(runs).length;
    for (let i = 0; i < 3; i++) failed(await forge.callTool('fs.echo', { n: 3 + i }), 'audit_unavailable');
    failed(await forge.callTool('no.such', {}), 'audit_unavailable');
    expect(readdirSync(runs).length).toBe(before);
    const forged = await forge.forgeTool(py('fs.other', 'print(json.dumps({"ok": True, "data": 1}))'));
    expect(forged).toMatchObject({ ok: false, kind: 'audit_unavailable' });
    expect(await forge.removeTool('fs.echo')).toMatchObject({ ok: false, kind: 'audit_unavailable' });
    expect((await forge.listTools()).map((t) => t.tool.name)).toEqual(['fs.echo']);

    fx.free();
    // Calls arriving together share one probe: one recovery entry, then every call runs.
    const after = await Promise.all([9, 10, 11, 12].map((n) => forge.callTool('fs.echo', { n })));
    expect(after.map(okData)).toEqual([{ n: 9 }, { n: 10 }, { n: 11 }, { n: 12 }]);
    const entries = fx.entries();
    const recovered = entries.filter((e) => e.type === 'forge.audit_recovered');
    expect(recovered).toHaveLength(1);
    expect(recovered[0]?.data).toMatchObject({
      failed_appends: 1,
      refused: 6,
      failed_probes: 6,
      errno: ['ENOSPC'],
      lost_by_type: { 'forge.called': 1 },
      lost: [{ type: 'forge.called', name: 'fs.echo', run_id: runId }],
      log: join(fx.auditDir, 'forge.log'),
    });
    const r = recovered[0]?.data as { first_failure_at: string; last_failure_at: string };
    expect(Date.parse(r.first_failure_at)).toBeLessThanOrEqual(Date.parse(r.last_failure_at));
    // The gap shows in the log in order: the two answered calls, the recovery, the next call.
    expect(entries.filter((e) => e.type.startsWith('forge.')).map((e) => [e.type, e.data.ok ?? null])).toEqual([
      ['forge.created', true],
      ['forge.called', true],
      ...answered.map(() => ['forge.called', true]),
      ['forge.audit_recovered', null],
      ...after.map(() => ['forge.called', true]),
    ]);
    await forge.close();
    const v = await verifyLog(join(fx.auditDir, 'forge.log'));
    expect(v.first_bad).toBeUndefined();
    expect(v.ok).toBe(true);
  });

  asRoot('a forge whose forge.created entry cannot be written is taken back, not reported as created', async () => {
    const fx = await fullDiskForge();
    const { forge } = fx;
    // Full between the gate's look and the entry: the registry write happens, the entry fails.
    const spec = py('fs.late', 'print(json.dumps({"ok": True, "data": 1}))');
    const first = await forge.forgeTool(py('fs.first', 'print(json.dumps({"ok": True, "data": 0}))'));
    expect(first).toMatchObject({ ok: true });
    fx.fill();
    let i = 0;
    const { answered, last: r } = await untilRefused(() => forge.forgeTool({ ...spec, name: `fs.late${i++}` }));
    const created = fx.entries().filter((e) => e.type === 'forge.created');
    for (const a of answered) expect(created.map((e) => e.data.name)).toContain(a.ok && a.tool.name);
    expect(r).toMatchObject({ ok: false, kind: 'audit_unavailable' });
    if (r.ok) return;
    const refusedName = `fs.late${i - 1}`;
    expect(r.message).toContain(`"${refusedName}" was not forged: the registry write was taken back`);
    expect((await forge.listTools()).map((t) => t.tool.name)).toEqual(['fs.first', ...answered.map((a) => (a.ok ? a.tool.name : ''))]);
    expect(created.map((e) => e.data.name)).not.toContain(refusedName);
    fx.free();
    expect(await forge.forgeTool({ ...spec, name: refusedName })).toMatchObject({ ok: true, tool: { name: refusedName } });
    const types = fx.entries().map((e) => e.type);
    expect(types.filter((t) => t === 'forge.audit_recovered')).toHaveLength(1);
    expect(fx.entries().find((e) => e.type === 'forge.audit_recovered')?.data).toMatchObject({
      lost_by_type: { 'forge.created': 1 },
    });
  });

  asRoot('full before the engine wrote anything: the policy it opened with still comes before the first action the log takes', async () => {
    const fx = await fullDiskForge();
    const { forge } = fx;
    fx.fill();
    let i = 0;
    const forgeOne = () => forge.forgeTool(py(`fs.early${i++}`, 'print(json.dumps({"ok": True, "data": 0}))'));
    const { answered } = await untilRefused(forgeOne);
    fx.free();
    expect(await forgeOne()).toMatchObject({ ok: true });
    const types = fx.entries().map((e) => e.type);
    const policy = types.indexOf('policy.reloaded');
    // Whatever the last page took before the filesystem was full, the policy entry is written
    // first; the refused forge and a failed try of the policy entry are what the recovery lists.
    expect(policy, types.join(', ')).toBeGreaterThanOrEqual(0);
    expect(types.slice(0, policy).filter((t) => t.startsWith('forge.') && t !== 'forge.audit_recovered')).toEqual([]);
    expect(types.filter((t) => t === 'policy.reloaded')).toHaveLength(1);
    expect(types.filter((t) => t === 'forge.created')).toHaveLength(answered.length + 1);
    await forge.close();
    expect((await verifyLog(join(fx.auditDir, 'forge.log'))).ok).toBe(true);
  });
});

describe('audit log failing with EIO or EDQUOT (injected at the write, a real log otherwise)', () => {
  for (const code of ['EIO', 'EDQUOT'] as const) {
    it(`${code}: the call is answered audit_unavailable with the fix, refused until a real append succeeds`, async () => {
      await requireSandbox();
      const root = mkdtempSync(join(tmpdir(), 'forge-audit-errno-'));
      let failing = false;
      const log = await openAuditLog(join(root, 'audit.log'), { io: failingWrite(() => failing, code) });
      const forge = await createForge({ env: {}, home: join(root, 'home'), project: join(root, 'project'), audit: log });
      onTestFinished(async () => {
        await forge.close({ graceMs: 2000 });
        await log.close();
        rmSync(root, { recursive: true, force: true });
      });
      expect(await forge.forgeTool(echo)).toMatchObject({ ok: true });
      failing = true;
      const err = failed(await forge.callTool('fs.echo', { n: 1 }), 'audit_unavailable');
      expect(err.message).toContain(`${code}: injected`);
      expect(err.message).toContain(code === 'EIO' ? 'EIO is a device error' : 'raise the disk quota');
      failed(await forge.callTool('fs.echo', { n: 2 }), 'audit_unavailable');
      expect(await forge.promoteTool('fs.echo')).toMatchObject({ ok: false, kind: 'audit_unavailable' });
      failing = false;
      expect(okData(await forge.callTool('fs.echo', { n: 3 }))).toEqual({ n: 3 });
      await log.flush();
      const v = await verifyLog(join(root, 'audit.log'));
      expect(v.ok).toBe(true);
      const rec = readFileSync(join(root, 'audit.log'), 'utf8')
        .split('\n')
        .filter((l) => l.includes('"forge.audit_recovered"'))
        .map((l) => (JSON.parse(l) as Entry).data);
      expect(rec).toEqual([
        expect.objectContaining({ failed_appends: 1, failed_probes: 2, refused: 2, errno: [code], lost_by_type: { 'forge.called': 1 } }),
      ]);
    });
  }
});

describe('promote and remove whose entries cannot be written (EIO injected at the write)', () => {
  it('are taken back: the user scope and the project scope are as before, and the recovery entry lists them', async () => {
    await requireSandbox();
    const root = mkdtempSync(join(tmpdir(), 'forge-audit-undo-'));
    let failing = false;
    const log = await openAuditLog(join(root, 'audit.log'), { io: failingWrite(() => failing) });
    const forge = await createForge({ env: {}, home: join(root, 'home'), project: join(root, 'project'), audit: log });
    onTestFinished(async () => {
      await forge.close({ graceMs: 2000 });
      await log.close();
      rmSync(root, { recursive: true, force: true });
    });
    expect(await forge.forgeTool(echo)).toMatchObject({ ok: true });
    const names = async (scope: 'user' | 'project') => (await forge.listTools({ scope })).map((t) => `${t.tool.name}@${t.tool.version}`);

    failing = true;
    const promoted = await forge.promoteTool('fs.echo');
    expect(promoted).toMatchObject({ ok: false, kind: 'audit_unavailable' });
    expect(promoted.ok || promoted.message).toContain('"fs.echo" was not promoted: the registry write was taken back');
    expect(await names('user')).toEqual([]);
    failing = false;
    expect(okData(await forge.callTool('fs.echo', { n: 1 }))).toEqual({ n: 1 });

    failing = true;
    const removed = await forge.removeTool('fs.echo');
    expect(removed).toMatchObject({ ok: false, kind: 'audit_unavailable' });
    expect(removed.ok || removed.message).toContain('"fs.echo" was not removed: it is live again as version 2');
    expect(await names('project')).toEqual(['fs.echo@2']);
    failing = false;
    expect(okData(await forge.callTool('fs.echo', { n: 2 }))).toEqual({ n: 2 });

    await log.flush();
    expect((await verifyLog(join(root, 'audit.log'))).ok).toBe(true);
    const rec = readFileSync(join(root, 'audit.log'), 'utf8')
      .split('\n')
      .filter((l) => l.includes('"forge.audit_recovered"'))
      .map((l) => (JSON.parse(l) as Entry).data);
    expect(rec).toEqual([
      expect.objectContaining({ failed_appends: 1, lost: [expect.objectContaining({ type: 'forge.promoted', name: 'fs.echo' })] }),
      expect.objectContaining({ failed_appends: 1, lost: [expect.objectContaining({ type: 'forge.removed', name: 'fs.echo' })] }),
    ]);
  });
});
