// `forge witness` and `forge audit witness` / `verify --witness`: a real witness process cosigns
// the audit log's tree checkpoints as the log grows; a log cut and re-signed after the fact (with
// forge's own key, through forge audit anchor) is refused by the witness and by verify with the
// witness's key.
import { spawn } from 'node:child_process';
import { createPrivateKey } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import * as chain from '@forge/audit-chain';
import { waitFor } from '@forge/test-utils';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { CLI, EXAMPLES, requireCliAndSandbox, runCli, scratch } from './helpers.js';

beforeAll(requireCliAndSandbox);

/** Starts `forge witness` and waits for its JSON line (URL and verifier key). */
async function startWitness(args: string[], env: Record<string, string>): Promise<{ url: string; vkey: string }> {
  const child = spawn(process.execPath, [CLI, 'witness', ...args, '--json'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => {
    stdout += c;
  });
  child.stderr.on('data', (c: Buffer) => {
    stderr += c;
  });
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  onTestFinished(async () => {
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });
  return waitFor('the witness to listen', () => {
    if (child.exitCode !== null) throw new Error(`forge witness exited ${child.exitCode}: ${stderr}`);
    const line = stdout.split('\n')[0];
    return line && stdout.includes('\n') ? (JSON.parse(line) as { url: string; vkey: string }) : undefined;
  });
}

describe('witnesses', () => {
  it('cosign the log’s checkpoints as it grows; a log cut and re-signed is refused by the witness and by verify', async () => {
    const s = scratch();
    const keys = chain.generateSigningKeys();
    const key = join(s.root, 'audit.key');
    const pub = join(s.root, 'audit.pub');
    writeFileSync(key, keys.privateKey, { mode: 0o600 });
    writeFileSync(pub, keys.publicKey);
    const o = { cwd: s.project, env: { ...s.env, FORGE_AUDIT_KEY: key } };
    expect((await runCli(['tools', 'forge', join(EXAMPLES, 'fib')], o)).code).toBe(0);
    for (const n of [1, 2, 3]) expect((await runCli(['tools', 'call', 'fib', `{"n":${n}}`], o)).code).toBe(0);

    const log = join(s.home, 'audit', 'forge.log');
    const origin = `${hostname()}${resolve(log)}`;
    const logVkey = chain.noteVerifierKey('forge-operator', createPrivateKey(keys.privateKey));
    const w = await startWitness(['--home', join(s.root, 'witness'), '--name', 'w1.example/w', '--log', `${origin}=${logVkey}`], s.env);
    expect(w.vkey).toMatch(/^w1\.example\/w\+[0-9a-f]{8}\+/);
    writeFileSync(join(s.home, 'witnesses.json'), JSON.stringify({ quorum: 1, witnesses: [{ url: w.url, vkey: w.vkey }] }));

    const first = await runCli(['audit', 'witness'], o);
    expect(first.code, first.stdout + first.stderr).toBe(0);
    expect(first.stdout).toMatch(/✓ w1\.example\/w cosigned size \d+/);
    // The log's own checkpoint now carries the cosignature, and a receipt made from it does too.
    const published = readFileSync(join(`${log}.tlog`, 'checkpoint'), 'utf8');
    expect(chain.checkWitnessed(published, [logVkey], [w.vkey], 1)).toMatchObject({ ok: true });

    for (const n of [4, 5, 6]) expect((await runCli(['tools', 'call', 'fib', `{"n":${n}}`], o)).code).toBe(0);
    const second = await runCli(['audit', 'witness', '--json'], o);
    expect(second.code, second.stdout + second.stderr).toBe(0);
    const witnessedSize = (JSON.parse(second.stdout) as { size: number }).size;
    const verified = await runCli(['audit', 'verify', '--key-pub', pub, '--witness', w.vkey], o);
    expect(verified.code, verified.stdout + verified.stderr).toBe(0);
    expect(verified.stdout).toContain(`it holds the history of ${witnessedSize} entries cosigned by w1.example/w`);

    // An operator's copy of the witnessed checkpoint, kept elsewhere (a receipt carries one too).
    const copy = join(s.root, 'witnessed-copy');
    writeFileSync(copy, readFileSync(join(s.home, 'audit.witnessed')));
    // Whoever can write forge's home cuts the log, removes every checkpoint that would show it
    // (the checkpoint file, the anchor, the witnessed copy) and has forge sign over the cut log.
    const lines = readFileSync(log, 'utf8').split('\n').filter(Boolean);
    writeFileSync(log, `${lines.slice(0, lines.length - 6).join('\n')}\n`);
    for (const f of [`${log}.checkpoints`, join(s.home, 'audit.anchor'), join(s.home, 'audit.witnessed')]) rmSync(f, { force: true });
    const anchored = await runCli(['audit', 'anchor', '--reason', 'the attacker re-signs a cut log'], o);
    expect(anchored.code, anchored.stdout + anchored.stderr).toBe(0);
    const chainOk = await runCli(['audit', 'verify', '--key-pub', pub], o);
    expect(chainOk.code, chainOk.stdout + chainOk.stderr).toBe(0);
    const gone = await runCli(['audit', 'verify', '--key-pub', pub, '--witness', w.vkey], o);
    expect(gone.code).toBe(1);
    expect(gone.stdout).toMatch(/no witnessed checkpoint at .*audit\.witnessed/);
    const short = JSON.parse(
      (await runCli(['audit', 'verify', '--json', '--key-pub', pub, '--witness', w.vkey, '--witnessed', copy], o)).stdout,
    );
    expect(short).toMatchObject({
      ok: false,
      witnessed: { ok: false, reason: expect.stringMatching(/fewer than the \d+ the witnesses cosigned: it was cut/) },
    });
    // Grown past the witnessed size again: a different history under the same size.
    for (const n of [7, 8, 9, 10, 11, 12]) await runCli(['tools', 'call', 'fib', `{"n":${n}}`], o);
    const rewritten = await runCli(['audit', 'verify', '--key-pub', pub, '--witness', w.vkey, '--witnessed', copy], o);
    expect(rewritten.code).toBe(1);
    expect(rewritten.stdout).toMatch(/✗ against the witnesses: the log's first \d+ entries are not the history the witnesses cosigned/);
    const refused = await runCli(['audit', 'witness'], o);
    expect(refused.code).toBe(1);
    expect(refused.stdout).toMatch(/✗ w1\.example\/w .*422: the consistency proof .* does not verify/);
    expect(refused.stdout).toContain('NOT witnessed');
  });

  it('refuses a configuration or a command line that cannot work, saying what to write', async () => {
    const s = scratch();
    const o = { cwd: s.project, env: s.env };
    expect((await runCli(['witness', '--home', join(s.root, 'w'), '--name', 'w.example/w'], o)).stderr).toMatch(/give at least one --log/);
    expect((await runCli(['witness', '--home', join(s.root, 'w'), '--name', 'w.example/w', '--log', 'x=not-a-key'], o)).stderr).toMatch(
      /--log x=not-a-key: not ORIGIN=VKEY/,
    );
    const nofile = await runCli(['audit', 'witness'], o);
    expect(nofile.code).toBe(2);
    expect(nofile.stderr).toMatch(/witnesses\.json: missing; write \{"quorum": 1/);
    writeFileSync(
      join(s.home, 'witnesses.json'),
      JSON.stringify({ quorum: 2, witnesses: [{ url: 'http://127.0.0.1:1', vkey: 'x+00000000+AA==' }] }),
    );
    expect((await runCli(['audit', 'witness'], o)).stderr).toMatch(/witnesses\[0\]\.vkey is not an Ed25519 verifier key/);
  });
});
