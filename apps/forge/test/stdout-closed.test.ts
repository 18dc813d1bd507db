/**
 * A reader that stops early (`forge audit tail | head -1`): the CLI prints what it can, stops, and
 * exits 0 without the EPIPE stack trace Node prints for an unhandled stream error.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { openAuditLog } from '@forge/audit-chain';
import { scaled } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { CLI, type Scratch, scratch } from './helpers.js';

const execFileP = promisify(execFile);

/** The forge audit log in `s.home` with `n` entries of about 1 KiB: more than a pipe holds. */
async function bigLog(s: Scratch, n: number): Promise<string> {
  mkdirSync(join(s.home, 'audit'), { recursive: true });
  const path = join(s.home, 'audit', 'forge.log');
  const log = await openAuditLog(path);
  try {
    for (let i = 1; i <= n; i++) await log.append('forge.called', { i, pad: 'x'.repeat(1000) });
  } finally {
    await log.close();
  }
  return path;
}

describe('stdout closed by its reader', () => {
  it.each([[[]], [['--json']]])('`forge audit tail %j | head -1` prints one line and exits 0 without a stack trace', async (extra) => {
    const s = scratch();
    await bigLog(s, 300);
    const errFile = join(s.root, 'stderr');
    // A real shell pipe into a real head; PIPESTATUS carries forge's own exit code out.
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a bash script, not a template
    const script = 'cli="$1"; shift; "$0" "$cli" audit tail -n 300 "$@" 2>"$ERR" | head -1; echo "rc=${PIPESTATUS[0]}"';
    const { stdout } = await execFileP('bash', ['-c', script, process.execPath, CLI, ...extra], {
      cwd: s.project,
      env: { ...s.env, ERR: errFile },
      timeout: scaled(60_000),
    });
    const [first, rc, ...rest] = stdout.split('\n');
    // With --json, one document: the array of the 300 entries, on one line.
    expect(first).toMatch(extra.length ? /^\[\{"seq":1,.*"seq":300,.*\}\]$/ : /^ {4}1 \S+ forge\.called \{"i":1,/);
    expect(rc).toBe('rc=0');
    expect(rest).toEqual(['']);
    expect(readFileSync(errFile, 'utf8')).toBe('');
  });

  it('`forge audit tail -f` stops and exits 0, nothing on stderr, when the test closes the pipe it prints into', async () => {
    const s = scratch();
    const path = await bigLog(s, 300);
    const child = spawn(process.execPath, [CLI, 'audit', 'tail', '-n', '300', '-f'], {
      cwd: s.project,
      env: s.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const first = await new Promise<string>((resolve) => child.stdout.once('data', (d: Buffer) => resolve(d.toString())));
    expect(first).toMatch(/^ {4}1 /);
    child.stdout.destroy();
    // One more entry, so a follower that has printed everything so far writes again.
    const log = await openAuditLog(path);
    await log.append('forge.called', null);
    await log.close();
    const code = await Promise.race([exited, new Promise<'still running'>((r) => setTimeout(() => r('still running'), scaled(20_000)))]);
    if (code === 'still running') child.kill('SIGKILL');
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
  });
});
