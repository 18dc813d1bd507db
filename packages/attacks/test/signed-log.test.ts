// Invariant 6, a signed log cannot be re-signed over a cut (docs/security.md): with a signing key,
// a log no checkpoint signed by that key covers is refused (log_unanchored), a log behind its
// newest signed checkpoint is refused (log_behind_checkpoint), the newest signed checkpoint is also
// kept outside the log's directory, and re-anchoring is an explicit, recorded operator command.
import { readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { generateSigningKeys } from '@forge/audit-chain';
import { describe, expect, it } from 'vitest';
import { cli, scratch } from './helpers.js';

const tool = {
  name: 'echo',
  description: 'Echoes its input.',
  runtime: 'python3',
  input_schema: { type: 'object' },
  impl: 'import json, sys\nprint(json.dumps({"ok": True, "data": json.load(sys.stdin)}))',
};

/** A home whose engine signs with a fresh key, with a tool forged and called a few times. */
async function signedHome() {
  const t = scratch();
  const keys = generateSigningKeys();
  const key = join(t.root, 'audit.key');
  const pub = join(t.root, 'audit.pub');
  writeFileSync(key, keys.privateKey, { mode: 0o600 });
  writeFileSync(pub, keys.publicKey);
  const env = { FORGE_AUDIT_KEY: key };
  const run = (args: string[], input?: string) => cli(t, args, { env, ...(input ? { input } : {}) });
  expect((await run(['tools', 'forge', '-'], JSON.stringify(tool))).code).toBe(0);
  for (let i = 0; i < 3; i++) expect((await run(['tools', 'call', 'echo', JSON.stringify({ i })])).code).toBe(0);
  const log = join(t.home, 'audit', 'forge.log');
  const lines = readFileSync(log, 'utf8').split('\n').filter(Boolean);
  expect(lines.length).toBeGreaterThan(4);
  return { t, run, pub, log, lines };
}

/** Cuts the log to its first `n` lines. */
function cut(log: string, lines: string[], n: number): void {
  truncateSync(
    log,
    Buffer.byteLength(
      lines
        .slice(0, n)
        .map((l) => `${l}\n`)
        .join(''),
    ),
  );
}

describe('invariant 6: a signed log cannot be re-signed over a cut', () => {
  it('break 8: cut forge.log and delete its checkpoints: the next call is refused, nothing is signed over the cut, verify fails', async () => {
    const { t, run, pub, log, lines } = await signedHome();
    cut(log, lines, 2);
    rmSync(`${log}.checkpoints`);
    const next = await run(['tools', 'call', 'echo', '{"i": 9}']);
    expect(next.code).not.toBe(0);
    expect(next.stderr).toMatch(/log_behind_checkpoint|log_unanchored|checkpoint/);
    expect(readFileSync(log, 'utf8').split('\n').filter(Boolean)).toHaveLength(2);
    const v = await run(['audit', 'verify', '--key-pub', pub]);
    expect(v.code).toBe(1);
    void t;
  });

  it('the same with the anchor file deleted too: log_unanchored, and no checkpoint is signed', async () => {
    const { t, run, log, lines } = await signedHome();
    cut(log, lines, 2);
    rmSync(`${log}.checkpoints`);
    rmSync(join(t.home, 'audit.anchor'));
    const next = await run(['tools', 'call', 'echo', '{}']);
    expect(next.code).not.toBe(0);
    expect(next.stderr).toContain('no checkpoint signed by this key covers them');
    expect(() => readFileSync(`${log}.checkpoints`)).toThrow();
  });

  it('the log and its checkpoints deleted together are caught at the next start by the anchor kept outside', async () => {
    const { t, run, log } = await signedHome();
    rmSync(join(t.home, 'audit'), { recursive: true });
    const next = await run(['tools', 'call', 'echo', '{}']);
    expect(next.code).not.toBe(0);
    expect(next.stderr).toMatch(/checkpoint/);
    const v = await run(['audit', 'verify']);
    expect(v.code).toBe(1);
    void log;
  });

  it('replaying an older signed checkpoint file over a cut log is caught by the anchor', async () => {
    const { run, log, lines } = await signedHome();
    const cps = readFileSync(`${log}.checkpoints`, 'utf8').split('\n').filter(Boolean);
    expect(cps.length).toBeGreaterThan(1);
    const first = JSON.parse(cps[0] as string) as { entries: number };
    cut(log, lines, first.entries);
    writeFileSync(`${log}.checkpoints`, `${cps[0]}\n`);
    const next = await run(['tools', 'call', 'echo', '{}']);
    expect(next.code).not.toBe(0);
    expect(next.stderr).toMatch(/shorter than its checkpoint|does not hold the checkpointed entry/);
    expect((await run(['audit', 'verify'])).code).toBe(1);
  });

  it('forge audit anchor is the explicit way on: it records what is missing and the reason, and calls work again', async () => {
    const { run, pub, log, lines } = await signedHome();
    cut(log, lines, 2);
    rmSync(`${log}.checkpoints`);
    expect((await run(['audit', 'anchor'])).stderr).toContain('--reason');
    const a = await run(['audit', 'anchor', '--reason', 'restored from backup of Monday; later entries lost', '--json']);
    expect(a.code, a.stderr).toBe(0);
    const r = JSON.parse(a.stdout) as { missing_entries: number; held: boolean; log: { entries: number } };
    expect(r.log.entries).toBe(2);
    expect(r.held).toBe(false);
    expect(r.missing_entries).toBeGreaterThan(0);
    expect((await run(['tools', 'call', 'echo', '{}'])).code).toBe(0);
    const v = await run(['audit', 'verify', '--key-pub', pub]);
    expect(v.code, v.stdout + v.stderr).toBe(0);
    const entries = readFileSync(log, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { type: string; data: Record<string, unknown> });
    const re = entries.find((e) => e.type === 'audit.reanchored');
    expect(re?.data).toMatchObject({ reason: 'restored from backup of Monday; later entries lost', held: false });
  });
});
