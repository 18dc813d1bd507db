import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { appendFile, readFile, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tempDir } from '@forge/test-utils';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type GapStore, GapStoreError, openGapStore, sanitizeGapRecord } from '../src/gaps.js';
import type { GapRecord } from '../src/types.js';

const WRITER = new URL('./fixtures/gap-writer.mjs', import.meta.url).pathname;

function open(dir: string, o: Partial<Parameters<typeof openGapStore>[0]> = {}): GapStore {
  const store = openGapStore({ dir, ...o });
  onTestFinished(() => store.close());
  return store;
}

function gap(signature: string, at: number, extra: Partial<GapRecord> = {}): GapRecord {
  return { kind: 'missing_tool', signature, source: 'unknown_tool', at, persona: 'coder', session: 's1', ...extra };
}

async function fileLines(file: string): Promise<string[]> {
  const text = await readFile(file, 'utf8');
  return text.split('\n').slice(0, -1);
}

function runWriter(dir: string, id: string, count: number, max: number, batch: number): Promise<void> {
  // The children run the built library: fail with the fix rather than a confusing child crash.
  if (!existsSync(new URL('../dist/index.js', import.meta.url))) {
    throw new Error('the cross-process gap tests run node children against dist/: run `pnpm --filter @forge/toolsmith build` first');
  }
  const child = spawn(process.execPath, [WRITER, dir, id, String(count), String(max), String(batch)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  onTestFinished(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => (out += s));
  child.stderr.setEncoding('utf8').on('data', (s: string) => (err += s));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 && out.includes('"ok":true') ? resolve() : reject(new Error(`writer ${id} exited ${code}: ${err}`)),
    );
  });
}

describe('gap store: durability', () => {
  it('creates nothing until written; keeps every record across a reopen, oldest first, file 0600 in a 0700 dir', async () => {
    const dir = join(await tempDir(), 'project', '.forge', 'toolsmith');
    const a = open(dir);
    expect(a.records()).toEqual([]);
    expect(a.summary({ threshold: 1, windowMs: 1000, now: 0 })).toEqual([]);
    expect(existsSync(dir)).toBe(false);
    await Promise.all(Array.from({ length: 100 }, (_, i) => a.record(gap(`cap-${i}`, 1000 + i))));
    await a.close();
    expect((await stat(dir)).mode & 0o777).toBe(0o700);
    expect((await stat(a.file)).mode & 0o777).toBe(0o600);
    expect(await fileLines(a.file)).toHaveLength(100);
    const b = open(dir);
    const held = b.records();
    expect(held.map((r) => r.signature)).toEqual(Array.from({ length: 100 }, (_, i) => `cap-${i}`));
    expect(held[0]).toEqual(gap('cap-0', 1000));
    await expect(a.record(gap('late', 1))).rejects.toMatchObject({ code: 'closed' });
  });

  it("defaults `at` to the clock and sees other stores' appends (unchanged file: same snapshot; grown: read from the last offset)", async () => {
    const dir = await tempDir();
    const a = open(dir, { now: () => 42 });
    const b = open(dir);
    await a.record({ kind: 'missing_tool', signature: 'x', source: 'forge_request', persona: 'p', session: 's' });
    expect(b.records().map((r) => [r.signature, r.at])).toEqual([['x', 42]]);
    const first = b.records();
    expect(b.records()).toBe(first);
    // Rewrite the first line in place (same length) and append: the grown inode is read from b's
    // offset on, so b keeps its old view of line 1 while a fresh store sees the rewrite.
    const text = await readFile(a.file, 'utf8');
    await writeFile(a.file, text.replace('"signature":"x"', '"signature":"y"'));
    await a.record(gap('z', 43));
    expect(b.records().map((r) => r.signature)).toEqual(['x', 'z']);
    expect(
      open(dir)
        .records()
        .map((r) => r.signature),
    ).toEqual(['y', 'z']);
    // Same size, new mtime (rewritten in place): read again from the start.
    await writeFile(a.file, (await readFile(a.file, 'utf8')).replace('"signature":"z"', '"signature":"w"'));
    await utimes(a.file, new Date(1_000), new Date(1_000));
    expect(b.records().map((r) => r.signature)).toEqual(['y', 'w']);
  });

  it('skips a torn last line on load and starts the next append on a fresh line', async () => {
    const dir = await tempDir();
    const a = open(dir);
    await a.record(gap('one', 1));
    await a.record(gap('two', 2));
    await appendFile(a.file, '{"kind":"missing_tool","signature":"tor');
    const b = open(dir);
    expect(b.records().map((r) => r.signature)).toEqual(['one', 'two']);
    await b.record(gap('three', 3));
    const lines = await fileLines(b.file);
    expect(lines).toHaveLength(4);
    expect(lines[2]).toBe('{"kind":"missing_tool","signature":"tor');
    expect(JSON.parse(lines[3] as string)).toEqual(gap('three', 3));
    expect(
      open(dir)
        .records()
        .map((r) => r.signature),
    ).toEqual(['one', 'two', 'three']);
    // a, which had read up to the torn line, also resumes cleanly.
    expect(a.records().map((r) => r.signature)).toEqual(['one', 'two', 'three']);
  });

  it('skips lines that are not valid records', async () => {
    const dir = await tempDir();
    const a = open(dir);
    await a.record(gap('good', 1));
    await appendFile(a.file, `not json\n{"kind":"nope","signature":"s"}\n[1]\n${'x'.repeat(100_000)}\n`);
    await a.record(gap('also-good', 2));
    expect(
      open(dir)
        .records()
        .map((r) => r.signature),
    ).toEqual(['good', 'also-good']);
  });
});

