import { mkdirSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { wireLockKey } from '@forge/registry';
import { killedAfter } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { example, setup } from './helpers.js';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * Holds forge's lock at `path` in a child process, with the next acquisition staged beside it
 * (`<path>.<token>.tmp`), then kills the child: what a writer killed mid-write leaves.
 */
async function killedHolder(path: string): Promise<void> {
  const code = `
    import { readdirSync, readFileSync } from 'node:fs';
    import { basename, dirname, join } from 'node:path';
    import { DirLock } from '@forge/audit-chain';
    const path = ${JSON.stringify(path)};
    await new DirLock(path).acquire();
    new DirLock(path).prepare();
    // Staged once its owner record is whole (a directory without one is swept only once stale).
    const whole = (d) => { try { return JSON.parse(readFileSync(join(d, 'owner'), 'utf8')).pid === process.pid; } catch { return false; } };
    const staged = () => readdirSync(dirname(path)).some((n) => n.startsWith(basename(path) + '.') && n.endsWith('.tmp') && whole(join(dirname(path), n)));
    while (!staged()) await new Promise((r) => setImmediate(r));
    console.log('held');
    setInterval(() => {}, 1000);`;
  await killedAfter(code, 'held', pkg);
}

describe("the registry's cross-process lock", () => {
  it("is forge's owner-aware lock: a writer killed holding a name's lock is taken over, and what it left beside the lock is swept", async () => {
    const fx = await setup();
    const locks = join(fx.forge.paths.project, '.forge', 'tools', '.locks');
    mkdirSync(locks, { recursive: true, mode: 0o700 });
    const lock = join(locks, `${wireLockKey('fib')}.lock`);
    await killedHolder(lock);
    expect(readdirSync(locks).sort()).toEqual([expect.stringMatching(/\.lock$/), expect.stringMatching(/\.lock\.[0-9a-f]{24}\.tmp$/)]);

    const made = await fx.forge.forgeTool(await example('fib'));
    expect(made.ok, JSON.stringify(made)).toBe(true);
    // The dead holder's lock and its staged directory are gone (an mtime-only lock knows neither).
    expect(readdirSync(locks)).toEqual([]);
  });
});
