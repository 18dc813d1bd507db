import { appendFileSync, copyFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { waitFor } from '@forge/test-utils';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type AuditEntry, GENESIS_HASH, openAuditLog, type TailOptions, tailLog } from '../src/index.js';
import { checkAcks, expectCleanExit, readAcks, readChain, spawnWriter, splitLines } from './children.js';
import { tempDir } from './helpers.js';

/** Follows the log in the background, collecting what tailLog delivers. Stopped when the test ends. */
function follow(path: string, options: TailOptions = {}) {
  const ac = new AbortController();
  const got: AuditEntry[] = [];
  let error: unknown;
  const done = (async () => {
    try {
      for await (const e of tailLog(path, { ...options, follow: true, signal: ac.signal })) got.push(e);
    } catch (err) {
      error = err;
    }
  })();
  const stop = async () => {
    ac.abort();
    await done;
    if (error) throw error;
  };
  onTestFinished(() => stop().catch(() => {}));
  return {
    got,
    /** Waits until at least `n` entries were delivered (the timeout only prevents a hang). */
    until: (n: number) =>
      waitFor(
        () => `tailLog to deliver ${n} entries (has ${got.length})`,
        () => {
          if (error) throw error;
          return got.length >= n;
        },
      ),
    /** Rethrows what the follower threw, if anything. */
    check: () => {
      if (error) throw error;
    },
    stop,
  };
}

/** Delivered entries are the log's entries, all of them, in order, each linked to the one before. */
function expectWholeChainInOrder(got: AuditEntry[], n: number) {
  expect(got.map((e) => e.seq)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
  got.forEach((e, i) => {
    expect(e.prev).toBe(i === 0 ? GENESIS_HASH : got[i - 1]?.hash);
  });
}

describe('tailLog follow', () => {
  it('delivers, in order, every entry a separate writer process appends, and only complete lines', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const f = follow(path); // the log does not exist yet
    const n = 1500;
    // Large lines in batches of up to 100 (about 200 KB a write): the follower often reads while a
    // batch is only partly in the file.
    const w = spawnWriter(path, n, 'w', { window: 100, pad: 2000 });
    await f.until(n);
    await expectCleanExit(w);
    await f.stop();

    expect(f.got).toHaveLength(n);
    expectWholeChainInOrder(f.got, n);
    const { entries } = await readChain(path);
    expect(f.got.map((e) => e.hash)).toEqual(entries.map((e) => e.hash));
    expect(f.got.map((e) => e.data)).toEqual(entries.map((e) => e.data));
    const { acks } = await readAcks(w.acksPath);
    expect(acks).toHaveLength(n);
    expect(checkAcks(entries, acks)).toEqual([]);
    expect(f.got.map((e) => e.data)).toEqual(acks.map((a) => ({ writer: 'w', i: a.i, pad: 'x'.repeat(2000) })));
  });

  it('follows a writer process across a rotation', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const f = follow(path, { pollMs: 50 });
    const n = 800;
    const w = spawnWriter(path, n, 'w', { window: 25, rotateAt: 400 });
    await expectCleanExit(w);
    await f.until(n + 2);
    await f.stop();

    const { entries, segments } = await readChain(path);
    expect(segments).toBe(2);
    expect(entries).toHaveLength(n + 2);
    expectWholeChainInOrder(f.got, n + 2);
    expect(f.got.map((e) => e.hash)).toEqual(entries.map((e) => e.hash));
    expect(f.got.filter((e) => e.type.startsWith('audit.')).map((e) => [e.type, e.data])).toEqual([
      ['audit.sealed', { segment: 1 }],
      ['audit.segment', { segment: 2, previous: 'audit.log.000001' }],
    ]);
  });

  it('never delivers a partial line, and delivers the entry once the rest of its bytes arrive', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const log = await openAuditLog(path);
    for (let i = 0; i < 3; i++) await log.append('t.seed', { i });
    await log.close();

    const f = follow(path, { pollMs: 20 });
    await f.until(3);

    // The line the library would write next, made in a scratch copy of the log.
    const scratch = join(dir, 'scratch.log');
    copyFileSync(path, scratch);
    const other = await openAuditLog(scratch);
    const next = await other.append('t.next', { note: 'written in pieces' });
    await other.close();
    const line = splitLines(readFileSync(scratch)).lines.at(-1) as Buffer;
    expect(line.length).toBeGreaterThan(100);

    // In pieces: into the body, into the hash, then everything but the final line feed.
    const cuts = [37, line.length - 40, line.length - 1];
    let from = 0;
    for (const cut of cuts) {
      appendFileSync(path, line.subarray(from, cut));
      from = cut;
      // Lets time pass: many poll intervals, time enough to (wrongly) deliver it; a follower that
      // rightly delivers nothing gives no event to wait for.
      await sleep(300);
      f.check();
      expect(f.got).toHaveLength(3);
    }
    appendFileSync(path, line.subarray(from));
    await f.until(4);
    // Lets time pass: five poll intervals, time enough to (wrongly) deliver the entry again.
    await sleep(100);
    await f.stop();
    expect(f.got).toHaveLength(4);
    expect(f.got[3]).toMatchObject({ seq: 4, type: 't.next', data: { note: 'written in pieces' }, hash: next.hash, prev: f.got[2]?.hash });
  });

  it('a reader that is slow to pull loses nothing when the log rotates twice between two reads', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const log = await openAuditLog(path);
    onTestFinished(() => log.close());
    for (let i = 0; i < 3; i++) await log.append('t.seed', { i });

    const ac = new AbortController();
    const it = tailLog(path, { follow: true, signal: ac.signal });
    onTestFinished(async () => {
      ac.abort();
      await it.return(undefined);
    });
    const pulled: AuditEntry[] = [];
    for (let i = 0; i < 3; i++) pulled.push((await it.next()).value as AuditEntry);

    // While the reader holds its place in segment 1, segment 2 is sealed and segment 3 started.
    await log.rotate();
    await log.append('t.in-segment-2', {});
    await log.rotate();
    await log.append('t.in-segment-3', {});
    const { entries } = await readChain(path);
    expect(entries).toHaveLength(9);

    for (let i = 3; i < entries.length; i++) pulled.push((await it.next()).value as AuditEntry);
    expect(pulled.map((e) => [e.seq, e.type])).toEqual(entries.map((e) => [e.seq, e.type]));
  });
});
