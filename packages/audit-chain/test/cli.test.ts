/**
 * The `forge-audit` CLI, run as a child process from the built dist (`npx tsup` first): output
 * formats and exit codes (0 ok, 1 verification found a violation, 2 usage or I/O error).
 */
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { scaled } from '@forge/test-utils';
import { beforeAll, describe, expect, it } from 'vitest';
import { GENESIS_HASH, openAuditLog } from '../src/index.js';
import { CLI, tempDir } from './helpers.js';

const execFileP = promisify(execFile);

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the CLI with `args`; never throws for a non-zero exit. CI=true, stdin closed at once. */
async function cli(...args: string[]): Promise<Run> {
  const p = execFileP(process.execPath, [CLI, ...args], { env: { ...process.env, CI: 'true' }, timeout: scaled(60_000) });
  p.child.stdin?.end();
  try {
    const { stdout, stderr } = await p;
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: unknown; stdout?: string; stderr?: string };
    if (typeof e.code !== 'number') throw err;
    return { code: e.code, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

const HEX64 = /^[0-9a-f]{64}$/;

async function logWith(n: number): Promise<{ dir: string; path: string; hashes: string[] }> {
  const dir = await tempDir();
  const path = join(dir, 'audit.log');
  const hashes: string[] = [];
  for (let i = 1; i <= n; i++) {
    const r = await cli('append', path, 'user.login', JSON.stringify({ user: `u${i}`, i }));
    expect(r).toMatchObject({ code: 0, stderr: '' });
    const m = /^seq (\d+) hash ([0-9a-f]{64})\n$/.exec(r.stdout);
    expect(m?.[1]).toBe(String(i));
    hashes.push(m?.[2] as string);
  }
  return { dir, path, hashes };
}

beforeAll(() => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run "npx tsup" in packages/audit-chain first`);
});

describe('append', () => {
  it('prints "seq N hash <64 hex>" for each entry, chained from genesis', async () => {
    const { path, hashes } = await logWith(3);
    const lines = (await readFile(path, 'utf8')).trimEnd().split('\n');
    expect(lines).toHaveLength(3);
    const entries = lines.map((l) => JSON.parse(l) as { seq: number; prev: string; hash: string; data: unknown; type: string });
    expect(entries.map((e) => e.hash)).toEqual(hashes);
    expect(entries.map((e) => e.prev)).toEqual([GENESIS_HASH, hashes[0], hashes[1]]);
    expect(entries[2]).toMatchObject({ seq: 3, type: 'user.login', data: { user: 'u3', i: 3 } });
  });

  it('without data appends null', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const r = await cli('append', path, 'sys.boot');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^seq 1 hash [0-9a-f]{64}\n$/);
    expect(JSON.parse(await readFile(path, 'utf8'))).toMatchObject({ seq: 1, data: null });
  });

  it('with data that is not JSON exits 2 and writes nothing', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const r = await cli('append', path, 'user.login', '{user: bob}');
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^forge-audit: <json-data> is not JSON/);
    expect(existsSync(path)).toBe(false);
  });

  it('with a reserved type exits 2 with the AuditError message', async () => {
    const dir = await tempDir();
    const r = await cli('append', join(dir, 'audit.log'), 'audit.sealed', '{}');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^forge-audit: event type "audit\.sealed" is reserved/);
  });
});

describe('verify', () => {
  it('exits 0 on an intact log', async () => {
    const { path, hashes } = await logWith(3);
    const r = await cli('verify', path);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    // The summary line's wording is not a contract; its facts are.
    expect(r.stdout).toMatch(/^ok: 3 entries in 1 segment\S*, head [0-9a-f]{12}…; no checkpoint yet\n$/);
    expect(r.stdout).toContain(`head ${hashes[2]?.slice(0, 12)}…`);
  });

  it('exits 1 on a tampered log, with the human failure line', async () => {
    const { path, hashes } = await logWith(4);
    const text = await readFile(path, 'utf8');
    await writeFile(path, text.replace('"user":"u3"', '"user":"u9"'));
    const line3 = (await readFile(path, 'utf8')).split('\n')[2] as string;
    const computed = createHash('sha256').update(line3.slice(0, -75)).digest('hex');
    const r = await cli('verify', path);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('');
    const out = r.stdout.split('\n');
    expect(out[0]).toMatch(/^entry 3 \(line 3\): hash mismatch — stored [0-9a-f]{4}…, computed [0-9a-f]{4}…$/);
    expect(out[0]).toBe(`entry 3 (line 3): hash mismatch — stored ${hashes[2]?.slice(0, 4)}…, computed ${computed.slice(0, 4)}…`);
    expect(out[1]).toBe('verified 2 entries before it; reason: hash_mismatch');
  });

  it('names the file when the bad line is in a sealed segment', async () => {
    const { path } = await logWith(2);
    expect((await cli('rotate', path)).code).toBe(0);
    const seg = `${path}.000001`;
    const lines = (await readFile(seg, 'utf8')).split('\n');
    await writeFile(seg, [lines[0], lines[2], lines[1], ...lines.slice(3)].join('\n'));
    const r = await cli('verify', path);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^entry 2 \(audit\.log\.000001 line 2\): sequence gap — expected entry 2, found 3/);
    expect(r.stdout).toMatch(/reason: seq_gap\n$/);
  });

  it('--json prints ok, entries and head (and the checkpoint summary) on success', async () => {
    const { path, hashes } = await logWith(2);
    const r = await cli('verify', path, '--json');
    expect(r.code).toBe(0);
    expect(r.stdout.endsWith('\n')).toBe(true);
    expect(r.stdout.trimEnd().split('\n')).toHaveLength(1);
    const v = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(v).toMatchObject({ ok: true, entries: 2, head: hashes[1] });
    expect(Object.keys(v)).toEqual(['ok', 'entries', 'head', 'checkpoint', 'uncheckpointed']);
    expect(v).toMatchObject({ checkpoint: null, uncheckpointed: 2 });
    expect(v.first_bad).toBeUndefined();
  });

  it('--json prints ok, entries, head and first_bad (seq, line, reason) on failure', async () => {
    const { path, hashes } = await logWith(4);
    const lines = (await readFile(path, 'utf8')).split('\n');
    await writeFile(path, lines.toSpliced(1, 1).join('\n')); // delete entry 2
    const r = await cli('verify', path, '--json');
    expect(r.code).toBe(1);
    const v = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(Object.keys(v)).toEqual(['ok', 'entries', 'head', 'first_bad']);
    expect(v).toMatchObject({ ok: false, entries: 1, head: hashes[0] });
    expect(v.first_bad).toMatchObject({ seq: 2, line: 2, reason: 'seq_gap', file: 'audit.log' });
    expect(Object.keys(v.first_bad as object).sort()).toEqual(['file', 'line', 'message', 'reason', 'seq']);
  });

  it('exits 2 for a missing directory, naming it on stderr', async () => {
    const dir = await tempDir();
    const path = join(dir, 'no-such-dir', 'audit.log');
    const r = await cli('verify', path);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(path);
    expect(r.stderr).toContain(join(dir, 'no-such-dir'));
  });

  it('exits 2 for a --key-pub file that does not exist, naming it on stderr', async () => {
    const { dir, path } = await logWith(1);
    const pub = join(dir, 'missing.pub');
    const r = await cli('verify', path, '--key-pub', pub);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(pub);
  });

  it('exits 2 for a --key-pub file that is not a public key, naming it on stderr', async () => {
    const { dir, path } = await logWith(1);
    const pub = join(dir, 'garbage.pub');
    await writeFile(pub, 'not a key\n');
    const r = await cli('verify', path, '--key-pub', pub);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(pub);
  });
});

describe('tail', () => {
  it('-n 2 prints the last two entries, one per line', async () => {
    const { path } = await logWith(5);
    const r = await cli('tail', path, '-n', '2');
    expect(r).toMatchObject({ code: 0, stderr: '' });
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines).toHaveLength(2);
    const ts = '\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{3}Z';
    expect(lines[0]).toMatch(new RegExp(`^#4 ${ts} user\\.login \\{"i":4,"user":"u4"\\}$`));
    expect(lines[1]).toMatch(new RegExp(`^#5 ${ts} user\\.login \\{"i":5,"user":"u5"\\}$`));
  });

  it('--json prints one JSON entry per line', async () => {
    const { path, hashes } = await logWith(3);
    const r = await cli('tail', path, '--json');
    expect(r.code).toBe(0);
    const entries = r.stdout
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(entries.map((e) => e.seq)).toEqual([1, 2, 3]);
    expect(entries.map((e) => e.hash)).toEqual(hashes);
    for (const e of entries) {
      expect(Object.keys(e).sort()).toEqual(['data', 'hash', 'prev', 'seq', 'ts', 'type']);
      expect(e.hash).toMatch(HEX64);
    }
    expect(entries[1]).toMatchObject({ type: 'user.login', data: { user: 'u2', i: 2 }, prev: hashes[0] });
  });

  it('-n that is not a number exits 2', async () => {
    const { path } = await logWith(1);
    const r = await cli('tail', path, '-n', 'many');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('-n must be a non-negative integer');
  });
});

