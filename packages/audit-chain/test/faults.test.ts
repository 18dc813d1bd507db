import { readFileSync, statSync } from 'node:fs';
import { appendFile, type FileHandle, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type AuditLog, type JsonValue, type OpenAuditLogOptions, openAuditLog, verifyLog } from '../src/index.js';
import { readChain, splitLines } from './children.js';
import { tempDir } from './helpers.js';

function errno(code: string, syscall: string): NodeJS.ErrnoException {
  const messages: Record<string, string> = { EIO: 'i/o error', ENOSPC: 'no space left on device' };
  return Object.assign(new Error(`${code}: ${messages[code]}, ${syscall}`), { code, syscall });
}

/** The real write: all of `data`, appended. */
async function realWrite(handle: FileHandle, data: Buffer): Promise<void> {
  let off = 0;
  while (off < data.length) off += (await handle.write(data, off, data.length - off)).bytesWritten;
}

async function newLog(options?: OpenAuditLogOptions): Promise<{ path: string; log: AuditLog }> {
  const dir = await tempDir();
  const path = join(dir, 'audit.log');
  const log = await openAuditLog(path, options);
  onTestFinished(() => log.close());
  return { path, log };
}

async function rejection(p: Promise<unknown>): Promise<{ code?: string; message: string; cause?: unknown; name: string }> {
  try {
    await p;
  } catch (err) {
    return err as { code?: string; message: string; name: string };
  }
  throw new Error('expected a rejection, but the promise resolved');
}

describe('a failed write or data sync rolls the batch back', () => {
  it('a data sync failing with EIO rejects the append (write_failed), leaves the file as it was, and the next append takes the next seq', async () => {
    let failSync = false;
    const eio = errno('EIO', 'fdatasync');
    const { path, log } = await newLog({
      io: {
        async datasync(handle) {
          if (failSync) throw eio;
          await handle.datasync();
        },
      },
    });
    await log.append('t.a', { n: 1 });
    await log.append('t.a', { n: 2 });
    const before = readFileSync(path);

    failSync = true;
    const err = await rejection(log.append('t.a', { n: 3 }));
    expect(err).toMatchObject({ name: 'AuditError', code: 'write_failed' });
    expect(err.cause).toBe(eio);
    expect(err.message).toContain('EIO');
    expect(readFileSync(path).equals(before)).toBe(true);
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 2 });

    failSync = false;
    const r = await log.append('t.a', { n: 4 });
    expect(r.seq).toBe(3);
    // A writer opened afresh (no fault injection) continues the same chain.
    const other = await openAuditLog(path);
    const r2 = await other.append('t.a', { n: 5 });
    await other.close();
    expect(r2.seq).toBe(4);

    const { entries } = await readChain(path);
    expect(entries.map((e) => e.data.n)).toEqual([1, 2, 4, 5]);
    expect(entries[2]).toMatchObject({ seq: 3, hash: r.hash });
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 4, head: r2.hash });
  });

  it('a write that writes half its buffer, then fails with ENOSPC, is truncated away; the next append takes the next seq', async () => {
    let failWrite = false;
    let sizeAfterHalf = -1;
    const { path, log } = await newLog({
      io: {
        async write(handle, data) {
          if (!failWrite) return realWrite(handle, data);
          await handle.write(data, 0, Math.floor(data.length / 2));
          sizeAfterHalf = (await handle.stat()).size;
          throw errno('ENOSPC', 'write');
        },
      },
    });
    await log.append('t.a', { n: 1 });
    const before = readFileSync(path);

    failWrite = true;
    const err = await rejection(log.append('t.a', { n: 2, pad: 'x'.repeat(300) }));
    expect(err).toMatchObject({ name: 'AuditError', code: 'write_failed' });
    expect(err.message).toContain('ENOSPC');
    expect(sizeAfterHalf).toBeGreaterThan(before.length); // the half line did reach the file
    expect(readFileSync(path).equals(before)).toBe(true); // and was taken back out
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 1 });

    failWrite = false;
    const r = await log.append('t.a', { n: 3 });
    expect(r.seq).toBe(2);
    const { entries } = await readChain(path);
    expect(entries.map((e) => e.data.n)).toEqual([1, 3]);
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 2, head: r.hash });
  });

  it('rejects a whole group-committed batch of 50 concurrent appends together when its sync fails', async () => {
    let failSync = false;
    const writes: Buffer[] = [];
    let syncs = 0;
    const { path, log } = await newLog({
      io: {
        async write(handle, data) {
          writes.push(Buffer.from(data));
          await realWrite(handle, data);
        },
        async datasync(handle) {
          syncs++;
          if (failSync) throw errno('EIO', 'fdatasync');
          await handle.datasync();
        },
      },
    });
    await log.append('t.first', {});
    const before = readFileSync(path);
    writes.length = 0;
    syncs = 0;

    failSync = true;
    const settled = await Promise.allSettled(Array.from({ length: 50 }, (_, i) => log.append('t.batch', { i })));
    expect(settled.map((s) => s.status)).toEqual(Array(50).fill('rejected'));
    expect(settled.map((s) => (s.status === 'rejected' ? s.reason.code : s.status))).toEqual(Array(50).fill('write_failed'));
    // One batch: one write holding all 50 lines, one sync.
    expect(writes).toHaveLength(1);
    expect(splitLines(writes[0] as Buffer).lines).toHaveLength(50);
    expect(syncs).toBe(1);
    expect(readFileSync(path).equals(before)).toBe(true);
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 1 });

    failSync = false;
    const ok = await Promise.all(Array.from({ length: 50 }, (_, i) => log.append('t.batch', { i })));
    expect(ok.map((r) => r.seq)).toEqual(Array.from({ length: 50 }, (_, i) => i + 2));
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 51, head: ok.at(-1)?.hash });
  });
});

