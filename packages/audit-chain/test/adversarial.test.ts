/**
 * Adversarial tests: every way of damaging the files of a log (SPEC.md sections 4, 5 and 9) must
 * be reported at the right entry, line, file and with the right reason. Real files, no mocks.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { appendFile, copyFile, readFile, rename, rm, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { scaled } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import {
  type AuditLog,
  type FirstBad,
  GENESIS_HASH,
  generateSigningKeys,
  type JsonValue,
  logTree,
  openAuditLog,
  tailLog,
  VERIFY_REASONS,
  type VerifyReason,
  verifyLog,
  verifyTiles,
} from '../src/index.js';
import { tempDir } from './helpers.js';

// ---- helpers: the on-disk format, written from SPEC.md section 2 alone --------------------------

/** `,"hash":"` + 64 hex + `"}` + `\n` (SPEC.md 2.1). */
const SUFFIX = 76;
const NL = 0x0a;

function sha256(data: Uint8Array | string): string {
  return createHash('sha256').update(data).digest('hex');
}

/** The lines of a segment, each with its final line feed (a torn last line is kept as is). */
function splitLines(buf: Buffer): Buffer[] {
  const out: Buffer[] = [];
  let start = 0;
  while (start < buf.length) {
    const nl = buf.indexOf(NL, start);
    const end = nl < 0 ? buf.length : nl + 1;
    out.push(buf.subarray(start, end));
    start = end;
  }
  return out;
}

/** The hash stored in a line's suffix. */
function hashOf(line: Buffer): string {
  return line.toString('latin1', line.length - SUFFIX + 9, line.length - 3);
}

/** A complete entry line for `body` (everything before the suffix). */
function lineFromBody(body: Buffer | string): Buffer {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(body);
  return Buffer.concat([b, Buffer.from(`,"hash":"${sha256(b)}"}\n`)]);
}

/** An entry line built from its fields exactly as section 2 shows (data as `JSON.stringify` writes it). */
function entryLine(seq: number, ts: string, type: string, data: JsonValue, prev: string): Buffer {
  return lineFromBody(`{"seq":${seq},"ts":"${ts}","type":"${type}","data":${JSON.stringify(data)},"prev":"${prev}"`);
}

/** The same line with its `prev` replaced, and its hash recomputed. */
function relink(line: Buffer, prev: string): Buffer {
  const body = line.subarray(0, line.length - SUFFIX);
  // The body ends with `"prev":"<64 hex>"`: the hex digits are the 65th to 2nd bytes from its end.
  return lineFromBody(Buffer.concat([body.subarray(0, body.length - 65), Buffer.from(`${prev}"`)]));
}

interface ParsedEntry {
  seq: number;
  ts: string;
  type: string;
  data: JsonValue;
  prev: string;
  hash: string;
}

function parse(line: Buffer): ParsedEntry {
  return JSON.parse(line.toString('utf8')) as ParsedEntry;
}

/**
 * What an attacker without the signing key can do (SPEC.md section 9): replace entry `seq`'s data,
 * then recompute `hash` (SHA-256 of the line minus its last 76 bytes) and `prev` of the edited
 * entry and of every later one, so the chain is self-consistent again. Single-segment logs.
 */
function editAndRehash(lines: Buffer[], seq: number, data: JsonValue): Buffer[] {
  const out = lines.slice();
  const idx = seq - 1;
  const e = parse(out[idx] as Buffer);
  out[idx] = entryLine(e.seq, e.ts, e.type, data, e.prev);
  for (let i = idx + 1; i < out.length; i++) out[i] = relink(out[i] as Buffer, hashOf(out[i - 1] as Buffer));
  return out;
}

/**
 * Rewrites every checkpoint line so it agrees with `lines` (a single-segment log): `head` is the
 * hash of entry `entries`, `offset` the byte length through that entry. Signatures are kept as
 * they are (an attacker without the key cannot recompute them).
 */
function rewriteCheckpoints(text: string, lines: Buffer[]): string {
  const ends: number[] = [];
  let off = 0;
  for (const l of lines) ends.push((off += l.length));
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => {
      const cp = JSON.parse(l) as Record<string, unknown>;
      const n = cp.entries as number;
      cp.head = n === 0 ? GENESIS_HASH : hashOf(lines[n - 1] as Buffer);
      cp.offset = n === 0 ? 0 : ends[n - 1];
      return `${JSON.stringify(cp)}\n`;
    })
    .join('');
}

/** Small deterministic PRNG (mulberry32), so a failing iteration can be replayed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Varied entry data: nested values, numbers, escapes and non-ASCII text (2-, 3- and 4-byte UTF-8). */
function sampleData(i: number): JsonValue {
  switch (i % 8) {
    case 0:
      return { user: 'josé', n: i, ok: true };
    case 1:
      return ['日本語のテキスト', i, null, false, -1.5e-7];
    case 2:
      return `emoji 😀🎉 #${i}`;
    case 3:
      return { nested: { deep: [1, 2, { ü: 'Grüße', ключ: 'значение' }] }, f: 0.25 };
    case 4:
      return i;
    case 5:
      return null;
    case 6:
      return `control\nchars\t"quoted" \\ back\u0001slash ${i}`;
    default:
      return { arr: Array.from({ length: i % 5 }, (_, k) => k * i), s: 'ελληνικά', empty: {} };
  }
}