describe('gap store: bounded', () => {
  it('holds the newest maxRecords and never lets the file pass 2× maxRecords lines', async () => {
    const dir = await tempDir();
    const a = open(dir, { maxRecords: 10 });
    for (let i = 0; i < 35; i++) {
      await a.record(gap(`g-${i}`, i));
      expect((await fileLines(a.file)).length).toBeLessThanOrEqual(20);
      expect(a.records().length).toBeLessThanOrEqual(10);
    }
    const newest = Array.from({ length: 10 }, (_, i) => `g-${25 + i}`);
    expect(a.records().map((r) => r.signature)).toEqual(newest);
    expect(
      open(dir, { maxRecords: 10 })
        .records()
        .map((r) => r.signature),
    ).toEqual(newest);
    const leftover = join(dir, '.gaps.jsonl.999.x.tmp'); // a compaction killed before its rename
    await writeFile(leftover, 'partial');
    // One batch bigger than the ring: compacted with it, every caller resolves.
    await Promise.all(Array.from({ length: 50 }, (_, i) => a.record(gap(`b-${i}`, 100 + i))));
    const lines = await fileLines(a.file);
    expect(lines.map((l) => JSON.parse(l).signature)).toEqual(Array.from({ length: 10 }, (_, i) => `b-${40 + i}`));
    expect(existsSync(join(dir, 'gaps.lock'))).toBe(false);
    expect(existsSync(leftover)).toBe(false);
  });

  it('4 processes × 500 records at once: no corrupt line, nothing lost (unbounded race) and only the oldest dropped (compacting race)', async () => {
    for (const max of [5_000, 60]) {
      const dir = await tempDir();
      await Promise.all(['w0', 'w1', 'w2', 'w3'].map((id) => runWriter(dir, id, 500, max, 7)));
      const lines = await fileLines(join(dir, 'gaps.jsonl'));
      expect((await readFile(join(dir, 'gaps.jsonl'), 'utf8')).endsWith('\n')).toBe(true);
      expect(lines.length).toBeLessThanOrEqual(2 * max);
      const seen = lines.map((l) => sanitizeGapRecord(JSON.parse(l)));
      expect(seen.every((s) => s.ok)).toBe(true);
      const signatures = seen.map((s) => (s.ok ? s.record.signature : ''));
      expect(new Set(signatures).size).toBe(signatures.length);
      if (max === 5_000) {
        expect(signatures).toHaveLength(2000);
        continue;
      }
      expect(signatures.length).toBeGreaterThanOrEqual(max);
      // Each writer commits in order, and compaction keeps a suffix of the file: what a writer
      // still has must be an unbroken run of its last records (a lost append leaves a hole).
      for (const id of ['w0', 'w1', 'w2', 'w3']) {
        const mine = signatures.filter((s) => s.startsWith(`${id}-`)).map((s) => Number(s.slice(id.length + 1)));
        expect(mine).toEqual(mine.length === 0 ? [] : Array.from({ length: mine.length }, (_, i) => 500 - mine.length + i));
      }
      const ends = ['w0', 'w1', 'w2', 'w3'].filter((id) => signatures.includes(`${id}-499`));
      expect(ends.length).toBeGreaterThanOrEqual(1);
    }
  });
});