describe('input hygiene: data that is not I-JSON is refused with the JSON pointer of the bad value', () => {
  class Point {
    x = 1;
    y = 2;
  }
  const cycle: Record<string, JsonValue> = { a: { b: null } };
  (cycle.a as Record<string, unknown>).b = cycle;
  const sparse: number[] = [1];
  sparse[2] = 3;
  let deep: unknown = 1;
  for (let i = 0; i < 101; i++) deep = [deep];

  const cases: [string, unknown, string][] = [
    ['NaN', { n: Number.NaN }, 'data at /n: NaN is not a JSON number; use null or a string'],
    ['Infinity', { n: Number.POSITIVE_INFINITY }, 'data at /n: Infinity is not a JSON number; use null or a string'],
    ['-Infinity', { a: [0, Number.NEGATIVE_INFINITY] }, 'data at /a/1: -Infinity is not a JSON number; use null or a string'],
    [
      'a lone surrogate in a value',
      { s: 'ok', t: ['a\ud800b'] },
      'data at /t/0: string contains a lone surrogate; encode binary data as base64 or hex',
    ],
    ['a lone surrogate in a key', { ok: 1, 'k\udc00': 1 }, 'data at /k\udc00: key contains a lone surrogate; use well-formed keys'],
    ['2**53', { n: 2 ** 53 }, 'data at /n: integer 9007199254740992 is beyond ±(2^53 − 1) and loses precision; send it as a string'],
    ['-(2**53)', { n: -(2 ** 53) }, 'data at /n: integer -9007199254740992 is beyond ±(2^53 − 1) and loses precision; send it as a string'],
    ['a BigInt', { n: 1n }, 'data at /n: BigInt is not JSON; send it as a string'],
    ['a function', { f: () => 1 }, 'data at /f: a function is not JSON; log data, not code'],
    ['a symbol', { s: Symbol('s') }, 'data at /s: a symbol is not JSON; use a string'],
    ['undefined as a value', { u: undefined }, 'data at /u: undefined is not JSON; omit the key or use null'],
    ['undefined in an array', [1, undefined], 'data at /1: undefined is not JSON; omit the key or use null'],
    ['a Map', { m: new Map([['a', 1]]) }, 'data at /m: Map is not a plain JSON object; use Object.fromEntries(map)'],
    ['a Set', { s: new Set([1]) }, 'data at /s: Set is not a plain JSON object; use an array'],
    ['a Date', { when: new Date(0) }, 'data at /when: Date is not a plain JSON object; use date.toISOString()'],
    ['a class instance', { p: new Point() }, 'data at /p: Point is not a plain JSON object; convert it to a plain object or array'],
    ['a cycle', cycle, 'data at /a/b: cycle: the value contains itself; log a reference (an id) instead'],
    ['a sparse array hole', { arr: sparse }, 'data at /arr/1: hole in a sparse array; fill it with null'],
    ['nesting deeper than 100 levels', deep, `data at ${'/0'.repeat(100)}: nested deeper than 100 levels; flatten the data`],
    [
      'a bad value under keys needing escapes',
      { 'a/b': { 'c~d': Number.NaN } },
      'data at /a~1b/c~0d: NaN is not a JSON number; use null or a string',
    ],
  ];

  it.each(cases)('%s → invalid_data, and nothing is written', async (_label, data, message) => {
    const { path, log } = await newLog();
    await log.append('t.ok', { n: 1 });
    const before = readFileSync(path);
    const err = await rejection(log.append('t.bad', data as JsonValue));
    expect(err).toMatchObject({ name: 'AuditError', code: 'invalid_data' });
    expect(err.message).toBe(message);
    await log.flush();
    expect(readFileSync(path).equals(before)).toBe(true);
    // The refused append took no sequence number.
    expect((await log.append('t.ok', { n: 2 })).seq).toBe(2);
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 2 });
  });

  it('accepts the limits themselves: ±(2^53 − 1), 100 levels, shared (acyclic) references, well-formed astral strings', async () => {
    const { path, log } = await newLog();
    let hundred: unknown = 1;
    for (let i = 0; i < 99; i++) hundred = [hundred];
    const shared = { k: 'v' };
    await log.append('t.ok', { max: 2 ** 53 - 1, min: -(2 ** 53 - 1) });
    await log.append('t.ok', [hundred] as JsonValue);
    await log.append('t.ok', { a: shared, b: shared });
    await log.append('t.ok', { '😀': '\ud83d\ude00' });
    const { entries } = await readChain(path);
    expect(entries.map((e) => e.data)).toEqual([
      { max: 2 ** 53 - 1, min: -(2 ** 53 - 1) },
      [hundred],
      { a: { k: 'v' }, b: { k: 'v' } },
      { '😀': '😀' },
    ]);
  });

  it('a refused append among concurrent ones does not disturb the others', async () => {
    const { path, log } = await newLog();
    const [a, bad, b] = await Promise.allSettled([
      log.append('t.ok', { n: 1 }),
      log.append('t.bad', { n: Number.NaN }),
      log.append('t.ok', { n: 2 }),
    ]);
    expect(a).toMatchObject({ status: 'fulfilled', value: { seq: 1 } });
    expect(bad).toMatchObject({ status: 'rejected', reason: { code: 'invalid_data' } });
    expect(b).toMatchObject({ status: 'fulfilled', value: { seq: 2 } });
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 2 });
  });
});