describe('checkpoint and keys', () => {
  it('keygen writes a pair; checkpoint --key signs; verify --key-pub accepts it', async () => {
    const { dir, path } = await logWith(3);
    const prefix = join(dir, 'signer');
    const k = await cli('keygen', prefix);
    expect(k.code).toBe(0);
    expect(await readFile(`${prefix}.key`, 'utf8')).toMatch(/^-----BEGIN PRIVATE KEY-----\n/);
    expect(await readFile(`${prefix}.pub`, 'utf8')).toMatch(/^-----BEGIN PUBLIC KEY-----\n/);

    // Three entries nothing signed: the first signing is an explicit, recorded anchor, never a plain checkpoint.
    const refused = await cli('checkpoint', path, '--key', `${prefix}.key`);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('holds 3 entries but no checkpoint signed by this key covers them');
    expect((await cli('anchor', path, '--key', `${prefix}.key`)).stderr).toContain('anchor needs --reason');
    const a = await cli('anchor', path, '--key', `${prefix}.key`, '--reason', 'first signing; entries 1-3 checked by hand');
    expect(a.code, a.stderr).toBe(0);
    expect(a.stdout).toMatch(
      /^anchored: 3 entries \(no checkpoint of this key covered it\); recorded audit\.reanchored and signed a checkpoint at entry 4 \([0-9a-f]{16}\)\n$/,
    );

    const c = await cli('checkpoint', path, '--key', `${prefix}.key`);
    expect(c.code).toBe(0);
    const m = /^checkpoint: 4 entries, head [0-9a-f]{12}…, signed by ([0-9a-f]{16})\n$/.exec(c.stdout);
    expect(m).not.toBeNull();
    const cpLines = (await readFile(`${path}.checkpoints`, 'utf8')).trim().split('\n');
    const cpLine = JSON.parse(cpLines[cpLines.length - 1] as string) as Record<string, unknown>;
    expect(cpLine).toMatchObject({ entries: 4, key_id: m?.[1] });
    expect(cpLine.sig).toMatch(/^[A-Za-z0-9+/]{86}==$/);

    const v = await cli('verify', path, '--key-pub', `${prefix}.pub`);
    expect(v.code).toBe(0);
    expect(v.stdout).toMatch(
      new RegExp(`^ok: 4 entries in 1 segment\\S*, head [0-9a-f]{12}…; checkpoint at entry 4 \\(signed by ${m?.[1]}\\), 0 entries`),
    );
    const j = JSON.parse((await cli('verify', path, '--key-pub', `${prefix}.pub`, '--json')).stdout) as Record<string, unknown>;
    expect(j.checkpoint).toMatchObject({ entries: 4, signed: true, key_id: m?.[1] });
    const reanchored = JSON.parse((await cli('tail', path, '-n', '1', '--json')).stdout) as Record<string, unknown>;
    expect(reanchored).toMatchObject({
      type: 'audit.reanchored',
      data: { reason: 'first signing; entries 1-3 checked by hand', log: { entries: 3 } },
    });
  });

  it('verify --key-pub with only an unsigned checkpoint exits 1 (no checkpoint signed by this key)', async () => {
    const { dir, path } = await logWith(2);
    expect((await cli('checkpoint', path)).stdout).toMatch(/^checkpoint: 2 entries, head [0-9a-f]{12}…, unsigned\n$/);
    const prefix = join(dir, 'k');
    expect((await cli('keygen', prefix)).code).toBe(0);
    const r = await cli('verify', path, '--key-pub', `${prefix}.pub`, '--json');
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({
      ok: false,
      entries: 0,
      head: GENESIS_HASH,
      first_bad: { seq: 0, line: 0, reason: 'signature_invalid' },
    });
  });

  it('keygen refuses to overwrite an existing key', async () => {
    const dir = await tempDir();
    const prefix = join(dir, 'signer');
    expect((await cli('keygen', prefix)).code).toBe(0);
    const before = await readFile(`${prefix}.key`, 'utf8');
    const beforePub = await readFile(`${prefix}.pub`, 'utf8');
    const r = await cli('keygen', prefix);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('refusing to overwrite an existing key');
    expect(r.stderr).toContain(`${prefix}.key`);
    expect(await readFile(`${prefix}.key`, 'utf8')).toBe(before);
    expect(await readFile(`${prefix}.pub`, 'utf8')).toBe(beforePub);
  });

  it('keygen writes nothing when only the public half exists (no mismatched pair)', async () => {
    const dir = await tempDir();
    const prefix = join(dir, 'signer');
    await writeFile(`${prefix}.pub`, "someone else's key\n");
    const r = await cli('keygen', prefix);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`${prefix}.pub already exists: refusing to overwrite an existing key`);
    expect(existsSync(`${prefix}.key`)).toBe(false);
  });
});

