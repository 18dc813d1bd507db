/**
 * tailLog in-process: reading a log in order, the last N entries (across segments), follow mode
 * (new entries, rotation, abort), and refusing torn or altered lines.
 */
import { createHash } from 'node:crypto';
import { appendFile, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { scaled } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { type AuditEntry, AuditError, GENESIS_HASH, type JsonValue, openAuditLog, tailLog } from '../src/index.js';
import { tempDir } from './helpers.js';

async function collect(it: AsyncIterable<AuditEntry>): Promise<AuditEntry[]> {
  const out: AuditEntry[] = [];
  for await (const e of it) out.push(e);
  return out;
}

async function newLog(): Promise<{ dir: string; path: string }> {
  const dir = await tempDir();
  return { dir, path: join(dir, 'audit.log') };
}

/** Appends `n` entries `t.e` with data `{ i }` for i = from … from + n − 1, one at a time. */
async function appendN(path: string, n: number, from = 1): Promise<void> {
  const log = await openAuditLog(path);
  for (let i = from; i < from + n; i++) await log.append('t.e', { i });
  await log.close();
}

/** A valid entry line (SPEC.md section 2), built by hand. */
function entryLine(seq: number, data: JsonValue, prev: string): Buffer {
  const body = Buffer.from(
    `{"seq":${seq},"ts":"2026-01-01T00:00:00.000Z","type":"t.manual","data":${JSON.stringify(data)},"prev":"${prev}"`,
  );
  const hash = createHash('sha256').update(body).digest('hex');
  return Buffer.concat([body, Buffer.from(`,"hash":"${hash}"}\n`)]);
}

describe('tailLog without follow', () => {
  it('returns every entry in order, with its fields', async () => {
    const { path } = await newLog();
    const log = await openAuditLog(path);
    const results = await Promise.all(Array.from({ length: 25 }, (_, k) => log.append('t.e', { i: k + 1, s: 'ü日😀' })));
    await log.close();
    const got = await collect(tailLog(path));
    expect(got.map((e) => e.seq)).toEqual(Array.from({ length: 25 }, (_, k) => k + 1));
    expect(got.map((e) => e.hash)).toEqual(results.map((r) => r.hash));
    expect(got[0]).toMatchObject({ seq: 1, type: 't.e', data: { i: 1, s: 'ü日😀' }, prev: GENESIS_HASH, ts: results[0]?.ts });
    for (let k = 1; k < got.length; k++) expect(got[k]?.prev).toBe(got[k - 1]?.hash);
  });

  it('returns nothing for an empty or missing log', async () => {
    const { path } = await newLog();
    expect(await collect(tailLog(path))).toEqual([]);
    await writeFile(path, '');
    expect(await collect(tailLog(path))).toEqual([]);
  });

  it('last: N returns the last N entries', async () => {
    const { path } = await newLog();
    await appendN(path, 20);
    expect((await collect(tailLog(path, { last: 3 }))).map((e) => e.seq)).toEqual([18, 19, 20]);
    expect((await collect(tailLog(path, { last: 1 }))).map((e) => e.seq)).toEqual([20]);
    expect((await collect(tailLog(path, { last: 20 }))).map((e) => e.seq)).toHaveLength(20);
    expect((await collect(tailLog(path, { last: 50 }))).map((e) => e.seq)).toEqual(Array.from({ length: 20 }, (_, k) => k + 1));
    expect(await collect(tailLog(path, { last: 0 }))).toEqual([]);
  });

  it('last: N reaches back across a rotation when the active segment holds fewer than N', async () => {
    const { path } = await newLog();
    await appendN(path, 10); // 1–10
    const log = await openAuditLog(path);
    await log.rotate(); // 11 audit.sealed (segment 1), 12 audit.segment (segment 2)
    await log.append('t.e', { i: 13 });
    await log.append('t.e', { i: 14 });
    await log.close();
    const got = await collect(tailLog(path, { last: 6 }));
    expect(got.map((e) => e.seq)).toEqual([9, 10, 11, 12, 13, 14]);
    expect(got.map((e) => e.type)).toEqual(['t.e', 't.e', 'audit.sealed', 'audit.segment', 't.e', 't.e']);
    expect(got[2]?.data).toEqual({ segment: 1 });
    expect(got[3]?.data).toEqual({ segment: 2, previous: 'audit.log.000001' });
    // Exactly the active segment, and one more than the active segment.
    expect((await collect(tailLog(path, { last: 3 }))).map((e) => e.seq)).toEqual([12, 13, 14]);
    expect((await collect(tailLog(path, { last: 4 }))).map((e) => e.seq)).toEqual([11, 12, 13, 14]);
    // Everything, across both segments.
    expect((await collect(tailLog(path, { last: 100 }))).map((e) => e.seq)).toEqual(Array.from({ length: 14 }, (_, k) => k + 1));
  });

  it('last: N spans several sealed segments', async () => {
    const { path } = await newLog();
    const log = await openAuditLog(path);
    for (let r = 0; r < 3; r++) {
      await log.append('t.e', { r });
      await log.rotate();
    }
    await log.close();
    // Segment 1: 1, 2(sealed); segment 2: 3(header), 4, 5(sealed); segment 3: 6, 7, 8; segment 4: 9.
    const got = await collect(tailLog(path, { last: 7 }));
    expect(got.map((e) => e.seq)).toEqual([3, 4, 5, 6, 7, 8, 9]);
  });

  it('does not deliver a torn last line', async () => {
    const { path } = await newLog();
    await appendN(path, 3);
    const lines = (await readFile(path)).toString('utf8').trimEnd().split('\n');
    const prev = (JSON.parse(lines[2] as string) as AuditEntry).hash;
    await appendFile(path, entryLine(4, { half: true }, prev).subarray(0, 60));
    expect((await collect(tailLog(path))).map((e) => e.seq)).toEqual([1, 2, 3]);
    expect((await collect(tailLog(path, { last: 2 }))).map((e) => e.seq)).toEqual([2, 3]);
  });

  it('throws AuditError log_corrupt for an altered line', async () => {
    const { path } = await newLog();
    await appendN(path, 5);
    const text = await readFile(path, 'utf8');
    await writeFile(path, text.replace('{"i":3}', '{"i":7}'));
    const delivered: AuditEntry[] = [];
    const run = async () => {
      for await (const e of tailLog(path)) delivered.push(e);
    };
    const err = await run().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(AuditError);
    expect(err).toMatchObject({ name: 'AuditError', code: 'log_corrupt' });
    // Whatever was delivered before the error precedes the altered entry.
    expect(delivered.every((e) => e.seq < 3)).toBe(true);
  });

  it('throws log_corrupt for a line re-hashed on its own (the next entry no longer links to it)', async () => {
    const { path } = await newLog();
    await appendN(path, 5);
    const lines = (await readFile(path, 'utf8')).trimEnd().split('\n');
    const e3 = JSON.parse(lines[2] as string) as AuditEntry;
    lines[2] = entryLine(3, { i: 'forged' }, e3.prev).toString('utf8').trimEnd();
    await writeFile(path, `${lines.join('\n')}\n`);
    await expect(collect(tailLog(path))).rejects.toMatchObject({ code: 'log_corrupt' });
  });
});

describe('tailLog with follow', () => {
  it('delivers entries appended later by another handle, continues across rotate(), and stops on abort', {
    timeout: scaled(60_000),
  }, async () => {
    const { path } = await newLog();
    await appendN(path, 3);
    const ac = new AbortController();
    const it = tailLog(path, { follow: true, signal: ac.signal, pollMs: 20 })[Symbol.asyncIterator]();
    const seqOf = async () => {
      const r = await it.next();
      expect(r.done).toBe(false);
      return r.value as AuditEntry;
    };
    expect([(await seqOf()).seq, (await seqOf()).seq, (await seqOf()).seq]).toEqual([1, 2, 3]);

    // The iterator is now waiting for more.
    const pending = it.next();
    await using writer = await openAuditLog(path);
    const a4 = await writer.append('t.later', { n: 4 });
    const r4 = await pending;
    expect(r4.done).toBe(false);
    expect(r4.value).toMatchObject({ seq: 4, type: 't.later', data: { n: 4 }, hash: a4.hash });

    const a5 = await writer.append('t.later', { n: 5 });
    expect(await seqOf()).toMatchObject({ seq: 5, hash: a5.hash });

    // Rotation: the seal is read from the old file, then the new active segment is followed.
    const rot = await writer.rotate();
    expect(rot).toMatchObject({ sealed: 1, entries: 7 });
    expect(await seqOf()).toMatchObject({ seq: 6, type: 'audit.sealed', data: { segment: 1 } });
    expect(await seqOf()).toMatchObject({ seq: 7, type: 'audit.segment', data: { segment: 2, previous: 'audit.log.000001' } });
    const a8 = await writer.append('t.later', { n: 8 });
    const e8 = await seqOf();
    expect(e8).toMatchObject({ seq: 8, data: { n: 8 }, hash: a8.hash });

    // A second rotation with entries around it, all written before the iterator reads again.
    await writer.append('t.later', { n: 9 });
    await writer.rotate();
    await writer.append('t.later', { n: 12 });
    const next4 = [await seqOf(), await seqOf(), await seqOf(), await seqOf()];
    expect(next4.map((e) => [e.seq, e.type])).toEqual([
      [9, 't.later'],
      [10, 'audit.sealed'],
      [11, 'audit.segment'],
      [12, 't.later'],
    ]);

    // Abort while the iterator waits: it ends normally.
    const waiting = it.next();
    ac.abort();
    expect(await waiting).toEqual({ done: true, value: undefined });
    expect(await it.next()).toEqual({ done: true, value: undefined });
  });

  it('with last: N, starts with the last N entries and then follows', { timeout: scaled(60_000) }, async () => {
    const { path } = await newLog();
    await appendN(path, 10);
    const ac = new AbortController();
    const got: number[] = [];
    await using writer = await openAuditLog(path);
    for await (const e of tailLog(path, { last: 2, follow: true, signal: ac.signal, pollMs: 20 })) {
      got.push(e.seq);
      if (e.seq === 10) await writer.append('t.later', { n: 11 });
      if (e.seq === 11) ac.abort();
    }
    expect(got).toEqual([9, 10, 11]);
  });

  it('holds back a torn last line until it is completed', { timeout: scaled(60_000) }, async () => {
    const { path } = await newLog();
    await appendN(path, 3);
    const lines = (await readFile(path, 'utf8')).trimEnd().split('\n');
    const line4 = entryLine(4, { slow: 'write' }, (JSON.parse(lines[2] as string) as AuditEntry).hash);
    await appendFile(path, line4.subarray(0, 50));
    const ac = new AbortController();
    const it = tailLog(path, { follow: true, signal: ac.signal, pollMs: 20 })[Symbol.asyncIterator]();
    for (const seq of [1, 2, 3]) expect((await it.next()).value).toMatchObject({ seq });
    const pending = it.next();
    await appendFile(path, line4.subarray(50));
    expect((await pending).value).toMatchObject({ seq: 4, type: 't.manual', data: { slow: 'write' } });
    ac.abort();
    expect(await it.next()).toEqual({ done: true, value: undefined });
  });

  it('ends at once when the signal is already aborted', async () => {
    const { path } = await newLog();
    await appendN(path, 2);
    const ac = new AbortController();
    ac.abort();
    expect(await collect(tailLog(path, { follow: true, signal: ac.signal }))).toEqual([]);
  });

  it('an altered line appended while following makes the iterator throw log_corrupt', { timeout: scaled(60_000) }, async () => {
    const { path } = await newLog();
    await appendN(path, 2);
    const ac = new AbortController();
    const it = tailLog(path, { follow: true, signal: ac.signal, pollMs: 20 })[Symbol.asyncIterator]();
    expect((await it.next()).value).toMatchObject({ seq: 1 });
    expect((await it.next()).value).toMatchObject({ seq: 2 });
    const pending = it.next();
    // Seq 3 linked to a hash that is not entry 2's.
    await appendFile(path, entryLine(3, { bad: true }, 'ab'.repeat(32)));
    await expect(pending).rejects.toMatchObject({ name: 'AuditError', code: 'log_corrupt' });
    ac.abort();
  });
});