describe('types, sizes and closed logs', () => {
  it.each([
    ['empty', ''],
    ['reserved audit. prefix', 'audit.x'],
    ['a space', 'has space'],
    ['129 characters', 'a'.repeat(129)],
    ['a leading separator', '.user'],
    ['a non-ASCII letter', 'usér.login'],
    ['a line feed', 'a\nb'],
    ['not a string', 42],
  ])('a type with %s → invalid_type, and nothing is written', async (_label, type) => {
    const { path, log } = await newLog();
    await log.append('t.ok', null);
    const before = readFileSync(path);
    const err = await rejection(log.append(type as string, { x: 1 }));
    expect(err).toMatchObject({ name: 'AuditError', code: 'invalid_type' });
    await log.flush();
    expect(readFileSync(path).equals(before)).toBe(true);
  });

  it('accepts a 128-character type and every allowed character', async () => {
    const { path, log } = await newLog();
    await log.append('a'.repeat(128), null);
    await log.append('Az09_.:/-x', null);
    expect((await readChain(path)).entries.map((e) => e.type)).toEqual(['a'.repeat(128), 'Az09_.:/-x']);
  });

  it('an entry larger than maxEntryBytes → entry_too_large, nothing written; accepted entries stay within the limit', async () => {
    const max = 1024;
    const { path, log } = await newLog({ maxEntryBytes: max });
    await log.append('t.ok', null);
    const before = readFileSync(path);
    expect(await rejection(log.append('t.big', { s: 'x'.repeat(2000) }))).toMatchObject({ code: 'entry_too_large' });
    // Bytes count, not characters: 600 two-byte characters are 1,200 bytes.
    expect(await rejection(log.append('t.big', { s: 'é'.repeat(600) }))).toMatchObject({ code: 'entry_too_large' });
    await log.flush();
    expect(readFileSync(path).equals(before)).toBe(true);

    // Around the limit, every entry is either refused or written as a line of at most `max` bytes.
    let accepted = 0;
    let refused = 0;
    for (let n = 700; n <= 1000; n += 7) {
      try {
        await log.append('t.edge', { s: 'y'.repeat(n) });
        accepted++;
      } catch (err) {
        expect(err).toMatchObject({ code: 'entry_too_large' });
        refused++;
      }
    }
    expect(accepted).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
    const { entries } = await readChain(path);
    expect(entries).toHaveLength(1 + accepted);
    for (const e of entries) expect(e.line.length).toBeLessThanOrEqual(max);
    expect(statSync(path).size).toBe(entries.reduce((s, e) => s + e.line.length, 0));
  });

  it('close() commits appends made before it; afterwards append, checkpoint and rotate reject with closed', async () => {
    const { path, log } = await newLog();
    const pending = log.append('t.before-close', { n: 1 });
    await log.close();
    expect(await pending).toMatchObject({ seq: 1 });
    const size = statSync(path).size;
    expect(await rejection(log.append('t.after-close', { n: 2 }))).toMatchObject({ name: 'AuditError', code: 'closed' });
    expect(await rejection(log.checkpoint())).toMatchObject({ code: 'closed' });
    expect(await rejection(log.rotate())).toMatchObject({ code: 'closed' });
    await log.close(); // closing twice is harmless
    expect(statSync(path).size).toBe(size);
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 1 });
  });
});

