import { spawn } from 'node:child_process';
import { hostname } from 'node:os';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { StoreChildOpen } from './children.js';

/** The store under test (structurally `PresenceStore` of @forge/queue; see its contract there). */
export interface PresenceStoreUnderTest {
  beat(m: {
    name: string;
    kind: 'front-end' | 'worker';
    host: string;
    pid: number;
    startedAt: number;
    facts?: Record<string, string | number | boolean>;
  }): Promise<void>;
  leave(name: string): Promise<void>;
  list(o?: { staleMs?: number }): Promise<
    {
      name: string;
      kind: string;
      host: string;
      pid: number;
      startedAt: number;
      beatAt: number;
      facts?: Record<string, unknown>;
      alive: boolean;
    }[]
  >;
}

/** One test's storage, fresh and empty, as an implementation gives it to {@link describePresenceStore}. */
export interface PresenceHarness {
  open(): Promise<PresenceStoreUnderTest>;
  /** How a child process opens a store over the same storage. */
  child: StoreChildOpen;
  cleanup(): Promise<void>;
}

const CHILD = new URL('./presence-child.mjs', import.meta.url).pathname;

/** Runs the child until it has beaten every name; with `hold`, leaves it running (killed at the end of the test). */
function child(open: StoreChildOpen, names: string[], hold = false): Promise<{ pid: number; kill(): Promise<void> }> {
  const c = spawn(process.execPath, [CHILD, JSON.stringify({ open, names, hold })], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  c.stdout.on('data', (d: Buffer) => (out += d.toString()));
  c.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const gone = new Promise<void>((r) => c.once('exit', () => r()));
  const kill = async () => {
    if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    await gone;
  };
  onTestFinished(kill);
  return new Promise((resolve, reject) => {
    const check = () => {
      if (out.includes('"done":true')) resolve({ pid: c.pid as number, kill });
    };
    c.stdout.on('data', check);
    c.once('exit', (code) => (out.includes('"done":true') ? undefined : reject(new Error(`presence child exited ${code}: ${err}`))));
  });
}

/**
 * The presence store's conformance suite: what `forge status` relies on, for every
 * implementation. A member is alive while its last beat is recent and, on this host, its process
 * runs; a leave removes it; names outside the grammar are refused; many processes beat at once
 * without losing one another.
 */
export function describePresenceStore(label: string, factory: () => Promise<PresenceHarness>): void {
  describe(`PresenceStore conformance: ${label}`, () => {
    const setup = async () => {
      const h = await factory();
      onTestFinished(() => h.cleanup());
      return { h, store: await h.open() };
    };
    const me = (name: string, kind: 'front-end' | 'worker' = 'worker') => ({
      name,
      kind,
      host: hostname(),
      pid: process.pid,
      startedAt: Date.now() - 1000,
    });

    it('a beat lists the member alive with what it said; a second beat refreshes it, never a second record', async () => {
      const { store } = await setup();
      expect(await store.list()).toEqual([]);
      await store.beat({ ...me('fe-1', 'front-end'), facts: { workers: 2, store: 'files' } });
      await store.beat(me('w-1'));
      const first = await store.list();
      expect(first.map((m) => [m.name, m.kind, m.alive])).toEqual([
        ['fe-1', 'front-end', true],
        ['w-1', 'worker', true],
      ]);
      expect(first[0]).toMatchObject({ host: hostname(), pid: process.pid, facts: { workers: 2, store: 'files' } });
      expect(first[0]?.beatAt).toBeGreaterThanOrEqual(first[0]?.startedAt ?? Number.POSITIVE_INFINITY);
      await new Promise((r) => setTimeout(r, 20));
      await store.beat(me('w-1'));
      const second = await store.list();
      expect(second.filter((m) => m.name === 'w-1')).toHaveLength(1);
      expect(second.find((m) => m.name === 'w-1')?.beatAt).toBeGreaterThanOrEqual(first.find((m) => m.name === 'w-1')?.beatAt ?? 0);
    });

    it('a leave removes the member; leaving an unknown name is no error', async () => {
      const { store } = await setup();
      await store.beat(me('w-1'));
      await store.leave('w-1');
      await store.leave('never-there');
      expect(await store.list()).toEqual([]);
    });

    it('silence past staleMs is gone anywhere; a pid of this host that is not running is gone at once; another host is judged by its beat', async () => {
      const { h, store } = await setup();
      await store.beat(me('w-live'));
      await store.beat({ name: 'w-elsewhere', kind: 'worker', host: 'another-host.example', pid: 1, startedAt: Date.now() });
      const dead = await child(h.child, ['w-dead']);
      await dead.kill();
      const listed = await store.list();
      expect(Object.fromEntries(listed.map((m) => [m.name, m.alive]))).toEqual({ 'w-dead': false, 'w-elsewhere': true, 'w-live': true });
      expect((await store.list({ staleMs: 0 })).every((m) => !m.alive)).toBe(true);
    });

    it('8 processes beating 5 names each at once: all 40 listed, each with its own pid, alive while it runs', async () => {
      const { h, store } = await setup();
      const kids = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          child(
            h.child,
            Array.from({ length: 5 }, (_, j) => `w-${i}-${j}`),
            true,
          ),
        ),
      );
      const listed = await store.list();
      expect(listed).toHaveLength(40);
      for (const [i, k] of kids.entries()) {
        const mine = listed.filter((m) => m.name.startsWith(`w-${i}-`));
        expect(mine.map((m) => m.pid)).toEqual(Array(5).fill(k.pid));
        expect(mine.every((m) => m.alive && m.facts?.child === true)).toBe(true);
      }
      // A process killed -9 leaves its records, listed as gone, until another beat or leave.
      await kids[0]?.kill();
      const after = await store.list();
      expect(after.filter((m) => m.name.startsWith('w-0-')).every((m) => !m.alive)).toBe(true);
      expect(after.filter((m) => !m.name.startsWith('w-0-')).every((m) => m.alive)).toBe(true);
    });

    it('names outside the grammar are refused and store nothing', async () => {
      const { store } = await setup();
      for (const name of ['', '../x', 'a/b', '-lead', 'x'.repeat(101), 'sp ace'])
        await expect(store.beat({ ...me('ok'), name })).rejects.toThrow(/is not 1 to 100/);
      expect(await store.list()).toEqual([]);
    });
  });
}
