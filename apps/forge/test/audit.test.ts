import { createPrivateKey } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as chain from '@forge/audit-chain';

import { beforeAll, describe, expect, it } from 'vitest';
import { EXAMPLES, requireCliAndSandbox, runCli, scratch } from './helpers.js';

beforeAll(requireCliAndSandbox);

const lines = (file: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l !== '');

describe('forge audit verify', () => {
  it('catches a log cut after forge wrote it (forge checkpoints its own log)', async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    expect((await runCli(['tools', 'forge', join(EXAMPLES, 'fib')], o)).code).toBe(0);
    for (const n of [3, 4, 5, 6]) expect((await runCli(['tools', 'call', 'fib', JSON.stringify({ n })], o)).code).toBe(0);
    const log = join(s.home, 'audit', 'forge.log');
    const n = lines(log).length;
    expect(n).toBeGreaterThan(5);
    const ok = await runCli(['audit', 'verify'], o);
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    expect(ok.stdout).toContain(`${n} entries intact`);
    expect(ok.stdout).toContain(`checkpoint at entry ${n}`);

    writeFileSync(log, `${lines(log).slice(0, 5).join('\n')}\n`);
    const cut = await runCli(['audit', 'verify'], o);
    expect(cut.code, cut.stdout + cut.stderr).toBe(1);
    expect(cut.stdout).toMatch(/entry 6 \(forge\.log line 6\) truncated/);
    const cutJson = JSON.parse((await runCli(['audit', 'verify', '--json'], o)).stdout);
    expect(cutJson).toMatchObject({ ok: false, entries: 5, first_bad: { seq: 6, reason: 'truncated' } });
  });

  it('with FORGE_AUDIT_KEY the checkpoints are signed, and --key-pub trusts only those', async () => {
    const s = scratch();
    const keys = chain.generateSigningKeys();
    const key = join(s.root, 'audit.key');
    const pub = join(s.root, 'audit.pub');
    writeFileSync(key, keys.privateKey, { mode: 0o600 });
    writeFileSync(pub, keys.publicKey);
    const signing = { cwd: s.project, env: { ...s.env, FORGE_AUDIT_KEY: key } };
    expect((await runCli(['tools', 'forge', join(EXAMPLES, 'fib')], signing)).code).toBe(0);
    const o = { cwd: s.project, env: s.env };
    const ok = await runCli(['audit', 'verify', '--key-pub', pub], o);
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/checkpoint at entry \d+ \(signed\)/);
    const other = join(s.root, 'other.pub');
    writeFileSync(other, chain.generateSigningKeys().publicKey);
    const wrong = JSON.parse((await runCli(['audit', 'verify', '--json', '--key-pub', other], o)).stdout);
    expect(wrong).toMatchObject({ ok: false, first_bad: { reason: 'signature_invalid' } });

    // The Merkle tree beside the log is checked against the entries too, its checkpoint signed by that key.
    expect(ok.stdout).toMatch(/its Merkle tree: \d+ tiles and the signed tree checkpoint of \d+ entries as the entries give them/);
    const log = join(s.home, 'audit', 'forge.log');
    const note = join(`${log}.tlog`, 'checkpoint');
    const text = readFileSync(note, 'utf8');
    const [origin, size, root] = text.split('\n');
    const flipped = Buffer.from(root as string, 'base64');
    flipped[0] = (flipped[0] as number) ^ 1;
    const forged = chain.signNote(chain.formatTreeCheckpoint({ origin: origin as string, size: Number(size), root: flipped }), [
      { name: 'forge-operator', privateKey: createPrivateKey(keys.privateKey) },
    ]);
    writeFileSync(note, forged);
    const tree = await runCli(['audit', 'verify', '--key-pub', pub], o);
    expect(tree.code, tree.stdout + tree.stderr).toBe(1);
    expect(tree.stdout).toMatch(/its Merkle tree .*checkpoint: its tree head is not the head of the log's first \d+ entries/);
    expect(JSON.parse((await runCli(['audit', 'verify', '--json', '--key-pub', pub], o)).stdout)).toMatchObject({
      ok: false,
      tree: { ok: false, checkpoint: 'signed', first_bad: { what: 'checkpoint' } },
    });
  });

  it('a log that is not there fails (exit 1, naming the path), whether forge never ran or the log was removed', async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    const log = join(s.home, 'audit', 'forge.log');
    const never = await runCli(['audit', 'verify'], o);
    expect(never.code, never.stdout + never.stderr).toBe(1);
    expect(never.stdout).toContain(`no audit log at ${log}`);

    expect((await runCli(['tools', 'forge', join(EXAMPLES, 'fib')], o)).code).toBe(0);
    rmSync(log);
    const removed = await runCli(['audit', 'verify', '--json'], o);
    expect(removed.code, removed.stdout + removed.stderr).toBe(1);
    expect(JSON.parse(removed.stdout)).toMatchObject({ ok: false, log, entries: 0, first_bad: { reason: 'log_missing' } });
  });
});
