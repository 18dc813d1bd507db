/**
 * What the host probe's trial sandbox found, kept across processes (probe-cache.ts): a kept
 * answer spares the next process the trial, and only while nothing it depends on has changed; a
 * forged, foreign or loosened file is never trusted, and a failing host is never kept.
 */
import { chmodSync, existsSync, readFileSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { probe } from '../src/index.js';
import { requireSandbox, tempDir } from './helpers.js';

beforeAll(async () => {
  await requireSandbox();
});

/**
 * The host's bwrap behind a script that counts its starts (a line each in `log`). Reachable by
 * the sandbox's uid, which runs it behind setpriv when the tests run as root.
 */
async function countedBwrap(): Promise<{ path: string; starts: () => number; dir: string }> {
  const dir = await tempDir();
  chmodSync(dir, 0o755);
  const log = join(dir, 'starts');
  writeFileSync(log, '');
  chmodSync(log, 0o666);
  const real = (await probe()).bwrap?.path as string;
  const path = join(dir, 'bwrap');
  writeFileSync(path, `#!/bin/sh\necho "$1" >> ${JSON.stringify(log)}\nexec ${JSON.stringify(real)} "$@"\n`);
  chmodSync(path, 0o755);
  return { path, dir, starts: () => readFileSync(log, 'utf8').split('\n').filter(Boolean).length };
}

describe('the probe, kept across processes', () => {
  it('runs no trial while nothing it depends on has changed, and again once bwrap has', async () => {
    const bwrap = await countedBwrap();
    const cacheFile = join(await tempDir(), 'cache', 'sandbox-probe.json');
    const first = await probe({ bwrapPath: bwrap.path, cacheFile, refresh: true });
    expect(first.ok, JSON.stringify(first.problems)).toBe(true);
    expect(bwrap.starts(), '--version and the trial').toBe(2);
    const st = statSync(cacheFile);
    expect(st.mode & 0o777).toBe(0o600);
    expect(st.uid).toBe(process.getuid?.());
    // As a next process would: nothing started, the same answer.
    const next = await probe({ bwrapPath: bwrap.path, cacheFile, refresh: true });
    expect(bwrap.starts()).toBe(2);
    expect({ ...next, problems: next.problems }).toEqual(first);
    // bwrap changed (its time): probed again.
    utimesSync(bwrap.path, new Date(), new Date(Date.now() - 60_000));
    expect((await probe({ bwrapPath: bwrap.path, cacheFile, refresh: true })).ok).toBe(true);
    expect(bwrap.starts()).toBe(4);
  });

  it('trusts no file that is forged, loosened, not a file, or not its own', async () => {
    const bwrap = await countedBwrap();
    const dir = await tempDir();
    const cacheFile = join(dir, 'sandbox-probe.json');
    await probe({ bwrapPath: bwrap.path, cacheFile, refresh: true });
    const kept = readFileSync(cacheFile, 'utf8');
    let starts = bwrap.starts();
    const probedAgain = async (why: string) => {
      const host = await probe({ bwrapPath: bwrap.path, cacheFile, refresh: true });
      expect(host.ok).toBe(true);
      expect(bwrap.starts(), why).toBe(starts + 2);
      starts = bwrap.starts();
    };
    // Readable by others.
    chmodSync(cacheFile, 0o644);
    await probedAgain('a kept answer others may read is not trusted');
    expect(statSync(cacheFile).mode & 0o777, 'and is replaced by one of its own').toBe(0o600);
    // Another key (forged: claims a host that never ran the trial).
    writeFileSync(cacheFile, JSON.stringify({ ...JSON.parse(kept), key: 'f'.repeat(64) }), { mode: 0o600 });
    await probedAgain('a kept answer under another key is not trusted');
    // Not an answer at all.
    writeFileSync(cacheFile, '{"key": ', { mode: 0o600 });
    await probedAgain('a damaged file is not trusted');
    // A symbolic link to an answer that would match.
    writeFileSync(join(dir, 'elsewhere.json'), kept, { mode: 0o600 });
    const linked = join(dir, 'linked.json');
    symlinkSync(join(dir, 'elsewhere.json'), linked);
    const viaLink = await probe({ bwrapPath: bwrap.path, cacheFile: linked, refresh: true });
    expect(viaLink.ok).toBe(true);
    expect(bwrap.starts(), 'a symbolic link is not followed').toBe(starts + 2);
  });

  it('keeps nothing for a host whose trial fails', async () => {
    const dir = await tempDir();
    chmodSync(dir, 0o755);
    const bwrap = join(dir, 'bwrap');
    writeFileSync(
      bwrap,
      '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "bubblewrap 0.8.0"; exit 0; fi\necho "bwrap: Creating new namespace failed: Operation not permitted" >&2\nexit 1\n',
    );
    chmodSync(bwrap, 0o755);
    const cacheFile = join(await tempDir(), 'sandbox-probe.json');
    const host = await probe({ bwrapPath: bwrap, cacheFile, refresh: true });
    expect(host.ok).toBe(false);
    expect(host.problems[0]?.code).toBe('userns_blocked');
    expect(existsSync(cacheFile)).toBe(false);
  });
});