async function appendMany(log: AuditLog, n: number, type = 'test.event', from = 0): Promise<void> {
  await Promise.all(Array.from({ length: n }, (_, i) => log.append(type, sampleData(from + i))));
}

async function newLog(n: number, options: Parameters<typeof openAuditLog>[1] = {}): Promise<{ dir: string; path: string }> {
  const dir = await tempDir();
  const path = join(dir, 'audit.log');
  const log = await openAuditLog(path, options);
  await appendMany(log, n);
  await log.close();
  return { dir, path };
}

async function readLines(path: string): Promise<Buffer[]> {
  return splitLines(await readFile(path));
}

async function writeLines(path: string, lines: Buffer[]): Promise<void> {
  await writeFile(path, Buffer.concat(lines));
}

/** `first_bad` without the human message, for exact comparison. */
function where(b: FirstBad | undefined): Omit<FirstBad, 'message'> | undefined {
  if (!b) return undefined;
  const { message: _message, ...rest } = b;
  return rest;
}

// ---- random single-byte flips -------------------------------------------------------------------

describe('random single-byte flips', () => {
  it('detect every flip at the entry and line holding the byte (≥ 3000 flips of a 200-entry log)', {
    // Thousands of verifications: minutes on a loaded 2-core machine, never a fixed budget to race.
    timeout: scaled(600_000),
  }, async () => {
    const { dir, path } = await newLog(200);
    const original = await readFile(path);
    const lines = splitLines(original);
    expect(lines).toHaveLength(200);
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 200 });

    // lineOf[offset] = 0-based index of the line holding that byte, computed from the original.
    const lineOf = new Uint16Array(original.length);
    const starts: number[] = [];
    let off = 0;
    for (const [i, l] of lines.entries()) {
      starts.push(off);
      lineOf.fill(i, off, off + l.length);
      off += l.length;
    }

    /**
     * The reason SPEC.md section 4 gives for byte `offset` set to `value` (checks in their order):
     * - the final '\n' of the last line: the line is now the last bytes of `L` without a line feed
     *   → torn_tail (check 1), at that entry;
     * - the '\n' of any other line: the line runs on into the next one and ends with that one's
     *   suffix, whose hash is not the hash of the merged body → hash_mismatch;
     * - any other byte turned into '\n': the line is cut in two and its first part does not end
     *   with the 76-byte suffix (or is shorter than 77 bytes) → bad_json (check 2);
     * - a body byte (before the last 76): the suffix is intact, the body's SHA-256 changes
     *   → hash_mismatch (check 3 comes before the shape check 4, so even a flip that breaks the
     *   JSON or the UTF-8 is a hash mismatch);
     * - a hex digit of the stored hash: another lowercase hex digit leaves the suffix well-formed
     *   → hash_mismatch; anything else breaks the suffix shape → bad_json;
     * - the other suffix bytes (`,"hash":"` and `"}`) → bad_json.
     */
    const expectedReason = (offset: number, value: number): VerifyReason => {
      const i = lineOf[offset] as number;
      const end = (starts[i] as number) + (lines[i] as Buffer).length; // exclusive
      if (offset === end - 1) return i === lines.length - 1 ? 'torn_tail' : 'hash_mismatch';
      if (value === NL) return 'bad_json';
      if (offset < end - SUFFIX) return 'hash_mismatch';
      const hexFrom = end - SUFFIX + 9;
      const isHexPos = offset >= hexFrom && offset < hexFrom + 64;
      const isLowerHex = (value >= 0x30 && value <= 0x39) || (value >= 0x61 && value <= 0x66);
      return isHexPos && isLowerHex ? 'hash_mismatch' : 'bad_json';
    };

    const seed = Number(process.env.AUDIT_FUZZ_SEED ?? 0x5eed_c0de);
    const random = rng(seed);
    const cases: { offset: number; value: number }[] = [];
    // The boundary cases first, whatever the random draw: first and last byte of the file, every
    // kind of line feed damage, the suffix, and a multi-byte UTF-8 character.
    const last = original.length - 1;
    const line100 = starts[99] as number;
    const end100 = line100 + (lines[99] as Buffer).length;
    cases.push(
      { offset: 0, value: 0x5b },
      { offset: 0, value: NL },
      { offset: last, value: 0x20 },
      { offset: last, value: 0x00 },
      { offset: end100 - 1, value: 0x20 },
      { offset: end100 - 2, value: NL },
      { offset: end100 - 3, value: 0x27 },
      { offset: end100 - SUFFIX, value: 0x3b },
      { offset: end100 - SUFFIX + 9, value: original[end100 - SUFFIX + 9] === 0x61 ? 0x62 : 0x61 },
      { offset: end100 - SUFFIX + 9, value: 0x41 },
      { offset: end100 - SUFFIX + 72, value: 0x47 },
      { offset: line100 + 5, value: 0x20 },
      { offset: original.indexOf(Buffer.from('😀')) + 1, value: 0x80 },
      { offset: original.indexOf(Buffer.from('日本語')), value: 0x41 },
    );
    while (cases.length < 3200) {
      const offset = Math.floor(random() * original.length);
      // A random different byte value: 1–255 added modulo 256.
      const value = ((original[offset] as number) + 1 + Math.floor(random() * 255)) & 0xff;
      cases.push({ offset, value });
    }

    const target = join(dir, 'flipped.log');
    const copy = Buffer.from(original);
    const wrong: string[] = [];
    const seen = new Set<VerifyReason>();
    for (const { offset, value } of cases) {
      const was = copy[offset] as number;
      expect(value).not.toBe(was);
      copy[offset] = value;
      await writeFile(target, copy);
      copy[offset] = was;
      const r = await verifyLog(target);
      const i = lineOf[offset] as number;
      const want = { seq: i + 1, line: i + 1, reason: expectedReason(offset, value), file: 'flipped.log' };
      const got = where(r.first_bad);
      seen.add(got?.reason as VerifyReason);
      if (r.ok || JSON.stringify(got) !== JSON.stringify(want) || r.entries !== i) {
        wrong.push(
          `seed ${seed} offset ${offset} ${was}→${value}: want ${JSON.stringify(want)}, entries ${i}; got ok=${r.ok} ${JSON.stringify(got)}, entries ${r.entries}`,
        );
      }
    }
    expect(wrong.slice(0, 10)).toEqual([]);
    expect(wrong).toHaveLength(0);
    // The draw exercised every reason a single flip can produce.
    expect([...seen].sort()).toEqual(['bad_json', 'hash_mismatch', 'torn_tail']);
    expect(VERIFY_REASONS).toEqual(expect.arrayContaining([...seen]));
  });
});

