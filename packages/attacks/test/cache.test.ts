// Invariant 8, a cached answer is the one the audit log recorded (docs/security.md): an entry of
// the result cache is served only when the `forge.called` entry of its seed run recorded its key
// and the digest of its very answer. Whoever can write the cache (its directory, its table) but
// not the log cannot make a caller get another answer: every edit is a miss, reported.
import { readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { type CacheStore, fileCacheStore } from '@forge/runner';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { py, scratchDir, target } from './helpers.js';

/** Deterministic, so cacheable. */
const square = py('square', 'print(json.dumps({"ok": True, "data": {"n": args["n"], "sq": args["n"] * args["n"]}}))', {
  input_schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] },
  meta: { deterministic: true },
});

/** The file store, opened afresh for every operation: each read sees the files as a process started now would. */
function reopenedFileStore(dir: string): CacheStore {
  const open = () => fileCacheStore(dir);
  return {
    kind: 'file',
    where: dir,
    get: (key) => open().get(key),
    set: (key, envelope, seedRun) => open().set(key, envelope, seedRun),
    delete: (key) => open().delete(key),
    stats: () => open().stats(),
  };
}

interface StoredEntry {
  envelope: { ok: true; data: unknown; meta: Record<string, unknown> };
  seed_run: string;
  created_at: number;
}

/** What an attacker writes into a stored entry (`other` is the entry of another input). */
type Edit = (entry: StoredEntry, other: StoredEntry) => StoredEntry;

const edits: fc.Arbitrary<{ what: string; edit: Edit }> = fc.oneof(
  fc
    .jsonValue()
    .map((v) => ({ what: `data = ${JSON.stringify(v)}`, edit: (e: StoredEntry) => ({ ...e, envelope: { ...e.envelope, data: v } }) })),
  fc.tuple(fc.constantFrom('fib', 'sq', 'n'), fc.jsonValue()).map(([k, v]) => ({
    what: `data.${k} = ${JSON.stringify(v)}`,
    edit: (e: StoredEntry) => ({ ...e, envelope: { ...e.envelope, data: { ...(e.envelope.data as object), [k]: v } } }),
  })),
  // Any key of meta, odd spellings included (`__proto__` is an own key once parsed), or one forge sets.
  fc
    .tuple(fc.oneof(fc.string(), fc.constantFrom('__proto__', 'files', 'run_id', 'cache', 'sandbox', 'seed_run')), fc.jsonValue())
    .map(([k, v]) => ({
      what: `meta[${JSON.stringify(k)}] = ${JSON.stringify(v)}`,
      edit: (e: StoredEntry) => {
        const meta = { ...e.envelope.meta };
        Object.defineProperty(meta, k, { value: v, enumerable: true, writable: true, configurable: true });
        return { ...e, envelope: { ...e.envelope, meta } };
      },
    })),
  fc.string().map((s) => ({ what: `seed_run = ${JSON.stringify(s)}`, edit: (e: StoredEntry) => ({ ...e, seed_run: s }) })),
  // The genuine entry of another input moved under this key.
  fc.constant({ what: 'moved from n=8', edit: (_e: StoredEntry, other: StoredEntry) => other }),
  // Written again with its keys in another order: the same answer, still served.
  fc.constant({
    what: 'keys reordered',
    edit: (e: StoredEntry) => ({
      created_at: e.created_at,
      seed_run: e.seed_run,
      envelope: { meta: e.envelope.meta, data: e.envelope.data, ok: true as const },
    }),
  }),
);

const roundTrip = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

describe('invariant 8: a cached answer is the one the audit log recorded', () => {
  it('property: whatever an attacker writes into a stored entry, the caller gets the real answer; any change is a miss, reported once', async () => {
    const dir = scratchDir('forge-attack-cache-');
    const t = await target({ userPolicy: { breakers: { per_tool_rpm: 1e9 } }, forge: { cacheStore: reopenedFileStore(dir) } });
    expect((await t.forge.forgeTool(square)).ok).toBe(true);
    expect((await t.forge.callTool('square', { n: 8 })).ok).toBe(true);
    const otherKey = readdirSync(dir)[0] as string;
    const other = JSON.parse(readFileSync(join(dir, otherKey), 'utf8')) as StoredEntry;
    expect((await t.forge.callTool('square', { n: 7 })).ok).toBe(true);
    const file = join(dir, readdirSync(dir).find((n) => n !== otherKey) as string);
    const mismatches = () =>
      readFileSync(t.forge.paths.auditLog, 'utf8')
        .split('\n')
        .filter((l) => l.includes('"type":"forge.cache_mismatch"')).length;
    await fc.assert(
      fc.asyncProperty(edits, async ({ what, edit }) => {
        const genuine = JSON.parse(readFileSync(file, 'utf8')) as StoredEntry;
        const forged = roundTrip(edit(genuine, other));
        writeFileSync(`${file}.edit`, JSON.stringify(forged));
        renameSync(`${file}.edit`, file);
        const reported = mismatches();
        const r = await t.forge.callTool('square', { n: 7 });
        expect(r.ok && r.data, what).toEqual({ n: 7, sq: 49 });
        const changed = !isDeepStrictEqual(forged.envelope, genuine.envelope) || forged.seed_run !== genuine.seed_run;
        expect(r.meta.cache, what).toBe(changed ? 'miss' : 'hit');
        expect(mismatches() - reported, what).toBe(changed ? 1 : 0);
      }),
      // Each run is a sandboxed call and a read of the growing audit log: 15 keep it well under a tenth of
      // the limit on a quiet machine (30 took 86 s of its 120 on a loaded 2-core one).
      { numRuns: 15 },
    );
  });
});
