// `forge audit prove`: a receipt for one call (a tree checkpoint signed with FORGE_AUDIT_KEY and
// the inclusion proof of the call's entry) that `forge-audit verify-proof` checks with the public
// key alone; a changed receipt does not check, and no receipt is made over a damaged log.
import { spawnSync } from 'node:child_process';
import { createPrivateKey } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { generateSigningKeys } from '@forge/audit-chain';
import { scaled } from '@forge/test-utils';
import { beforeAll, describe, expect, it } from 'vitest';
import { EXAMPLES, requireCliAndSandbox, runCli, scratch } from './helpers.js';

const AUDIT_CLI = resolve(import.meta.dirname, '../../../packages/audit-chain/dist/cli.js');

beforeAll(requireCliAndSandbox);

describe('forge audit prove', () => {
  it('proves a call by its run id; the receipt checks offline, a changed one does not', async () => {
    const s = scratch();
    const keys = generateSigningKeys();
    const key = join(s.root, 'audit.key');
    writeFileSync(key, keys.privateKey, { mode: 0o600 });
    writeFileSync(join(s.root, 'audit.pub'), keys.publicKey);
    const o = { cwd: s.project, env: { ...s.env, FORGE_AUDIT_KEY: key } };
    expect((await runCli(['tools', 'forge', join(EXAMPLES, 'fib')], o)).code).toBe(0);
    const called = await runCli(['tools', 'call', 'fib', '{"n":12}', '--json'], o);
    expect(called.code, called.stderr).toBe(0);
    const runId = JSON.parse(called.stdout).meta.run_id as string;
    await runCli(['tools', 'call', 'fib', '{"n":13}'], o);

    const receipt = join(s.root, 'receipt');
    const proved = await runCli(['audit', 'prove', runId, '--out', receipt, '--json'], o);
    expect(proved.code, proved.stderr).toBe(0);
    const r = JSON.parse(proved.stdout) as { seq: number; size: number; vkey: string };
    const entries = JSON.parse((await runCli(['audit', 'tail', '--json', '-n', '100'], o)).stdout) as {
      seq: number;
      type: string;
      data: { run_id?: string };
    }[];
    expect(entries.find((e) => e.seq === r.seq)).toMatchObject({ type: 'forge.called', data: { run_id: runId } });
    expect(r.size).toBeGreaterThan(r.seq);
    // The proof is against the log's own signed tree checkpoint (published beside it at close).
    const log = join(s.home, 'audit', 'forge.log');
    const published = readFileSync(join(`${log}.tlog`, 'checkpoint'), 'utf8');
    expect(readFileSync(join(receipt, 'checkpoint'), 'utf8')).toBe(published);
    expect(published.split('\n')[0]).toBe(`${hostname()}${resolve(log)}`);

    // forge-audit, the log's own command, with the public key alone.
    const verify = (proof: string) => {
      const v = spawnSync(
        process.execPath,
        [AUDIT_CLI, 'verify-proof', join(receipt, 'checkpoint'), proof, '--key-pub', join(s.root, 'audit.pub'), '--name', 'forge-operator'],
        { cwd: s.root, env: s.env, encoding: 'utf8', timeout: scaled(60_000) },
      );
      return { code: v.status, stdout: v.stdout, stderr: v.stderr };
    };
    const ok = verify(join(receipt, 'proof.json'));
    expect(ok.stdout.trim()).toBe(
      `proven: entry ${r.seq} (index ${r.seq - 1}) is in ${readFileSync(join(receipt, 'checkpoint'), 'utf8').split('\n')[0]} at size ${r.size}`,
    );
    expect(ok.code).toBe(0);
    const doc = JSON.parse(readFileSync(join(receipt, 'proof.json'), 'utf8'));
    expect(doc.inclusion.line).toContain(`"run_id":"${runId}"`);
    doc.inclusion.line = doc.inclusion.line.replace('"ok":true', '"ok":false');
    writeFileSync(join(s.root, 'changed.json'), JSON.stringify(doc));
    const changed = verify(join(s.root, 'changed.json'));
    expect(changed.code).toBe(1);
    expect(changed.stdout).toMatch(/^NOT proven/);
    // Never over a receipt already there.
    const again = await runCli(['audit', 'prove', runId, '--out', receipt], o);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(
      /checkpoint and .*proof\.json already exist: a receipt is never written over another; give --out a new directory/,
    );

    // Made from the tiles beside the log; a tile changed on disk does not change the proof (it is
    // made from the entries instead, since the tiles' proof does not reach the signed head).
    const tile = join(`${log}.tlog`, 'tile', '0', `000.p`, String(r.size));
    const tileBytes = readFileSync(tile);
    writeFileSync(tile, Buffer.alloc(tileBytes.length, 7));
    const second = join(s.root, 'receipt2');
    const proved2 = await runCli(['audit', 'prove', runId, '--out', second], o);
    expect(proved2.code, proved2.stderr).toBe(0);
    expect(readFileSync(join(second, 'proof.json'), 'utf8')).toBe(readFileSync(join(receipt, 'proof.json'), 'utf8'));
    writeFileSync(tile, tileBytes);

    // A damaged log gives no receipt.
    writeFileSync(log, readFileSync(log, 'utf8').replace(runId, `${runId.slice(0, -1)}x`));
    const refused = await runCli(['audit', 'prove', runId], o);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/does not verify .*no proof is made over a damaged log/);
  });

  it('consistency: the log at an older checkpoint is a prefix of it now, checked offline; a forked history is reported', async () => {
    const s = scratch();
    const keys = generateSigningKeys();
    const key = join(s.root, 'audit.key');
    writeFileSync(key, keys.privateKey, { mode: 0o600 });
    const o = { cwd: s.project, env: { ...s.env, FORGE_AUDIT_KEY: key } };
    expect((await runCli(['tools', 'forge', join(EXAMPLES, 'fib')], o)).code).toBe(0);
    await runCli(['tools', 'call', 'fib', '{"n":5}'], o);
    const log = join(s.home, 'audit', 'forge.log');
    const old = join(s.root, 'old-checkpoint');
    writeFileSync(old, readFileSync(join(`${log}.tlog`, 'checkpoint')));
    for (const n of [6, 7, 8]) await runCli(['tools', 'call', 'fib', `{"n":${n}}`], o);

    const out = join(s.root, 'consistency');
    const proved = await runCli(['audit', 'consistency', old, '--out', out, '--json'], o);
    expect(proved.code, proved.stderr).toBe(0);
    const r = JSON.parse(proved.stdout) as { old: number; new: number; vkey: string };
    expect(r.new).toBeGreaterThan(r.old);
    const check = (proof: string) =>
      spawnSync(process.execPath, [AUDIT_CLI, 'verify-proof', join(out, 'checkpoint'), proof, '--vkey', r.vkey], {
        cwd: s.root,
        env: s.env,
        encoding: 'utf8',
        timeout: scaled(60_000),
      });
    const ok = check(join(out, 'consistency.json'));
    expect(ok.status, ok.stdout + ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/is a prefix of it at size/);

    // A checkpoint of another history at the old size, signed with the same key: a fork.
    const chain = await import('@forge/audit-chain');
    const text = chain.openNote(readFileSync(old, 'utf8'), [r.vkey]) as { text: string };
    const cp = chain.parseTreeCheckpoint(text.text) as { origin: string; size: number; root: Uint8Array };
    const fork = join(s.root, 'fork-checkpoint');
    writeFileSync(
      fork,
      chain.signNote(chain.formatTreeCheckpoint({ ...cp, root: Buffer.alloc(32, 7) }), [
        { name: 'forge-operator', privateKey: createPrivateKey(keys.privateKey) },
      ]),
    );
    const forked = await runCli(['audit', 'consistency', fork], o);
    expect(forked.code).toBe(1);
    expect(forked.stdout).toMatch(/NOT CONSISTENT: .*not a prefix/);
    expect(forked.stdout).toMatch(/a fork, or a history rewritten since/);
    // The same forged history as the log's own checkpoint: forge audit prove refuses to prove against it.
    writeFileSync(join(`${log}.tlog`, 'checkpoint'), readFileSync(fork));
    const refused = await runCli(['audit', 'prove', '1'], o);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(
      /does not match its own signed tree checkpoint .*its history changed after that checkpoint was published/,
    );
    // Another key's checkpoint is not taken at all.
    const wrong = await runCli(
      [
        'audit',
        'consistency',
        old,
        '--vkey',
        chain.noteVerifierKey('forge-operator', createPrivateKey(chain.generateSigningKeys().privateKey)),
      ],
      o,
    );
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toMatch(/OLD .* is not signed by/);
  });

  it('needs the signing key, and an entry the log holds', async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    expect((await runCli(['tools', 'forge', join(EXAMPLES, 'fib')], o)).code).toBe(0);
    const nokey = await runCli(['audit', 'prove', '1'], o);
    expect(nokey.code).toBe(2);
    expect(nokey.stderr).toMatch(/set FORGE_AUDIT_KEY/);
    const keys = generateSigningKeys();
    writeFileSync(join(s.root, 'k'), keys.privateKey, { mode: 0o600 });
    const missing = await runCli(['audit', 'prove', 'c-no-such-call'], { ...o, env: { ...s.env, FORGE_AUDIT_KEY: join(s.root, 'k') } });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/no entry c-no-such-call in .* entries; a call_id or run_id names a call's entry/);
  });
});