// ---- deleted, repeated, reordered, inserted and spliced entries ---------------------------------

describe('structural tampering', () => {
  it('a deleted line is a seq_gap at its position', async () => {
    const { path } = await newLog(10);
    const lines = await readLines(path);
    await writeLines(path, lines.toSpliced(3, 1));
    const r = await verifyLog(path);
    expect(r.ok).toBe(false);
    expect(where(r.first_bad)).toEqual({ seq: 4, line: 4, reason: 'seq_gap', file: 'audit.log' });
    expect(r.entries).toBe(3);
    expect(r.head).toBe(hashOf(lines[2] as Buffer));
  });

  it('deleting the first line is a seq_gap at entry 1', async () => {
    const { path } = await newLog(5);
    await writeLines(path, (await readLines(path)).slice(1));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 1, line: 1, reason: 'seq_gap', file: 'audit.log' });
    expect(r).toMatchObject({ ok: false, entries: 0, head: GENESIS_HASH });
  });

  it('a duplicated line is a seq_gap at the copy', async () => {
    const { path } = await newLog(10);
    const lines = await readLines(path);
    await writeLines(path, lines.toSpliced(5, 0, lines[4] as Buffer));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 6, line: 6, reason: 'seq_gap', file: 'audit.log' });
    expect(r.entries).toBe(5);
  });

  it('two swapped adjacent lines are a seq_gap at the first of them', async () => {
    const { path } = await newLog(10);
    const lines = await readLines(path);
    const swapped = lines.slice();
    [swapped[6], swapped[7]] = [lines[7] as Buffer, lines[6] as Buffer];
    await writeLines(path, swapped);
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 7, line: 7, reason: 'seq_gap', file: 'audit.log' });
    expect(r.entries).toBe(6);
  });

  it('an inserted foreign entry is a seq_gap where its seq does not fit', async () => {
    const { path } = await newLog(10);
    const other = await newLog(10);
    const lines = await readLines(path);
    const foreign = (await readLines(other.path))[8] as Buffer; // seq 9 of another log
    await writeLines(path, lines.toSpliced(3, 0, foreign));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 4, line: 4, reason: 'seq_gap', file: 'audit.log' });
  });

  it('an inserted entry with the expected seq but a foreign prev is a broken_link', async () => {
    const { path } = await newLog(10);
    const lines = await readLines(path);
    const forged = entryLine(4, '2026-01-01T00:00:00.000Z', 'test.forged', { by: 'mallory' }, 'ab'.repeat(32));
    await writeLines(path, lines.toSpliced(3, 0, forged));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 4, line: 4, reason: 'broken_link', file: 'audit.log' });
    expect(r.entries).toBe(3);
  });

  it('an inserted entry forged to chain correctly shifts the next one: seq_gap after it', async () => {
    const { path } = await newLog(10);
    const lines = await readLines(path);
    // Seq 4, linked to entry 3: the forgery itself passes checks 1–6 …
    const forged = entryLine(4, '2026-01-01T00:00:00.000Z', 'test.forged', { by: 'mallory' }, hashOf(lines[2] as Buffer));
    await writeLines(path, lines.toSpliced(3, 0, forged));
    const r = await verifyLog(path);
    // … but the original entry 4, now on line 5, is where entry 5 should be.
    expect(where(r.first_bad)).toEqual({ seq: 5, line: 5, reason: 'seq_gap', file: 'audit.log' });
    expect(r.entries).toBe(4);
    expect(r.head).toBe(hashOf(forged));
  });

  it('an inserted line that is not an entry is bad_json', async () => {
    const { path } = await newLog(10);
    const lines = await readLines(path);
    await writeLines(path, lines.toSpliced(3, 0, Buffer.from('{"note":"just a comment"}\n')));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 4, line: 4, reason: 'bad_json', file: 'audit.log' });
  });

  it('an entry spliced in from another log at the same seq is a broken_link', async () => {
    const { path } = await newLog(10);
    const other = await newLog(10);
    const lines = await readLines(path);
    const foreign = (await readLines(other.path))[5] as Buffer; // seq 6 of the other log
    expect(parse(foreign).seq).toBe(6);
    await writeLines(path, lines.toSpliced(5, 1, foreign));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 6, line: 6, reason: 'broken_link', file: 'audit.log' });
    expect(r.entries).toBe(5);
  });

  it('splicing entry 1 from another log is detected at entry 2 (both entries 1 link to genesis)', async () => {
    // Entry 1 of every log has the genesis prev, so a foreign entry 1 passes checks 1–6 on its own
    // line: nothing before it can disagree. The splice shows at entry 2, whose prev is the hash
    // of the original entry 1.
    const { path } = await newLog(10);
    const other = await newLog(10);
    const lines = await readLines(path);
    const foreign = (await readLines(other.path))[0] as Buffer;
    expect(parse(foreign)).toMatchObject({ seq: 1, prev: GENESIS_HASH });
    expect(hashOf(foreign)).not.toBe(hashOf(lines[0] as Buffer));
    await writeLines(path, lines.toSpliced(0, 1, foreign));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 2, line: 2, reason: 'broken_link', file: 'audit.log' });
    expect(r.entries).toBe(1);
    expect(r.head).toBe(hashOf(foreign));
  });

  it('the verifier hashes the bytes as written: re-encoding equivalent JSON is a hash_mismatch', async () => {
    const { path } = await newLog(5);
    const lines = await readLines(path);
    const l = (lines[2] as Buffer).toString('utf8');
    // Same JSON value, one more space in the data: a different body.
    const spaced = Buffer.from(l.replace('"data":', '"data": '));
    expect(JSON.parse(spaced.toString())).toEqual(JSON.parse(l));
    await writeLines(path, lines.toSpliced(2, 1, spaced));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 3, line: 3, reason: 'hash_mismatch', file: 'audit.log' });
  });
});

