/**
 * The entry codec for other stores (encodeEntry, prepareAppend/encodePrepared, decodeEntry,
 * encodeCheckpoint) and the log's head() and entries(): the codec gives the file log's exact bytes,
 * a log written by it alone verifies (signed checkpoints included), head() sees other processes'
 * appends, entries() starts where asked and refuses an altered line.
 */
import { execFile } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import {
  type AuditEntry,
  decodeCheckpoint,
  decodeEntry,
  encodeCheckpoint,
  encodeEntry,
  encodePrepared,
  GENESIS_HASH,
  generateSigningKeys,
  openAuditLog,
  prepareAppend,
  verifyLog,
} from '../src/index.js';
import { tempDir } from './helpers.js';

const run = promisify(execFile);
const WRITER = new URL('./fixtures/writer.mjs', import.meta.url).pathname;
const T0 = new Date('2026-11-30T01:20:54.123Z');

async function newLog(): Promise<string> {
  return join(await tempDir('forge-audit-'), 'audit.log');
}

async function collect(it: AsyncIterable<AuditEntry>): Promise<AuditEntry[]> {
  const out: AuditEntry[] = [];
  for await (const e of it) out.push(e);
  return out;
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    return (err as { code: string }).code;
  }
  return 'resolved';
}

function codeOfSync(f: () => unknown): string {
  try {
    f();
  } catch (err) {
    return (err as { code: string }).code;
  }
  return 'returned';
}