describe('checkpoint writes', () => {
  it('a failed checkpoint write leaves the checkpoint file as it was, and the next one is well-formed', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const good = await openAuditLog(path);
    await good.append('a.b', { i: 1 });
    await good.checkpoint();
    await good.close();
    const before = await readFile(`${path}.checkpoints`);
    const failing = await openAuditLog(path, {
      io: {
        async write(handle, data) {
          await handle.write(data, 0, 10); // part of the line reaches the file
          throw Object.assign(new Error('no space left on device'), { code: 'ENOSPC' });
        },
      },
    });
    await failing.append('a.b', { i: 2 }).catch(() => {});
    await expect(failing.checkpoint()).rejects.toMatchObject({ code: 'write_failed' });
    await failing.close();
    expect(await readFile(`${path}.checkpoints`)).toEqual(before);
    const again = await openAuditLog(path);
    await again.append('a.b', { i: 3 });
    await again.checkpoint();
    await again.close();
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 2, uncheckpointed: 0 });
  });

  it('a torn checkpoint line left by a crash is dropped before the next checkpoint', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const log = await openAuditLog(path);
    await log.append('a.b', { i: 1 });
    await log.checkpoint();
    await appendFile(`${path}.checkpoints`, '{"entries":1,"head":"00');
    await log.append('a.b', { i: 2 });
    await log.checkpoint();
    await log.close();
    const lines = (await readFile(`${path}.checkpoints`, 'utf8')).split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[2]).toBe('');
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 2, uncheckpointed: 0 });
  });
});