// ---- truncation -----------------------------------------------------------------------------

describe('truncation', () => {
  async function checkpointed(n: number): Promise<{ path: string; lines: Buffer[] }> {
    const { path } = await newLog(n);
    const log = await openAuditLog(path);
    const cp = await log.checkpoint();
    await log.close();
    expect(cp).toMatchObject({ entries: n, segment: 1 });
    return { path, lines: await readLines(path) };
  }

  const bytesThrough = (lines: Buffer[], n: number) => lines.slice(0, n).reduce((s, l) => s + l.length, 0);

  it('a cut at a line boundary below the checkpoint is truncated, one past the last remaining entry', async () => {
    const { path, lines } = await checkpointed(100);
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 100, uncheckpointed: 0 });
    await truncate(path, bytesThrough(lines, 60));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 61, line: 61, reason: 'truncated', file: 'audit.log' });
    expect(r).toMatchObject({ ok: false, entries: 60, head: hashOf(lines[59] as Buffer) });
  });

  it('a cut inside a line covered by the checkpoint is truncated, not torn_tail', async () => {
    const { path, lines } = await checkpointed(100);
    await truncate(path, bytesThrough(lines, 60) + 40);
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 61, line: 61, reason: 'truncated', file: 'audit.log' });
    expect(r.entries).toBe(60);
  });

  it('losing only the final line feed of a checkpointed entry is truncated', async () => {
    const { path, lines } = await checkpointed(100);
    await truncate(path, bytesThrough(lines, 100) - 1);
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 100, line: 100, reason: 'truncated', file: 'audit.log' });
  });

  it('an emptied log with a checkpoint is truncated at entry 1', async () => {
    const { path } = await checkpointed(10);
    await truncate(path, 0);
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 1, line: 1, reason: 'truncated', file: 'audit.log' });
    expect(r).toMatchObject({ entries: 0, head: GENESIS_HASH });
  });

  it('without a checkpoint, a mid-line cut is torn_tail and a line-boundary cut is undetectable', async () => {
    const { path } = await newLog(100);
    const lines = await readLines(path);
    await truncate(path, bytesThrough(lines, 60) + 40);
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 61, line: 61, reason: 'torn_tail', file: 'audit.log' });
    expect(r.entries).toBe(60);
    await truncate(path, bytesThrough(lines, 60));
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 60, head: hashOf(lines[59] as Buffer) });
  });

  it('entries appended after the checkpoint may be cut without detection (not yet checkpointed)', async () => {
    const { path } = await checkpointed(50);
    const log = await openAuditLog(path);
    await appendMany(log, 10);
    await log.close();
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 60, uncheckpointed: 10 });
    const lines = await readLines(path);
    await truncate(path, bytesThrough(lines, 55));
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 55, uncheckpointed: 5 });
  });
});

// ---- rollback -------------------------------------------------------------------------------