describe('encodeEntry', () => {
  it('produces byte for byte the lines the file log writes', async () => {
    const path = await newLog();
    const log = await openAuditLog(path, { clock: () => T0 });
    const items: [string, unknown][] = [
      ['user.login', { user: 'ann', ip: '203.0.113.7', z: [1, 2.5, null], a: { é: '☃' } }],
      ['user.logout', null],
      ['x/y:z-1', 'text with "quotes" and \n newline'],
    ];
    for (const [type, data] of items) await log.append(type, data as never);
    await log.close();

    let prev = GENESIS_HASH;
    let expected = '';
    for (const [i, [type, data]] of items.entries()) {
      const e = encodeEntry({ seq: i + 1, ts: T0.toISOString(), type, data: data as never, prev });
      expect(e.bytes).toBe(Buffer.byteLength(e.line));
      expected += e.line;
      prev = e.hash;
    }
    expect(await readFile(path, 'utf8')).toBe(expected);
  });

  it('encodePrepared gives the same line as encodeEntry, and takes only prepared appends', () => {
    const p = prepareAppend('t.e', { b: 1, a: [true] });
    const at = { seq: 7, ts: T0.toISOString(), prev: 'a'.repeat(64) };
    expect(encodePrepared(p, at)).toEqual(encodeEntry({ ...at, type: 't.e', data: { a: [true], b: 1 } }));
    expect(() => encodePrepared({ type: 't.e', dataJson: '{', maxBytes: 1 }, at)).toThrow(TypeError);
  });

  it('refuses what the file log refuses, with the same codes', async () => {
    const log = await openAuditLog(await newLog(), { maxEntryBytes: 400 });
    const cases: [string, unknown][] = [
      ['bad type!', 1],
      ['audit.sealed', 1],
      ['t.e', Number.NaN],
      ['t.e', '\ud800'],
      ['t.e', 'x'.repeat(500)],
    ];
    for (const [type, data] of cases) {
      const want = await codeOf(log.append(type, data as never));
      expect(['invalid_type', 'invalid_data', 'entry_too_large']).toContain(want);
      expect(codeOfSync(() => prepareAppend(type, data as never, { maxEntryBytes: 400 }))).toBe(want);
    }
    await log.close();
    const at = { ts: T0.toISOString(), type: 't.e', data: 1, prev: GENESIS_HASH };
    expect(codeOfSync(() => encodeEntry({ ...at, seq: 0 }))).toBe('invalid_data');
    expect(codeOfSync(() => encodeEntry({ ...at, seq: 1, ts: '2026-11-30' }))).toBe('invalid_data');
    expect(codeOfSync(() => encodeEntry({ ...at, seq: 1, prev: 'A'.repeat(64) }))).toBe('invalid_data');
    expect(codeOfSync(() => encodeEntry({ ...at, seq: 1, type: '' }))).toBe('invalid_type');
    // The log's own types are the format's: an encoder for another store may write them.
    expect(codeOfSync(() => encodeEntry({ ...at, seq: 1, type: 'audit.sealed' }))).toBe('returned');
  });

  it('a log written by the codec alone, with a signed checkpoint, verifies; an edit is caught', async () => {
    const path = await newLog();
    const keys = generateSigningKeys();
    let prev = GENESIS_HASH;
    let text = '';
    for (let seq = 1; seq <= 50; seq++) {
      const e = encodeEntry({ seq, ts: T0.toISOString(), type: 'job.done', data: { seq, ok: seq % 2 === 0 }, prev });
      text += e.line;
      prev = e.hash;
    }
    const cp = encodeCheckpoint(
      { entries: 50, head: prev, segment: 1, offset: Buffer.byteLength(text), time: T0.toISOString() },
      { signingKey: keys.privateKey },
    );
    expect(cp.checkpoint.sig).toMatch(/==$/);
    await writeFile(path, text);
    await writeFile(`${path}.checkpoints`, cp.line);
    const ok = await verifyLog(path, { publicKey: keys.publicKey });
    expect(ok).toMatchObject({ ok: true, entries: 50, head: prev, uncheckpointed: 0, checkpoint: { entries: 50, signed: true } });

    await writeFile(path, text.replace('{"ok":false,"seq":7}', '{"ok":true,"seq":7}'));
    expect((await verifyLog(path)).first_bad).toMatchObject({ seq: 7, reason: 'hash_mismatch' });
  });

  it('encodeCheckpoint gives the file log line and refuses impossible checkpoints', async () => {
    const path = await newLog();
    const log = await openAuditLog(path, { clock: () => T0 });
    const r = await log.append('t.e', 1);
    const written = await log.checkpoint();
    await log.close();
    const size = (await readFile(path)).length;
    const { checkpoint, line } = encodeCheckpoint({ entries: 1, head: r.hash, segment: 1, offset: size, time: T0.toISOString() });
    expect(checkpoint).toEqual(written);
    expect(await readFile(`${path}.checkpoints`, 'utf8')).toBe(line);
    const bad = { entries: 0, head: r.hash, segment: 1, offset: 0, time: T0.toISOString() };
    expect(codeOfSync(() => encodeCheckpoint(bad))).toBe('invalid_data');
    expect(codeOfSync(() => encodeCheckpoint({ ...bad, entries: 1, offset: -1 }))).toBe('invalid_data');
  });
});

describe('decodeEntry', () => {
  it('returns the entry of a good line and names the fault of a bad one', () => {
    const e = encodeEntry({ seq: 3, ts: T0.toISOString(), type: 't.e', data: { k: 'v' }, prev: 'b'.repeat(64) });
    expect(decodeEntry(e.line)).toEqual({
      ok: true,
      entry: { seq: 3, ts: T0.toISOString(), type: 't.e', data: { k: 'v' }, prev: 'b'.repeat(64), hash: e.hash },
    });
    expect(decodeEntry(e.line.replace('"v"', '"w"'))).toMatchObject({ ok: false, reason: 'hash_mismatch' });
    expect(decodeEntry('{"seq":1}\n')).toMatchObject({ ok: false, reason: 'bad_json' });
  });
});

