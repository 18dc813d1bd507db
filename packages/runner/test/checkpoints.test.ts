import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { generateSigningKeys, reanchorAuditLog, verifyLog } from '@forge/audit-chain';
import { scaled } from '@forge/test-utils';
import { describe, expect, it, vi } from 'vitest';
import { createForge } from '../src/index.js';
import { okData, py, setup } from './helpers.js';

const lines = (file: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l !== '');
const checkpointsOf = (log: string) => lines(`${log}.checkpoints`).map((l) => JSON.parse(l) as Record<string, unknown>);

describe('forge checkpoints its own audit log', () => {
  it('at close, signed with FORGE_AUDIT_KEY: cutting the log is then caught, and forge refuses to append to it', async () => {
    const fx = await setup();
    const keys = generateSigningKeys();
    const keyFile = join(fx.root, 'audit.key');
    writeFileSync(keyFile, keys.privateKey, { mode: 0o600 });
    // The fixture's engine wrote an unsigned log (a refused call, after the policy it loaded):
    // signing starts with an explicit, recorded anchor.
    expect(await fx.forge.callTool('missing', {})).toMatchObject({ ok: false, error: { kind: 'unknown_tool' } });
    await fx.forge.close();
    await expect(fx.reopen({ env: { FORGE_AUDIT_KEY: keyFile } })).rejects.toMatchObject({ code: 'log_unanchored' });
    const anchored = await reanchorAuditLog(fx.forge.paths.auditLog, {
      signingKey: keys.privateKey,
      reason: 'start signing',
      anchorFile: fx.forge.paths.auditAnchor,
    });
    expect(anchored).toMatchObject({ last_signed_checkpoint: null, held: null, missing_entries: 0 });
    const f = await fx.reopen({ env: { FORGE_AUDIT_KEY: keyFile } });
    expect((await f.forgeTool(py('echo', 'print(json.dumps({"ok": True, "data": args}))'))).ok).toBe(true);
    for (let i = 0; i < 4; i++) okData(await f.callTool('echo', { i }));
    await f.close();
    const log = f.paths.auditLog;
    const n = lines(log).length;
    expect(n).toBeGreaterThanOrEqual(5);
    expect(checkpointsOf(log).at(-1)).toMatchObject({ entries: n, key_id: expect.any(String), sig: expect.any(String) });
    const signed = await verifyLog(log, { publicKey: keys.publicKey });
    expect(signed).toMatchObject({ ok: true, entries: n, uncheckpointed: 0, checkpoint: { entries: n, signed: true } });

    const whole = readFileSync(log);
    try {
      writeFileSync(log, `${lines(log).slice(0, 3).join('\n')}\n`);
      expect((await verifyLog(log)).first_bad).toMatchObject({ seq: 4, reason: 'truncated' });
      await expect(createForge({ env: {}, home: fx.home, project: fx.project })).rejects.toMatchObject({ code: 'log_behind_checkpoint' });
    } finally {
      writeFileSync(log, whole); // the fixture verifies the log when the test ends
    }
  });

  it('every 4096 appends without waiting for close, and not on every call', async () => {
    const fx = await setup();
    const log = fx.forge.paths.auditLog;
    // Refusals append one entry each and run nothing: a cheap way to many entries.
    await Promise.all(Array.from({ length: 4200 }, (_, i) => fx.forge.callTool(`missing_${i}`, {})));
    // One checkpoint for 4096 calls (a second one only if the 5 s timer came first on a slow host).
    await vi.waitFor(() => expect(checkpointsOf(log).some((c) => (c.entries as number) >= 4096)).toBe(true), {
      timeout: scaled(5000),
      interval: 20,
    });
    const before = checkpointsOf(log);
    expect(before.length).toBeLessThanOrEqual(2);
    expect(before[0]).not.toHaveProperty('sig');
    await fx.forge.close();
    expect(checkpointsOf(log)).toHaveLength(before.length + 1);
    expect(checkpointsOf(log).at(-1)?.entries).toBe(lines(log).length);
  });

  it('a few seconds after an append no checkpoint covers, while the engine stays open', async () => {
    const fx = await setup();
    const log = fx.forge.paths.auditLog;
    await fx.forge.callTool('nothing_here', {});
    const n = lines(log).length;
    await vi.waitFor(() => expect(checkpointsOf(log)).toEqual([expect.objectContaining({ entries: n })]), {
      timeout: scaled(8000),
      interval: 100,
    });
  });

  it('a configured key that cannot be used stops the engine from opening (never an unsigned fallback)', async () => {
    const fx = await setup();
    const keyFile = join(fx.root, 'open.key');
    writeFileSync(keyFile, generateSigningKeys().privateKey, { mode: 0o644 });
    await expect(fx.reopen({ env: { FORGE_AUDIT_KEY: keyFile } })).rejects.toThrow(`run: chmod 600 ${keyFile}`);
    const missing = join(fx.root, 'no.key');
    await expect(fx.reopen({ auditKey: missing })).rejects.toThrow(
      `the audit signing key ${missing} (ForgeOptions.auditKey) cannot be opened`,
    );
    const notKey = join(fx.root, 'not.key');
    writeFileSync(notKey, 'hello', { mode: 0o600 });
    await expect(fx.reopen({ auditKey: notKey })).rejects.toMatchObject({ code: 'invalid_key' });
  });
});
