import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { outputDigest } from '../src/auditData.js';
import type { CacheEntry } from '../src/cacheStore.js';
import { example, type Fixture, failed, fakeClock, okData, py, RECEIPT, setup, writeAtomic } from './helpers.js';

/** Deterministic: appends a line to an rw-bound counter file on every real run, so runs can be counted on the host. */
// Slow enough that 8 callers overlap; each run gets its own run id, so sharing is visible.
const counted = () =>
  py(
    'counted',
    'import time\ntime.sleep(0.3)\nprint(json.dumps({"ok": True, "data": {"k": args["k"], "run": os.environ["FORGE_RUN_ID"]}}))',
    {
      input_schema: { type: 'object', properties: { k: { type: 'integer' } }, required: ['k'] },
      meta: { deterministic: true },
    },
  );

const cacheFiles = (dir: string) => readdirSync(dir).filter((n) => n.endsWith('.json'));

/** The entry files of a cache directory, by the `n` of the fib call each answers. */
function fibEntries(dir: string): Map<number, { file: string; key: string; entry: CacheEntry }> {
  const out = new Map<number, { file: string; key: string; entry: CacheEntry }>();
  for (const name of cacheFiles(dir).filter((n) => /^[0-9a-f]{64}\.json$/.test(n))) {
    const entry = JSON.parse(readFileSync(join(dir, name), 'utf8')) as CacheEntry;
    out.set((entry.envelope as { data: { n: number } }).data.n, { file: join(dir, name), key: name.slice(0, -5), entry });
  }
  return out;
}

/** Warnings this process emits from now until the test ends. */
function warnings(): string[] {
  const seen: string[] = [];
  const on = (w: Error) => seen.push(w.message);
  process.on('warning', on);
  onTestFinished(() => void process.off('warning', on));
  return seen;
}

/** The `forge.called` entry of the run `runId`. */
const calledOf = (fx: Fixture, runId: unknown) => fx.entries('forge.called').find((e) => e.data.run_id === runId)?.data;