describe('rollback', () => {
  async function setup() {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const old = join(dir, 'old-copy.log');
    const log = await openAuditLog(path);
    await appendMany(log, 50);
    await log.flush();
    await copyFile(path, old);
    await appendMany(log, 50, 'test.later', 50);
    const cp = await log.checkpoint();
    await log.close();
    expect(cp.entries).toBe(100);
    return { path, old, cp };
  }

  it('restoring an older copy (not appended to) is truncated: indistinguishable from a cut', async () => {
    // The old copy is a byte-exact prefix of the checkpointed log, so the verifier sees exactly
    // what a truncation at entry 50 would leave: the log is shorter than the checkpoint.
    const { path, old } = await setup();
    await copyFile(old, path);
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 51, line: 51, reason: 'truncated', file: 'audit.log' });
    expect(r.entries).toBe(50);
  });

  it('the writer refuses by default to append to a restored older copy', async () => {
    const { path, old } = await setup();
    await copyFile(old, path);
    await expect(openAuditLog(path)).rejects.toMatchObject({ name: 'AuditError', code: 'log_behind_checkpoint' });
  });

  it('a restored copy appended to past the checkpoint is rollback at the checkpointed entry', async () => {
    const { path, old } = await setup();
    await copyFile(old, path);
    const log = await openAuditLog(path, { checkCheckpoint: false });
    const restoredData = (i: number) => ({ restored: true, i });
    for (let i = 0; i < 10; i++) await log.append('test.after_restore', restoredData(i));
    await log.flush();
    // 60 entries, fewer than the checkpoint's 100: still "shorter than the checkpoint".
    let r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 61, line: 61, reason: 'truncated', file: 'audit.log' });
    // Once the other history reaches the checkpointed entry, it is a different history there.
    await Promise.all(Array.from({ length: 50 }, (_, i) => log.append('test.after_restore', restoredData(10 + i))));
    await log.close();
    r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 100, line: 100, reason: 'rollback', file: 'audit.log' });
    expect(r.entries).toBe(99);
    // And a default writer now refuses the rolled-back log too.
    await expect(openAuditLog(path)).rejects.toMatchObject({ code: 'log_behind_checkpoint' });
  });

  it('a restored copy appended to with checkCheckpoint: false, checkpointed before the copy diverged, is rollback', async () => {
    // The same attack with the checkpoint at 55 entries: restoring the 50-entry copy and
    // appending 10 entries reaches past the checkpoint, so entry 55 differs from it.
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const old = join(dir, 'old-copy.log');
    const log = await openAuditLog(path);
    await appendMany(log, 50);
    await log.flush();
    await copyFile(path, old);
    await appendMany(log, 5, 'test.later');
    expect((await log.checkpoint()).entries).toBe(55);
    await log.close();
    await copyFile(old, path);
    await expect(openAuditLog(path)).rejects.toMatchObject({ code: 'log_behind_checkpoint' });
    const writer = await openAuditLog(path, { checkCheckpoint: false });
    for (let i = 0; i < 10; i++) await writer.append('test.after_restore', { restored: i });
    await writer.close();
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 55, line: 55, reason: 'rollback', file: 'audit.log' });
    expect(r.entries).toBe(54);
  });
});

// ---- edit an entry and rehash the rest --------------------------------------------------------

