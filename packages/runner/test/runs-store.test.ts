import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type CacheStore, fileCacheStore } from '../src/cacheStore.js';
import { fileRunStore, type RunStore } from '../src/runStore.js';
import { okData, py, setup } from './helpers.js';

/** Deterministic, writes one artifact. */
const plot = () =>
  py('plot', 'open("/forge/artifacts/out.txt", "w").write("n=%d" % args["n"])\nprint(json.dumps({"ok": True, "data": {"n": args["n"]}}))', {
    input_schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] },
    meta: { deterministic: true },
  });

/** A run store that logs each call, over the real file store of `runsDir()` (known once the fixture exists). */
function loggedRunStore(runsDir: () => string): { store: RunStore; log: string[] } {
  const log: string[] = [];
  let inner: RunStore | undefined;
  const file = () => {
    inner ??= fileRunStore(runsDir());
    return inner;
  };
  const logged =
    <A extends unknown[], R>(name: string, fn: (...a: A) => R, what: (...a: A) => string) =>
    (...a: A): R => {
      log.push(`${name} ${what(...a)}`);
      return fn(...a);
    };
  const store: RunStore = {
    kind: 'logged',
    where: 'test',
    writeManifest: logged(
      'writeManifest',
      (id: string, m: Record<string, unknown>, o?: { runDir?: string }) => file().writeManifest(id, m, o),
      (id) => id,
    ),
    appendHit: logged(
      'appendHit',
      (r: Record<string, unknown> & { run_id: string }) => file().appendHit(r),
      (r) => r.run_id,
    ),
    readManifest: logged(
      'readManifest',
      (id: string) => file().readManifest(id),
      (id) => id,
    ),
    listArtifacts: logged(
      'listArtifacts',
      (id: string, max?: number) => file().listArtifacts(id, max),
      (id) => id,
    ),
    readArtifact: logged(
      'readArtifact',
      (id: string, p: string, max: number) => file().readArtifact(id, p, max),
      (id, p) => `${id} ${p}`,
    ),
  };
  return { store, log };
}

describe('the stores createForge is given', () => {
  it('runStore: every manifest and hit record is written through it, and readRun/readArtifact read through it', async () => {
    let runsDir = '';
    const { store, log } = loggedRunStore(() => runsDir);
    const fx = await setup({ forge: { runStore: store } });
    runsDir = fx.forge.paths.runsDir;
    expect((await fx.forge.forgeTool(plot())).ok).toBe(true);
    const first = await fx.forge.callTool('plot', { n: 3 });
    const hit = await fx.forge.callTool('plot', { n: 3 });
    expect(hit.meta.cache).toBe('hit');
    const seed = first.meta.run_id as string;
    const hitId = hit.meta.run_id as string;
    expect(log).toEqual([`writeManifest ${seed}`, `appendHit ${hitId}`]);
    const run = await fx.forge.readRun(hitId);
    expect(run).toMatchObject({
      ok: true,
      kind: 'hit',
      manifest: { seed_run: seed },
      artifacts: [{ path: 'out.txt', bytes: 3, kind: 'file' }],
    });
    const bytes = await fx.forge.readArtifact(hitId, 'out.txt');
    expect(bytes).toMatchObject({ ok: true, bytes: Buffer.from('n=3') });
    expect(log.slice(2)).toEqual([
      `readManifest ${hitId}`,
      `listArtifacts ${seed}`,
      `readManifest ${hitId}`,
      `readArtifact ${seed} out.txt`,
    ]);
  });

  it('cacheStore: two forges (two projects) sharing one store and one audit log: B answers from A’s run', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'forge-runner-test-cache-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const shared = fileCacheStore(dir);
    const a = await setup({ forge: { cacheStore: shared } });
    // One home, so one audit log: as front-ends sharing a database share its log.
    const b = await setup({ home: a.home, forge: { cacheStore: shared } });
    for (const fx of [a, b]) expect((await fx.forge.forgeTool(plot())).ok).toBe(true);
    const ran = await a.forge.callTool('plot', { n: 5 });
    expect(ran.meta.cache).toBe('miss');
    const answered = await b.forge.callTool('plot', { n: 5 });
    expect(answered).toMatchObject({ ok: true, data: { n: 5 }, meta: { cache: 'hit', seed_run: ran.meta.run_id } });
    expect(b.sandboxRuns('plot')).toHaveLength(0);
    expect((await shared.stats()).entries).toBe(1);
  });

  it('cacheStore: two homes sharing a store but not a log: B’s log does not show A’s run, so B runs the call and says why', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'forge-runner-test-cache-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const shared = fileCacheStore(dir);
    const a = await setup({ forge: { cacheStore: shared } });
    const b = await setup({ forge: { cacheStore: shared } });
    for (const fx of [a, b]) expect((await fx.forge.forgeTool(plot())).ok).toBe(true);
    const ran = await a.forge.callTool('plot', { n: 5 });
    const answered = await b.forge.callTool('plot', { n: 5 });
    expect(answered).toMatchObject({ ok: true, data: { n: 5 }, meta: { cache: 'miss' } });
    expect(b.sandboxRuns('plot')).toHaveLength(1);
    expect(b.entries('forge.cache_mismatch').map((e) => [e.data.reason, e.data.seed_run])).toEqual([['not_recorded', ran.meta.run_id]]);
    // B's answer replaced A's: B's own next call is a hit.
    expect((await b.forge.callTool('plot', { n: 5 })).meta).toMatchObject({ cache: 'hit', seed_run: answered.meta.run_id });
  });

  it('a cache store that fails is a miss and a warning: every call is still answered, and run', async () => {
    const broken: CacheStore = {
      kind: 'broken',
      where: 'nowhere',
      get: async () => {
        throw new Error('the store is down');
      },
      set: async () => {
        throw new Error('the store is down');
      },
      delete: async () => {},
      stats: async () => ({ entries: 0, bytes: 0 }),
    };
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on('warning', onWarning);
    onTestFinished(() => void process.off('warning', onWarning));
    const fx = await setup({ forge: { cacheStore: broken } });
    expect((await fx.forge.forgeTool(plot())).ok).toBe(true);
    for (let i = 0; i < 2; i++) {
      const r = await fx.forge.callTool('plot', { n: 1 });
      expect(okData(r)).toEqual({ n: 1 });
      expect(r.meta.cache).toBe('miss');
    }
    expect(fx.sandboxRuns('plot')).toHaveLength(2);
    await new Promise((r) => setImmediate(r));
    expect(warnings).toContain('forge: the broken result cache at nowhere could not be read (a miss): the store is down');
    expect(warnings).toContain('forge: the broken result cache at nowhere did not store a result: the store is down');
  });
});