describe('deterministic-result cache', () => {
  it('first call misses, the second hits: seed_run, the hit record and the audit entry all point at the seed run', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const first = await fx.forge.callTool('fib', { n: 20 });
    const second = await fx.forge.callTool('fib', { n: 20 });
    expect(first.meta.cache).toBe('miss');
    expect(second).toEqual({
      ok: true,
      data: { n: 20, fib: '6765' },
      meta: {
        run_id: expect.any(String),
        cache: 'hit',
        seed_run: first.meta.run_id,
        sandbox: 'bwrap',
        duration_ms: expect.any(Number),
        audit: RECEIPT,
      },
    });
    expect(second.meta.run_id).not.toBe(first.meta.run_id);
    expect(fx.sandboxRuns('fib')).toHaveLength(1);
    const [miss, hit] = fx.entries('forge.called').map((e) => e.data);
    expect(miss).toMatchObject({ ok: true, cache: 'miss', run_id: first.meta.run_id });
    expect(hit).toMatchObject({ ok: true, cache: 'hit', run_id: second.meta.run_id, seed_run: first.meta.run_id });
    await fx.forge.close();
    expect(fx.manifest(second.meta.run_id as string)).toMatchObject({
      run_id: second.meta.run_id,
      tool: { name: 'fib', version: 1 },
      input: { n: 20 },
      cache: 'hit',
      seed_run: first.meta.run_id,
      shared_flight: false,
      ok: true,
    });
  });

  it('a different input, or a new version of the tool, is a miss', async () => {
    const fx = await setup();
    const fib = await example('fib');
    expect((await fx.forge.forgeTool(fib)).ok).toBe(true);
    await fx.forge.callTool('fib', { n: 5 });
    expect((await fx.forge.callTool('fib', { n: 6 })).meta.cache).toBe('miss');
    expect((await fx.forge.forgeTool({ ...fib, description: 'fib v2' }, { overwrite: true })).ok).toBe(true);
    expect((await fx.forge.callTool('fib', { n: 5 })).meta.cache).toBe('miss');
    expect(fx.sandboxRuns('fib')).toHaveLength(3);
  });

  it('a non-deterministic tool is never cached (cache: off)', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(py('roll', 'print(json.dumps({"ok": True, "data": os.urandom(4).hex()}))'))).ok).toBe(true);
    const a = await fx.forge.callTool('roll', {});
    const b = await fx.forge.callTool('roll', {});
    expect([a.meta.cache, b.meta.cache]).toEqual(['off', 'off']);
    expect(okData(a)).not.toEqual(okData(b));
    expect(fx.sandboxRuns('roll')).toHaveLength(2);
    expect(cacheFiles(fx.forge.paths.cacheDir)).toEqual([]);
  });

  it('cache: false turns the cache off for deterministic tools', async () => {
    const fx = await setup({ forge: { cache: false } });
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    await fx.forge.callTool('fib', { n: 4 });
    expect((await fx.forge.callTool('fib', { n: 4 })).meta.cache).toBe('off');
    expect(fx.sandboxRuns('fib')).toHaveLength(2);
  });

  it('8 concurrent identical calls on a fresh key run the sandbox once, and every caller gets the result', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(counted())).ok).toBe(true);
    const results = await Promise.all(Array.from({ length: 8 }, () => fx.forge.callTool('counted', { k: 1 })));
    expect(fx.sandboxRuns('counted')).toHaveLength(1);
    const data = results.map((r) => okData(r));
    expect(new Set(data.map((d) => JSON.stringify(d))).size).toBe(1);
    const seed = results.find((r) => r.meta.cache === 'miss');
    expect(results.filter((r) => r.meta.cache === 'miss')).toHaveLength(1);
    expect(results.filter((r) => r.meta.cache === 'hit').map((r) => r.meta.seed_run)).toEqual(Array(7).fill(seed?.meta.run_id));
    expect(new Set(results.map((r) => r.meta.run_id)).size).toBe(8);
    const called = fx.entries('forge.called').map((e) => e.data);
    expect(called.map((d) => [d.ok, d.cache]).sort()).toEqual([[true, 'hit'], ...Array(6).fill([true, 'hit']), [true, 'miss']]);
    await fx.forge.close();
    for (const r of results.filter((x) => x.meta.cache === 'hit')) {
      expect(fx.manifest(r.meta.run_id as string)).toMatchObject({ cache: 'hit', shared_flight: true, seed_run: seed?.meta.run_id });
    }
  });

  it('concurrent identical calls of a failing deterministic tool: every audit entry and record says it failed', async () => {
    const fx = await setup();
    const spec = py('flaky', 'import time\ntime.sleep(0.3)\nprint("not json")', { meta: { deterministic: true } });
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    const results = await Promise.all(Array.from({ length: 4 }, () => fx.forge.callTool('flaky', {})));
    for (const r of results) failed(r, 'output_invalid');
    expect(fx.sandboxRuns('flaky')).toHaveLength(1);
    expect(fx.entries('forge.called').map((e) => [e.data.ok, e.data.kind])).toEqual(Array(4).fill([false, 'output_invalid']));
    expect(cacheFiles(fx.forge.paths.cacheDir)).toEqual([]);
  });

  it('a failed result is never cached: a tool’s ok:false, invalid output, output_schema_failed', async () => {
    const fx = await setup();
    const det = { meta: { deterministic: true } };
    expect(
      (await fx.forge.forgeTool(py('says_no', 'print(json.dumps({"ok": False, "error": {"kind": "no", "message": "no"}}))', det))).ok,
    ).toBe(true);
    expect((await fx.forge.forgeTool(py('garbles', 'print("{")', det))).ok).toBe(true);
    expect(
      (
        await fx.forge.forgeTool(
          py('mistyped', 'print(json.dumps({"ok": True, "data": "text"}))', { ...det, output_schema: { type: 'integer' } }),
        )
      ).ok,
    ).toBe(true);
    for (const name of ['says_no', 'garbles', 'mistyped']) {
      const a = await fx.forge.callTool(name, {});
      const b = await fx.forge.callTool(name, {});
      expect([a.ok, b.ok, a.meta.cache, b.meta.cache], name).toEqual([false, false, 'miss', 'miss']);
      expect(fx.sandboxRuns(name), name).toHaveLength(2);
    }
    expect(cacheFiles(fx.forge.paths.cacheDir)).toEqual([]);
  });

  it('evicts the least recently used entry past maxEntries', async () => {
    const fx = await setup({ forge: { cache: { maxEntries: 2 } } });
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const c = async (n: number) => (await fx.forge.callTool('fib', { n })).meta.cache;
    expect([await c(1), await c(2), await c(3)]).toEqual(['miss', 'miss', 'miss']);
    expect(cacheFiles(fx.forge.paths.cacheDir)).toHaveLength(2);
    expect(await c(3)).toBe('hit');
    expect(await c(1)).toBe('miss'); // evicted by 3; now evicts 2 (3 was used more recently)
    expect(await c(3)).toBe('hit');
    expect(await c(2)).toBe('miss');
    expect(cacheFiles(fx.forge.paths.cacheDir)).toHaveLength(2);
  });

  it('an entry older than maxAgeMs is a miss (clock injected)', async () => {
    const clock = fakeClock();
    const fx = await setup({ forge: { now: clock.now, cache: { maxAgeMs: 60_000 } } });
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    await fx.forge.callTool('fib', { n: 9 });
    clock.advance(59_000);
    expect((await fx.forge.callTool('fib', { n: 9 })).meta.cache).toBe('hit');
    clock.advance(2_000);
    expect((await fx.forge.callTool('fib', { n: 9 })).meta.cache).toBe('miss');
  });

  it('a cache hit never skips the bind checks: another project cannot read outside its roots through the shared cache', async () => {
    const a = await setup();
    const b = await setup({ home: a.home });
    const reader = py('det_reader', 'print(json.dumps({"ok": True, "data": open(args["path"]).read()}))', {
      input_schema: { type: 'object', properties: { path: { type: 'string', 'x-bind': 'ro' } }, required: ['path'] },
      meta: { deterministic: true },
    });
    expect((await a.forge.forgeTool(reader)).ok).toBe(true);
    const private_ = a.file('private/notes.txt', 'only project A may read this');
    const first = await a.forge.callTool('det_reader', { path: private_ });
    expect(okData(first)).toBe('only project A may read this');
    // A file's content is not part of its path: calls that bind paths are never cached.
    expect(first.meta.cache).toBe('off');
    expect(cacheFiles(a.forge.paths.cacheDir)).toEqual([]);
    // Project B (an engine started after A's call) forges the same spec, so the same digest, and
    // asks for A's file, which is outside B's bind_roots.
    const b2 = await b.reopen();
    expect((await b2.forgeTool(reader)).ok).toBe(true);
    const env = await b2.callTool('det_reader', { path: private_ });
    expect(JSON.stringify(env)).not.toContain('only project A');
    failed(env, 'bind_denied');
  });

  it('a cacheable call’s audit entry records its cache key and the digest of its answer; a hit is one the log backs', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const first = await fx.forge.callTool('fib', { n: 7 });
    const [stored] = fibEntries(fx.forge.paths.cacheDir).values();
    expect(calledOf(fx, first.meta.run_id)).toMatchObject({
      cache: 'miss',
      cache_key: stored?.key,
      output_digest: outputDigest(first),
    });
    expect(outputDigest(stored?.entry.envelope)).toBe(outputDigest(first));
    expect((await fx.forge.callTool('fib', { n: 7 })).meta).toMatchObject({ cache: 'hit', seed_run: first.meta.run_id });
    expect(fx.entries('forge.cache_mismatch')).toEqual([]);
  });

  it('an entry edited to other valid JSON is a miss: the call runs again, answers the real output, and the mismatch is audited and warned', async () => {
    const seen = warnings();
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const first = await fx.forge.callTool('fib', { n: 20 });
    await fx.forge.close();
    // The attacker edits the stored answer (a well-formed entry, nothing else changed).
    const stored = fibEntries(fx.forge.paths.cacheDir).get(20);
    if (!stored) throw new Error('fib {n: 20} was not cached');
    const forged = structuredClone(stored.entry);
    (forged.envelope as { data: { fib: string } }).data.fib = '6766';
    writeAtomic(stored.file, JSON.stringify(forged));
    const again = await fx.reopen();
    const r = await again.callTool('fib', { n: 20 });
    expect(r).toMatchObject({ ok: true, data: { n: 20, fib: '6765' }, meta: { cache: 'miss' } });
    expect(fx.sandboxRuns('fib')).toHaveLength(2);
    const recorded = calledOf(fx, first.meta.run_id);
    const mismatch = fx.entries('forge.cache_mismatch');
    expect(mismatch.map((e) => e.data)).toEqual([
      {
        name: 'fib',
        version: 1,
        digest: recorded?.digest,
        scope: 'project',
        persona: 'default',
        session: again.caller().session,
        input_digest: recorded?.input_digest,
        cache_key: stored.key,
        seed_run: first.meta.run_id,
        reason: 'output_differs',
        output_digest: outputDigest(forged.envelope),
        recorded: { cache_key: stored.key, output_digest: recorded?.output_digest },
        store: 'file',
      },
    ]);
    // Reported before the call it made run again.
    expect((mismatch[0]?.seq ?? 0) < (fx.entries('forge.called').find((e) => e.data.run_id === r.meta.run_id)?.seq ?? 0)).toBe(true);
    expect(seen).toContain(
      `forge: the file result cache at ${fx.forge.paths.cacheDir} held an answer of "fib" (key ${stored.key.slice(0, 12)}…) that the audit log does not back: its answer (${outputDigest(forged.envelope)}) is not the one the audit log recorded for its seed run ${first.meta.run_id} (${recorded?.output_digest}); it was removed and the call runs again (if nobody edited the cache, check who can write to it)`,
    );
    // The real answer replaced the forged one: the next call is a hit of the new run.
    expect(fibEntries(fx.forge.paths.cacheDir).get(20)?.entry).toMatchObject({
      envelope: { data: { fib: '6765' } },
      seed_run: r.meta.run_id,
    });
    expect((await again.callTool('fib', { n: 20 })).meta).toMatchObject({ cache: 'hit', seed_run: r.meta.run_id });
  });

  it('an entry moved under another key, or naming a run the log does not show, is a miss reported as such', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const runs = [];
    for (const n of [20, 21, 22]) runs.push(await fx.forge.callTool('fib', { n }));
    await fx.forge.close();
    const stored = fibEntries(fx.forge.paths.cacheDir);
    const [e20, e21, e22] = [stored.get(20), stored.get(21), stored.get(22)];
    if (!e20 || !e21 || !e22) throw new Error('fib {n: 20, 21, 22} were not all cached');
    // n=20's genuine entry copied over n=21's key; n=22's entry names a run that never happened.
    writeAtomic(e21.file, JSON.stringify(e20.entry));
    writeAtomic(e22.file, JSON.stringify({ ...e22.entry, seed_run: 'lz0000a-0f3a9c1e0001' }));
    const again = await fx.reopen();
    expect(okData(await again.callTool('fib', { n: 21 }))).toEqual({ n: 21, fib: '10946' });
    expect(okData(await again.callTool('fib', { n: 22 }))).toEqual({ n: 22, fib: '17711' });
    expect(okData(await again.callTool('fib', { n: 20 }))).toEqual({ n: 20, fib: '6765' });
    expect(fx.entries('forge.cache_mismatch').map((e) => [e.data.cache_key, e.data.reason, e.data.seed_run])).toEqual([
      [e21.key, 'key_differs', runs[0]?.meta.run_id],
      [e22.key, 'not_recorded', 'lz0000a-0f3a9c1e0001'],
    ]);
    expect(fx.entries('forge.cache_mismatch')[0]?.data.recorded).toEqual({ cache_key: e20.key, output_digest: outputDigest(runs[0]) });
    // n=20 was untouched: a hit; n=21 and n=22 ran again.
    expect(fx.sandboxRuns('fib')).toHaveLength(5);
  });

  it('the cache lives in the home: a restarted engine hits the entry a previous one stored', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    const first = await fx.forge.callTool('fib', { n: 30 });
    await fx.forge.close();
    const again = await fx.reopen();
    const hit = await again.callTool('fib', { n: 30 });
    expect(hit.meta).toMatchObject({ cache: 'hit', seed_run: first.meta.run_id });
    expect(okData(hit)).toEqual({ n: 30, fib: '832040' });
    expect(cacheFiles(join(fx.home, 'cache'))).toHaveLength(1);
  });
});