describe('edit and rehash the rest', () => {
  /** 30 entries, checkpoint at 20 (signed when a key is given), 10 more entries. */
  async function setup(signingKey?: string) {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const log = await openAuditLog(path, signingKey ? { signingKey } : {});
    await appendMany(log, 20);
    const cp = await log.checkpoint();
    await appendMany(log, 10, 'test.more', 20);
    await log.close();
    expect(cp.entries).toBe(20);
    const lines = await readLines(path);
    // Entry 5's data gets longer, so every later byte offset moves too.
    const forged = editAndRehash(lines, 5, { amount: 1_000_000, note: 'rewritten by mallory' });
    expect(parse(forged[4] as Buffer).data).toEqual({ amount: 1_000_000, note: 'rewritten by mallory' });
    return { dir, path, cps: `${path}.checkpoints`, lines, forged, cp };
  }

  it('the helper produces a log that verifies on its own (no checkpoint)', async () => {
    const { path, cps, forged } = await setup();
    await writeLines(path, forged);
    await rm(cps);
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 30, head: hashOf(forged[29] as Buffer) });
  });

  it('documented limit: without a key, rewriting the checkpoint file consistently too verifies ok', async () => {
    // SPEC.md section 9: an attacker who can rewrite both the log and the checkpoint file can
    // replace the history with any self-consistent one; nothing in the files can tell.
    const { path, cps, forged } = await setup();
    await writeLines(path, forged);
    await writeFile(cps, rewriteCheckpoints(await readFile(cps, 'utf8'), forged));
    const r = await verifyLog(path);
    expect(r.first_bad).toBeUndefined();
    expect(r).toMatchObject({ ok: true, entries: 30, head: hashOf(forged[29] as Buffer), uncheckpointed: 10 });
    expect(r.checkpoint).toMatchObject({ entries: 20, head: hashOf(forged[19] as Buffer), signed: false });
  });

  it('without a key, leaving the checkpoint file alone is rollback at the checkpointed entry', async () => {
    const { path, forged } = await setup();
    await writeLines(path, forged);
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 20, line: 20, reason: 'rollback', file: 'audit.log' });
    expect(r.entries).toBe(19);
  });

  it('rewriting only the checkpoint head (not the offset) is still rollback', async () => {
    const { path, cps, lines, forged } = await setup();
    await writeLines(path, forged);
    // The attacker updates head but keeps the old offset: entry 20 now ends elsewhere.
    const honest = rewriteCheckpoints(await readFile(cps, 'utf8'), lines);
    await writeFile(cps, honest.replace(hashOf(lines[19] as Buffer), hashOf(forged[19] as Buffer)));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 20, line: 20, reason: 'rollback', file: 'audit.log' });
  });

  it('edits after the latest checkpoint are not detected, and are reported as not yet checkpointed', async () => {
    const { path, lines } = await setup();
    await writeLines(path, editAndRehash(lines, 25, 'changed after the checkpoint'));
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 30, uncheckpointed: 10 });
  });

  it('with a signed checkpoint, rewriting its head is signature_invalid', async () => {
    const keys = generateSigningKeys();
    const { path, cps, forged } = await setup(keys.privateKey);
    expect(await verifyLog(path, { publicKey: keys.publicKey })).toMatchObject({ ok: true, entries: 30, checkpoints_ignored: 0 });
    await writeLines(path, forged);
    await writeFile(cps, rewriteCheckpoints(await readFile(cps, 'utf8'), forged));
    const r = await verifyLog(path, { publicKey: keys.publicKey });
    expect(where(r.first_bad)).toEqual({ seq: 20, line: 1, reason: 'signature_invalid', file: 'audit.log.checkpoints' });
    // Checkpoint faults come before the walk: nothing verified.
    expect(r).toMatchObject({ ok: false, entries: 0, head: GENESIS_HASH });
    // Without the key the rewritten files pass (the documented limit): the signature is what catches it.
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 30 });
  });

  it('with a signed checkpoint left alone, the rehashed log is rollback', async () => {
    const keys = generateSigningKeys();
    const { path, forged } = await setup(keys.privateKey);
    await writeLines(path, forged);
    const r = await verifyLog(path, { publicKey: keys.publicKey });
    expect(where(r.first_bad)).toEqual({ seq: 20, line: 20, reason: 'rollback', file: 'audit.log' });
  });

  it('with a key, deleting the checkpoint file is signature_invalid: no checkpoint signed', async () => {
    const keys = generateSigningKeys();
    const { path, cps, forged } = await setup(keys.privateKey);
    await writeLines(path, forged);
    await rm(cps);
    const r = await verifyLog(path, { publicKey: keys.publicKey });
    expect(where(r.first_bad)).toEqual({ seq: 0, line: 0, reason: 'signature_invalid', file: 'audit.log.checkpoints' });
    expect(r.first_bad?.message).toMatch(/no checkpoint signed/);
    expect(r).toMatchObject({ ok: false, entries: 0, head: GENESIS_HASH });
  });

  it('with a key, an unsigned checkpoint appended by the attacker is ignored and counted', async () => {
    const keys = generateSigningKeys();
    const { path, cps, forged } = await setup(keys.privateKey);
    await writeLines(path, forged);
    // A consistent, unsigned checkpoint of the forged history, appended after the signed one.
    const fake = rewriteCheckpoints(await readFile(cps, 'utf8'), forged)
      .replace(/,"key_id":"[0-9a-f]{16}","sig":"[^"]*"/, '')
      .replace('"entries":20', '"entries":30')
      .replace(/"head":"[0-9a-f]{64}"/, `"head":"${hashOf(forged[29] as Buffer)}"`)
      .replace(/"offset":\d+/, `"offset":${Buffer.concat(forged).length}`);
    await appendFile(cps, fake);
    const r = await verifyLog(path, { publicKey: keys.publicKey });
    expect(where(r.first_bad)).toEqual({ seq: 20, line: 20, reason: 'rollback', file: 'audit.log' });
    expect(r.checkpoints_ignored).toBe(1);
  });

  it('with a key, an honest unsigned checkpoint is ignored and counted; the signed one still anchors', async () => {
    const keys = generateSigningKeys();
    const { path } = await setup(keys.privateKey);
    const log = await openAuditLog(path);
    await log.checkpoint(); // unsigned, at 30 entries
    await log.close();
    const r = await verifyLog(path, { publicKey: keys.publicKey });
    expect(r).toMatchObject({ ok: true, entries: 30, checkpoints_ignored: 1, uncheckpointed: 10 });
    expect(r.checkpoint).toMatchObject({ entries: 20, signed: true });
    // Without the key every checkpoint is used: the latest is the unsigned one.
    expect(await verifyLog(path)).toMatchObject({ ok: true, checkpoints_ignored: 0, uncheckpointed: 0 });
  });

  it('a FIFO in place of the log or of a sealed segment is refused by every reader and the writer, naming it, never waited on', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const log = await openAuditLog(path);
    await log.append('t.write', { i: 1 });
    await log.rotate();
    await log.append('t.write', { i: 2 });
    await log.close();
    const notRegular = expect.stringMatching(/is not a regular file/);
    for (const victim of [path, join(dir, 'audit.log.000001')]) {
      const bytes = await readFile(victim);
      await rm(victim);
      expect(spawnSync('mkfifo', [victim]).status).toBe(0);
      if (victim === path) await expect(openAuditLog(path)).rejects.toMatchObject({ code: 'io_error', message: notRegular });
      await expect(verifyLog(path)).rejects.toMatchObject({ message: notRegular });
      await expect(logTree(path)).rejects.toMatchObject({ message: notRegular });
      expect(await verifyTiles(path)).toMatchObject({ ok: false, first_bad: { reason: notRegular } });
      await expect(
        (async () => {
          for await (const _ of tailLog(path)) {
          }
        })(),
      ).rejects.toMatchObject({ message: notRegular });
      await rm(victim);
      await writeFile(victim, bytes);
    }
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 4 });
  });

  it('with a key, a FIFO where the anchor file goes refuses the log’s opening, naming it, instead of waiting on it', async () => {
    const keys = generateSigningKeys();
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const anchorFile = join(dir, 'anchor');
    const log = await openAuditLog(path, { signingKey: keys.privateKey, anchorFile });
    await log.append('t.write', {});
    await log.checkpoint();
    await log.close();
    await rm(anchorFile);
    expect(spawnSync('mkfifo', [anchorFile]).status).toBe(0);
    await expect(openAuditLog(path, { signingKey: keys.privateKey, anchorFile })).rejects.toMatchObject({
      code: 'io_error',
      message: expect.stringMatching(/cannot read the audit anchor .*anchor: .*is not a regular file/),
    });
  });

  it('with a key, checkpoints signed only by another key mean no checkpoint signed by this key', async () => {
    const keys = generateSigningKeys();
    const other = generateSigningKeys();
    const { path } = await setup(other.privateKey);
    const r = await verifyLog(path, { publicKey: keys.publicKey });
    expect(where(r.first_bad)).toEqual({ seq: 0, line: 0, reason: 'signature_invalid', file: 'audit.log.checkpoints' });
    expect(r.checkpoints_ignored).toBe(1);
  });
});