describe('usage', () => {
  it('an unknown command exits 2 with the usage on stderr', async () => {
    const r = await cli('frobnicate', '/tmp/x.log');
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('forge-audit: unknown command "frobnicate"');
    expect(r.stderr).toContain('usage: forge-audit <command>');
  });

  it('an unknown option exits 2 with the usage on stderr', async () => {
    const r = await cli('verify', '/tmp/x.log', '--frob');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('usage: forge-audit <command>');
  });

  it('a missing argument exits 2', async () => {
    const r = await cli('append');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('missing <log> <type>');
  });

  it('no command prints the usage and exits 2; --help exits 0', async () => {
    const none = await cli();
    expect(none.code).toBe(2);
    expect(none.stdout).toContain('usage: forge-audit <command>');
    const help = await cli('--help');
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('Exit codes: 0 ok, 1 verification found a violation, 2 usage or I/O error.');
  });
});

describe('a reader that closes early', () => {
  /** A log of `n` entries of about 1 KiB each: more than a pipe holds, so printing it all must block on the reader. */
  async function bigLog(n: number): Promise<string> {
    const path = join(await tempDir(), 'audit.log');
    const log = await openAuditLog(path);
    try {
      for (let i = 1; i <= n; i++) await log.append('user.login', { i, pad: 'x'.repeat(1000) });
    } finally {
      await log.close();
    }
    return path;
  }

  it('`forge-audit tail | head -1` prints one line and exits 0 without a stack trace', async () => {
    const path = await bigLog(300);
    // A real shell pipe into a real head; PIPESTATUS carries the CLI's own exit code out.
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a bash script, not a template
    const script = '"$0" "$1" tail -n 300 "$2" 2>"$3" | head -1; echo "rc=${PIPESTATUS[0]}"';
    const errFile = join(await tempDir(), 'stderr');
    const { stdout } = await execFileP('bash', ['-c', script, process.execPath, CLI, path, errFile], { timeout: scaled(60_000) });
    const [first, rc, ...rest] = stdout.split('\n');
    expect(first).toMatch(/^#1 \S+ user\.login \{"i":1,/);
    expect(rc).toBe('rc=0');
    expect(rest).toEqual(['']);
    expect(await readFile(errFile, 'utf8')).toBe('');
  });

  it('`tail -f` stops, exit 0 and nothing on stderr, when the test closes the pipe it prints into', async () => {
    const path = await bigLog(300);
    const child = spawn(process.execPath, [CLI, 'tail', '-n', '300', '-f', path], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const first = await new Promise<string>((resolve) => child.stdout.once('data', (d: Buffer) => resolve(d.toString())));
    expect(first).toMatch(/^#1 /);
    child.stdout.destroy();
    // One more entry, so a follower that has printed everything so far writes again.
    const log = await openAuditLog(path);
    await log.append('user.logout', null);
    await log.close();
    const code = await Promise.race([exited, new Promise<'still running'>((r) => setTimeout(() => r('still running'), scaled(20_000)))]);
    if (code === 'still running') child.kill('SIGKILL');
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
  });
});
