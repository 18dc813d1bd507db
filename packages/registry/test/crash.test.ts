import { spawn } from 'node:child_process';
import { scaled } from '@forge/test-utils';
import { describe, expect, it, onTestFinished } from 'vitest';
import { digestSpec, fileToolStore, type ReadResult, type StoredTool, type ToolStore } from '../src/index.js';
import { BY, requireBuilt, spec, tempDir } from './helpers.js';

const CHILD = new URL('./fixtures/crash-child.mjs', import.meta.url).pathname;
type Op = 'create' | 'replace' | 'remove';

function stored(name: string, description: string): StoredTool {
  const s = spec({ name, description });
  return {
    ...s,
    version: 0,
    digest: digestSpec(s),
    created_at: '2030-01-01T00:00:00.000Z',
    created_by: BY,
    scope: 'project',
    state: 'active',
  };
}

/** Runs the crash child; resolves with how it ended and, when it finished, how many steps it took. */
function crashChild(args: { root: string; op: Op; name: string; tool: StoredTool; killAt: number }) {
  const child = spawn(process.execPath, [CHILD, JSON.stringify(args)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => (out += s));
  child.stderr.setEncoding('utf8').on('data', (s: string) => (err += s));
  onTestFinished(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return new Promise<{ signal: NodeJS.Signals | null; steps?: number; err: string }>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code !== 0 && signal === null) reject(new Error(`crash child exited with ${code}: ${err}`));
      else resolve({ signal, steps: out.trim() ? (JSON.parse(out) as { steps: number }).steps : undefined, err });
    });
  });
}

function okTool(r: ReadResult): StoredTool {
  if (r.status !== 'ok') throw new Error(`expected a tool, got ${JSON.stringify(r)}`);
  return r.tool;
}

/** Sets up `name` as `op` expects it: absent for a create, version 1 ("old") otherwise. */
async function prepare(store: ToolStore, op: Op, name: string): Promise<void> {
  if (op === 'create') return;
  await store.put(name, (_c, next) => ({ write: { ...stored(name, 'old'), version: next }, value: undefined }));
}

describe('file store: kill -9 before each file-system step of a write', () => {
  for (const op of ['create', 'replace', 'remove'] as const) {
    it(`${op}: after a kill at any step the name holds the old tool or the new one, nothing acknowledged is lost, and it is writable again`, {
      timeout: scaled(120_000),
    }, async () => {
      requireBuilt();
      const root = await tempDir('forge-crash-');
      const store = fileToolStore('project', root);
      // How many steps the write takes when nothing kills it.
      await prepare(store, op, 'probe');
      const probe = await crashChild({ root, op, name: 'probe', tool: stored('probe', 'new'), killAt: 0 });
      const total = probe.steps ?? 0;
      expect(total).toBeGreaterThan(3);
      const names = Array.from({ length: total }, (_, i) => `crash.at${i + 1}`);
      for (const n of names) await prepare(store, op, n);
      const ends = await Promise.all(names.map((n, i) => crashChild({ root, op, name: n, tool: stored(n, 'new'), killAt: i + 1 })));
      for (const e of ends) expect(e.signal, e.err).toBe('SIGKILL');

      const failures: unknown[] = [];
      const live = new Map<string, StoredTool>();
      await store.loadAll(
        (t) => live.set(t.name, t),
        (f) => failures.push(f),
      );
      expect(failures).toEqual([]);
      const outcomes: string[] = [];
      for (const n of names) {
        const now = await store.read(n);
        const kept = (await store.versions(n)).filter((v) => !v.current);
        for (const v of kept) expect(v.tool, v.reason).toBeDefined();
        if (now.status === 'missing') {
          // A create that never published, or a remove that did: the removed tool is in the history.
          expect(op).not.toBe('replace');
          if (op === 'remove') expect(kept.map((v) => [v.version, v.tool?.description])).toEqual([[1, 'old']]);
          outcomes.push('none');
        } else {
          const t = okTool(now);
          expect(live.get(n)).toEqual(t);
          if (t.description === 'old') expect(t.version).toBe(1);
          else {
            expect(op).not.toBe('remove');
            expect(t).toMatchObject({ description: 'new', version: op === 'create' ? 1 : 2 });
            // A replace that published kept the old version first.
            if (op === 'replace') expect(kept.map((v) => [v.version, v.tool?.description])).toEqual([[1, 'old']]);
          }
          outcomes.push(t.description === 'old' ? 'old' : 'new');
        }
      }
      // Every kill point either left the old state or the new one, and both occur.
      expect(new Set(outcomes).size).toBe(2);
      // The locks the dead writers left are taken over (after the 10 s stale time).
      const again = await Promise.all(
        names.map((n) => store.put(n, (_c, next) => ({ write: { ...stored(n, 'after'), version: next }, value: next }))),
      );
      for (const [i, n] of names.entries()) {
        const used = (await store.versions(n)).filter((v) => !v.current).map((v) => v.version);
        expect(again[i]).toBeGreaterThan(Math.max(0, ...used));
        expect(okTool(await store.read(n)).description).toBe('after');
      }
    });
  }
});