// ---- checkpoint file damage -------------------------------------------------------------------

describe('checkpoint file damage', () => {
  async function setup() {
    const { path } = await newLog(10);
    const log = await openAuditLog(path);
    await log.checkpoint();
    await log.close();
    return { path, cps: `${path}.checkpoints` };
  }

  it.each([
    ['not JSON', 'garbage\n'],
    ['an empty line', '\n'],
    ['a missing field', '{"entries":5}\n'],
    ['an unknown field', `{"entries":0,"head":"${GENESIS_HASH}","segment":1,"offset":0,"time":"2026-01-01T00:00:00.000Z","by":"x"}\n`],
    ['uppercase hex', `{"entries":1,"head":"${'A'.repeat(64)}","segment":1,"offset":5,"time":"2026-01-01T00:00:00.000Z"}\n`],
    [
      'a sig without key_id',
      `{"entries":0,"head":"${GENESIS_HASH}","segment":1,"offset":0,"time":"2026-01-01T00:00:00.000Z","sig":"${'A'.repeat(86)}=="}\n`,
    ],
  ])('a malformed complete line (%s) is bad_checkpoint at that line', async (_what, junk) => {
    const { path, cps } = await setup();
    await appendFile(cps, junk);
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 0, line: 2, reason: 'bad_checkpoint', file: 'audit.log.checkpoints' });
    expect(r).toMatchObject({ ok: false, entries: 0, head: GENESIS_HASH });
  });

  it('bad_checkpoint comes before chain faults', async () => {
    const { path, cps } = await setup();
    const lines = await readLines(path);
    await writeLines(path, lines.toSpliced(2, 1));
    await writeFile(cps, `junk\n${await readFile(cps, 'utf8')}`);
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 0, line: 1, reason: 'bad_checkpoint', file: 'audit.log.checkpoints' });
  });

  it('a torn last line (no line feed) is an interrupted write and is ignored', async () => {
    const { path, cps } = await setup();
    const text = await readFile(cps, 'utf8');
    await appendFile(cps, text.slice(0, 30));
    const r = await verifyLog(path);
    expect(r).toMatchObject({ ok: true, entries: 10, uncheckpointed: 0 });
    expect(r.checkpoint?.entries).toBe(10);
    // A writer ignores it as well.
    const log = await openAuditLog(path);
    await log.append('test.after', null);
    await log.close();
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 11 });
  });
});

// ---- rotation ---------------------------------------------------------------------------------