describe('gap store: recurrence', () => {
  it('counts inside [now - window, now], qualifies at the threshold, sorts qualifying first then by count', async () => {
    const dir = await tempDir();
    const a = open(dir, { now: () => 10_000 });
    const at = [1_000, 5_000, 6_000, 9_000, 10_000, 12_000];
    for (const t of at) await a.record(gap('csv-parse', t, { persona: t > 5_000 ? 'b' : 'a', description: `d${t}` }));
    await a.record(gap('pdf', 9_500, { source: 'forge_request' }));
    await a.record(gap('pdf', 9_600));
    await a.record({ ...gap('github', 9_700), kind: 'service_absent', source: 'gateway' });
    await a.record(gap('github', 9_800));
    const s = a.summary({ threshold: 3, windowMs: 5_000 });
    expect(s.map((g) => [g.kind, g.signature, g.count, g.total, g.qualifies])).toEqual([
      ['missing_tool', 'csv-parse', 4, 6, true],
      ['missing_tool', 'pdf', 2, 2, false],
      ['missing_tool', 'github', 1, 1, false],
      ['service_absent', 'github', 1, 1, false],
    ]);
    expect(s[0]).toMatchObject({
      first_at: 1_000,
      last_at: 12_000,
      personas: ['a', 'b'],
      sources: ['unknown_tool'],
      description: 'd12000',
    });
    expect(s[1]?.sources).toEqual(['forge_request', 'unknown_tool']);
    expect(a.summary({ threshold: 5, windowMs: 7_000, now: 12_000 })[0]).toMatchObject({
      signature: 'csv-parse',
      count: 5,
      qualifies: true,
    });
    expect(
      a
        .summary({ threshold: 2, windowMs: 0, now: 9_500 })
        .filter((g) => g.count > 0)
        .map((g) => g.signature),
    ).toEqual(['pdf']);
    // One (kind, signature) only: the same row as in the whole summary, and kinds kept apart.
    expect(a.summary({ threshold: 3, windowMs: 5_000, only: { kind: 'missing_tool', signature: 'csv-parse' } })).toEqual([s[0]]);
    expect(
      a.summary({ threshold: 1, windowMs: 5_000, only: { kind: 'service_absent', signature: 'github' } }).map((g) => [g.kind, g.total]),
    ).toEqual([['service_absent', 1]]);
    expect(a.summary({ threshold: 1, windowMs: 5_000, only: { kind: 'missing_tool', signature: 'nope' } })).toEqual([]);
    expect(a.history('missing_tool', 'github').map((r) => r.at)).toEqual([9_800]);
    expect(a.history('missing_tool', 'csv-parse').map((r) => r.at)).toEqual(at);
    expect(() => a.summary({ threshold: 0, windowMs: 1 })).toThrow(RangeError);
  });
});

