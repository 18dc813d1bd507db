import { createPrivateKey, generateKeyPairSync } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { checkWitnessed, generateSigningKeys, noteVerifierKey, openWitness, witnessHttpHandler } from '@forge/audit-chain';
import { waitFor } from '@forge/test-utils';
import { describe, expect, it, onTestFinished } from 'vitest';
import { example, setup } from './helpers.js';

/**
 * The witnesses' round after each scheduled checkpoint (witnessing.ts): with `<home>/witnesses.json`
 * listing a witness, the engine's next checkpoint is cosigned and kept in `<home>/audit.witnessed`,
 * and the log's own tree checkpoint carries the cosignature.
 */
describe('witnessing', () => {
  it('has each scheduled checkpoint cosigned by the witnesses the home lists', async () => {
    const keys = generateSigningKeys();
    const fx0 = await setup();
    const keyFile = join(fx0.root, 'audit.key');
    writeFileSync(keyFile, keys.privateKey, { mode: 0o600 });
    const fx = await setup({ forge: { auditKey: keyFile } });
    const log = fx.forge.paths.auditLog;
    const logVkey = noteVerifierKey('forge-operator', createPrivateKey(keys.privateKey));
    const witness = await openWitness({
      name: 'w.example/w',
      privateKey: generateKeyPairSync('ed25519').privateKey,
      logs: [{ origin: `${hostname()}${resolve(log)}`, vkeys: [logVkey] }],
      dir: join(fx.root, 'witness'),
    });
    const server = createServer(witnessHttpHandler(witness));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    writeFileSync(join(fx.home, 'witnesses.json'), JSON.stringify({ quorum: 1, witnesses: [{ url, vkey: witness.vkey }] }));

    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    expect((await fx.forge.callTool('fib', { n: 9 })).ok).toBe(true);
    // The schedule checkpoints a few seconds after the first append no checkpoint covers.
    const kept = join(fx.home, 'audit.witnessed');
    await waitFor('the witnessed checkpoint', () => existsSync(kept) || undefined, { timeoutMs: 60_000 });
    const w = checkWitnessed(readFileSync(kept, 'utf8'), [logVkey], [witness.vkey], 1);
    expect(w).toMatchObject({ ok: true, cosigners: ['w.example/w'] });
    expect((await witness.record(`${hostname()}${resolve(log)}`))?.size).toBe((w as { size: number }).size);
    expect(checkWitnessed(readFileSync(join(`${log}.tlog`, 'checkpoint'), 'utf8'), [logVkey], [witness.vkey], 1).ok).toBe(true);
  });
});