describe('rotation', () => {
  /**
   * `rotations` rotations with 5 entries before each and 5 after the last. Segment 1 holds
   * entries 1–5 and its seal (6); each later sealed segment its header, 5 entries and its seal.
   */
  async function rotated(rotations: number, after = 5) {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const log = await openAuditLog(path);
    for (let i = 0; i < rotations; i++) {
      await appendMany(log, 5);
      await log.rotate();
    }
    await appendMany(log, after);
    await log.close();
    return { dir, path, seg: (n: number) => join(dir, `audit.log.${String(n).padStart(6, '0')}`) };
  }

  it('two rotations verify ok with 3 segments, and a sealed segment starts and ends as specified', async () => {
    const { path, seg } = await rotated(2);
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 19, segments: 3 });
    const s2 = (await readLines(seg(2))).map(parse);
    expect(s2.map((e) => e.seq)).toEqual([7, 8, 9, 10, 11, 12, 13]);
    expect(s2[0]).toMatchObject({ type: 'audit.segment', data: { segment: 2, previous: 'audit.log.000001' } });
    expect(s2[6]).toMatchObject({ type: 'audit.sealed', data: { segment: 2 } });
    expect((await readLines(path)).map(parse)[0]).toMatchObject({ seq: 14, type: 'audit.segment', prev: s2[6]?.hash });
  });

  it('a missing sealed segment before another sealed one is segment_missing (line 0, naming it)', async () => {
    const { path, seg } = await rotated(3);
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 26, segments: 4 });
    await rm(seg(2));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 7, line: 0, reason: 'segment_missing', file: 'audit.log.000002' });
    expect(r).toMatchObject({ ok: false, entries: 6 });
  });

  it('a missing first segment is segment_missing at entry 1', async () => {
    const { path, seg } = await rotated(2);
    await rm(seg(1));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 1, line: 0, reason: 'segment_missing', file: 'audit.log.000001' });
    expect(r).toMatchObject({ entries: 0, head: GENESIS_HASH });
  });

  it('deleting the middle of 3 segments (the newest sealed one) is segment_missing at the active segment', async () => {
    // With two rotations the middle segment is also the newest sealed one. Without it the sealed
    // numbers are exactly 1…1 (no gap), so `L` is segment 2, and its first entry is the header of
    // segment 3: step 5 of SPEC.md section 4 reports it at that line, before the seq check.
    const { path, seg } = await rotated(2);
    await rm(seg(2));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 7, line: 1, reason: 'segment_missing', file: 'audit.log' });
    expect(r.entries).toBe(6);
  });

  it('deleting every sealed segment is segment_missing: segment 1 starts with a header', async () => {
    const { path, seg } = await rotated(2);
    await rm(seg(1));
    await rm(seg(2));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 1, line: 1, reason: 'segment_missing', file: 'audit.log' });
    expect(r).toMatchObject({ entries: 0, head: GENESIS_HASH });
  });

  it("a sealed segment that lost its last line is truncated, one line past the segment's end", async () => {
    const { path, seg } = await rotated(2);
    const lines = await readLines(seg(1));
    expect(parse(lines[5] as Buffer)).toMatchObject({ seq: 6, type: 'audit.sealed' });
    await writeLines(seg(1), lines.slice(0, 5));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 6, line: 6, reason: 'truncated', file: 'audit.log.000001' });
    expect(r.entries).toBe(5);
  });

  it('a sealed segment cut inside its last line is bad_json (sealed segments are never torn)', async () => {
    const { path, seg } = await rotated(2);
    const lines = await readLines(seg(2));
    await writeLines(seg(2), [...lines.slice(0, 6), (lines[6] as Buffer).subarray(0, 50)]);
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 13, line: 7, reason: 'bad_json', file: 'audit.log.000002' });
  });

  it('a sealed segment emptied of all entries is truncated at its line 1', async () => {
    const { path, seg } = await rotated(2);
    await writeFile(seg(2), '');
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 7, line: 1, reason: 'truncated', file: 'audit.log.000002' });
  });

  it('renaming a segment so the numbering has a gap is segment_missing', async () => {
    const { path, seg } = await rotated(2);
    await rename(seg(2), seg(3));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 7, line: 0, reason: 'segment_missing', file: 'audit.log.000002' });
  });

  it('a segment renamed to a non-canonical number is not a segment (as if deleted)', async () => {
    const { dir, path, seg } = await rotated(2);
    await rename(seg(2), join(dir, 'audit.log.0000002'));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 7, line: 1, reason: 'segment_missing', file: 'audit.log' });
  });

  it('two sealed segments swapped by renaming are segment_missing: segment 1 starts with a header', async () => {
    const { dir, path, seg } = await rotated(2);
    const tmp = join(dir, 'swap.tmp');
    await rename(seg(1), tmp);
    await rename(seg(2), seg(1));
    await rename(tmp, seg(2));
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 1, line: 1, reason: 'segment_missing', file: 'audit.log.000001' });
  });

  it('a missing active segment after sealed segments counts as empty: ok, and the next writer starts it', async () => {
    // After two rotations with nothing appended since, `L` holds only its header (entry 14); a
    // crash between steps 2 and 3 of a rotation leaves exactly this state without it.
    const { path } = await rotated(2, 0);
    await rm(path);
    const r = await verifyLog(path);
    expect(r).toMatchObject({ ok: true, entries: 13, segments: 2 });
    const sealedHead = r.head;
    const log = await openAuditLog(path);
    const a = await log.append('test.after_crash', { resumed: true });
    await log.close();
    expect(a.seq).toBe(15);
    const active = (await readLines(path)).map(parse);
    expect(active[0]).toMatchObject({ seq: 14, type: 'audit.segment', data: { segment: 3 }, prev: sealedHead });
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 15, segments: 3, head: a.hash });
  });

  it('a checkpoint in a sealed segment still pins it: editing and rehashing there is rollback', async () => {
    const { path, seg } = await rotated(1, 0);
    const log = await openAuditLog(path);
    const cp = await log.checkpoint(); // 7 entries: the seal (6) in segment 1, the header (7) in L
    await log.close();
    expect(cp).toMatchObject({ entries: 7, segment: 2 });
    // Rewrite segment 1 consistently (entry 3 edited, all later entries rehashed, seal included),
    // then relink L's header to the new seal: the checkpoint's head (entry 7) no longer matches.
    const s1 = editAndRehash(await readLines(seg(1)), 3, 'edited');
    await writeLines(seg(1), s1);
    const active = await readLines(path);
    await writeLines(path, [relink(active[0] as Buffer, hashOf(s1[5] as Buffer)), ...active.slice(1)]);
    const r = await verifyLog(path);
    expect(where(r.first_bad)).toEqual({ seq: 7, line: 1, reason: 'rollback', file: 'audit.log' });
  });
});