describe('gap store: sanitising', () => {
  it('refuses what it cannot sanitise, naming the field', async () => {
    const a = open(await tempDir());
    const cases: [Record<string, unknown>, string][] = [
      [{ kind: 'nope' }, 'kind'],
      [{ source: 'mcp' }, 'source'],
      [{ signature: '   ' }, 'signature'],
      [{ signature: 'x'.repeat(129) }, 'signature'],
      [{ signature: 7 }, 'signature'],
      [{ persona: 'p'.repeat(65) }, 'persona'],
      [{ session: null }, 'session'],
      [{ at: Number.NaN }, 'at'],
      [{ description: 5 }, 'description'],
      [{ example_inputs: 'x' }, 'example_inputs'],
    ];
    for (const [patch, field] of cases) {
      const err = await a.record({ ...gap('ok', 1), ...patch } as GapRecord).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(GapStoreError);
      expect(err).toMatchObject({ code: 'invalid_record', field });
      expect((err as Error).message).toContain(`"${field}"`);
    }
    expect((await a.record({ ...gap('ok', 1), kind: 'nope' } as never).catch((e: Error) => e))?.message).toMatchInlineSnapshot(
      `"gap record: "kind" must be one of missing_tool, service_absent (got "nope"); not recorded"`,
    );
    expect(existsSync(a.file)).toBe(false);
  });

  it('trims, cuts and drops to the bounds, and keeps no unknown field', async () => {
    const a = open(await tempDir());
    const big = { blob: 'x'.repeat(5_000) };
    await a.record({
      ...gap('  csv  ', 1),
      description: 'd'.repeat(5_000),
      example_inputs: [1, big, 10n, 2, 3, 4, 5, 6],
      extra: 'dropped',
    } as GapRecord);
    const [r] = open(a.file.replace(/\/gaps\.jsonl$/, '')).records();
    expect(r?.signature).toBe('csv');
    expect(r?.description).toHaveLength(1_000);
    expect(r?.example_inputs).toEqual([1, 2, 3, 4, 5]);
    expect(Object.keys(r ?? {})).toEqual(['kind', 'signature', 'source', 'at', 'persona', 'session', 'description', 'example_inputs']);
  });
});

describe('gap store: what is being written counts', () => {
  it('a summary right after note() counts the noted record, once it is written too, and never twice', async () => {
    const a = open(await tempDir());
    a.note(gap('csv', 1_000));
    // The same tick: the record is queued, not written yet.
    expect(a.summary({ threshold: 2, windowMs: 10_000, now: 2_000 })).toEqual([expect.objectContaining({ signature: 'csv', count: 1 })]);
    a.note(gap('csv', 1_500));
    expect(a.summary({ threshold: 2, windowMs: 10_000, now: 2_000 })[0]).toMatchObject({ count: 2, qualifies: true });
    await a.flush();
    expect(a.summary({ threshold: 2, windowMs: 10_000, now: 2_000 })[0]).toMatchObject({ count: 2 });
    expect(a.records()).toHaveLength(2);
  });
});

describe('gap store: best effort', () => {
  it('note() never throws and reports failures to onError (a directory under a regular file; an invalid record)', async () => {
    const root = await tempDir();
    await writeFile(join(root, 'plain-file'), 'x');
    const errors: Error[] = [];
    let seen: () => void = () => {};
    const two = new Promise<void>((resolve) => (seen = resolve));
    const a = open(join(root, 'plain-file', 'toolsmith'), {
      onError: (err) => {
        errors.push(err);
        if (errors.length === 2) seen();
      },
    });
    expect(() => a.note(gap('x', 1))).not.toThrow();
    expect(() => a.note({ ...gap('x', 1), kind: 'bad' } as never)).not.toThrow();
    await two;
    expect(errors.map((e) => (e as GapStoreError).code).sort()).toEqual(['invalid_record', 'unusable']);
    expect(errors.find((e) => (e as GapStoreError).code === 'unusable')?.message).toContain(join(root, 'plain-file', 'toolsmith'));
    await expect(a.record(gap('x', 1))).rejects.toMatchObject({ code: 'unusable' });
    expect(() => a.records()).toThrow(GapStoreError);
  });
});