describe('AuditLog.head', () => {
  it('is seq 0 and genesis when empty, then the last acknowledged append', async () => {
    const log = await openAuditLog(await newLog());
    expect(await log.head()).toEqual({ seq: 0, hash: GENESIS_HASH });
    const appends = await Promise.all([log.append('t.e', 1), log.append('t.e', 2), log.append('t.e', 3)]);
    expect(await log.head()).toEqual({ seq: 3, hash: appends[2]?.hash });
    await log.close();
    expect(await codeOf(log.head())).toBe('closed');
  });

  it('includes what another process appended, and this log’s own appends issued before it', async () => {
    const path = await newLog();
    const log = await openAuditLog(path);
    await log.append('t.mine', 0);
    await run(process.execPath, [WRITER, path, '25', 'child', JSON.stringify({ acks: `${path}.acks` })]);
    const acks = (await readFile(`${path}.acks`, 'utf8')).split('\n').filter((l) => /^child:/.test(l));
    expect(acks).toHaveLength(25);
    const lastChild = acks
      .map((l) => l.split(':'))
      .sort((a, b) => Number(a[2]) - Number(b[2]))
      .at(-1) as string[];
    expect(await log.head()).toEqual({ seq: 26, hash: lastChild[3] });
    const mine = log.append('t.mine', 1);
    const head = await log.head();
    expect(head).toEqual({ seq: 27, hash: (await mine).hash });
    await log.close();
  });
});

describe('AuditLog.entries', () => {
  it('yields verified entries from `from` on, oldest first, across a rotation', async () => {
    const path = await newLog();
    const log = await openAuditLog(path);
    for (let i = 1; i <= 5; i++) await log.append('t.e', { i });
    await log.rotate(); // adds audit.sealed (6) and audit.segment (7)
    for (let i = 6; i <= 8; i++) await log.append('t.e', { i });
    const all = await collect(log.entries());
    expect(all.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(all.map((e) => e.type)).toEqual(['t.e', 't.e', 't.e', 't.e', 't.e', 'audit.sealed', 'audit.segment', 't.e', 't.e', 't.e']);
    const from = await collect(log.entries({ from: 7 }));
    expect(from.map((e) => e.seq)).toEqual([7, 8, 9, 10]);
    expect(from[1]?.prev).toBe(from[0]?.hash);
    expect(await collect(log.entries({ from: 11 }))).toEqual([]);
    await expect(collect(log.entries({ from: 0 }))).rejects.toThrow(RangeError);
    await log.close();
    expect(await codeOf(collect(log.entries()))).toBe('closed');
  });

  it('refuses an altered entry with log_corrupt', async () => {
    const path = await newLog();
    const log = await openAuditLog(path);
    for (let i = 1; i <= 4; i++) await log.append('t.e', { i });
    const text = await readFile(path, 'utf8');
    await writeFile(path, text.replace('{"i":2}', '{"i":9}'));
    expect(await codeOf(collect(log.entries({ from: 3 })))).toBe('log_corrupt');
    await log.close();
  });
});

describe('decodeCheckpoint', () => {
  it('parses a checkpoint line and checks its signature against a key', () => {
    const keys = generateSigningKeys();
    const other = generateSigningKeys();
    const fields = { entries: 2, head: 'c'.repeat(64), segment: 1, offset: 300, time: T0.toISOString() };
    const signed = encodeCheckpoint(fields, { signingKey: keys.privateKey });
    expect(decodeCheckpoint(signed.line)).toEqual({ ok: true, checkpoint: signed.checkpoint, signature: 'unchecked' });
    expect(decodeCheckpoint(signed.line, { publicKey: keys.publicKey })).toMatchObject({ ok: true, signature: 'valid' });
    expect(decodeCheckpoint(signed.line, { publicKey: other.publicKey })).toMatchObject({ ok: true, signature: 'other_key' });
    const altered = signed.line.replace('"entries":2', '"entries":3');
    expect(decodeCheckpoint(altered, { publicKey: keys.publicKey })).toMatchObject({ ok: true, signature: 'invalid' });
    expect(decodeCheckpoint(encodeCheckpoint(fields).line, { publicKey: keys.publicKey })).toMatchObject({ signature: 'other_key' });
    expect(decodeCheckpoint('{"entries":1}')).toMatchObject({ ok: false });
  });
});
