/**
 * Verification on two threads (the built worker file only exists in dist/, so this test uses the
 * built library) must reach exactly the verdicts of one thread, wherever the fault lands relative
 * to the chunks each thread takes.
 */
import { createPrivateKey, generateKeyPairSync } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { scaled } from '@forge/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type * as Lib from '../src/index.js';
import { DIST } from './helpers.js';

const lib = (await import(DIST)) as typeof Lib;

/** The log's bytes, and where each of its lines starts. */
async function linesOf(path: string): Promise<{ original: Buffer; lineStarts: number[] }> {
  const original = await readFile(path);
  const lineStarts = [0];
  for (let at = original.indexOf(10); at >= 0 && at < original.length - 1; at = original.indexOf(10, at + 1)) lineStarts.push(at + 1);
  return { original, lineStarts };
}

describe('verifyLog with threads: 2', () => {
  let dir: string;
  let path: string;
  let original: Buffer;
  let lineStarts: number[];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'audit-chain-threads-'));
    path = join(dir, 'audit.log');
    // Over the 32 MiB threshold, with checkpoints spread over many 1 MiB chunks.
    const log = await lib.openAuditLog(path);
    const pad = 'p'.repeat(400);
    for (let i = 0; i < 80_000; i += 1000) {
      await Promise.all(Array.from({ length: 1000 }, (_, k) => log.append('bench.entry', { i: i + k, pad })));
      if (i % 20_000 === 0) await log.checkpoint();
    }
    await log.checkpoint();
    await log.close();
    ({ original, lineStarts } = await linesOf(path));
  }, scaled(120_000));
  afterAll(() => rm(dir, { recursive: true, force: true }));

  const both = async () => {
    const one = await lib.verifyLog(path, { threads: 1 });
    const two = await lib.verifyLog(path, { threads: 2 });
    expect(one.threads).toBe(1);
    expect(two.threads).toBe(2);
    expect({ ...two, threads: 1 }).toEqual(one);
    return one;
  };

  it('agrees with one thread on an intact log', async () => {
    await writeFile(path, original);
    const r = await both();
    expect(r).toMatchObject({ ok: true, entries: 80_000, uncheckpointed: 0 });
    expect(original.length).toBeGreaterThan(32 << 20);
  });

  it.each([1, 2, 1999, 2000, 2001, 41_234, 79_999, 80_000])('agrees with one thread on a flipped byte in entry %i', async (entry) => {
    const b = Buffer.from(original);
    const at = (lineStarts[entry - 1] as number) + 30;
    b[at] = (b[at] as number) ^ 0x04;
    await writeFile(path, b);
    const r = await both();
    expect(r.first_bad).toMatchObject({ seq: entry, line: entry });
  });

  it('agrees with one thread on a deleted entry and on a truncated log', async () => {
    const cut = lineStarts[50_000] as number;
    const next = lineStarts[50_001] as number;
    await writeFile(path, Buffer.concat([original.subarray(0, cut), original.subarray(next)]));
    expect((await both()).first_bad).toMatchObject({ seq: 50_001, reason: 'seq_gap' });
    await writeFile(path, original.subarray(0, lineStarts[70_000]));
    expect((await both()).first_bad).toMatchObject({ seq: 70_001, reason: 'truncated' });
  });
});

describe('verifyTiles with threads: 2', () => {
  let dir: string;
  let path: string;
  let vkey: string;
  let original: Buffer;
  let lineStarts: number[];
  const ENTRIES = 80_500;
  // Lines within the room kept for a carried line (256 KiB), longer than it, and nearly one
  // read (1 MiB): chunks end at a tile boundary only while what follows fits that room.
  const LONG = new Map([
    [20_000, 100_000],
    [30_001, 300_000],
    [50_000, 1_000_000],
  ]);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'audit-chain-threads-'));
    path = join(dir, 'audit.log');
    const privateKey = generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
    vkey = lib.noteVerifierKey('forge-audit', createPrivateKey(privateKey));
    const log = await lib.openAuditLog(path, { signingKey: privateKey, tree: { origin: 'threads.test/log' } });
    await log.checkpoint();
    const pad = 'p'.repeat(400);
    for (let i = 0; i < ENTRIES; i += 500) {
      await Promise.all(
        Array.from({ length: Math.min(500, ENTRIES - i) }, (_, k) =>
          log.append('bench.entry', { i: i + k, pad: LONG.has(i + k + 1) ? 'q'.repeat(LONG.get(i + k + 1) as number) : pad }),
        ),
      );
    }
    await log.checkpoint();
    await log.close();
    ({ original, lineStarts } = await linesOf(path));
  }, scaled(120_000));
  afterAll(() => rm(dir, { recursive: true, force: true }));

  const both = async () => {
    const one = await lib.verifyTiles(path, { verifierKeys: [vkey], threads: 1 });
    const two = await lib.verifyTiles(path, { verifierKeys: [vkey], threads: 2 });
    expect(two).toEqual(one);
    return one;
  };
  const tileOf = (entry: number) => lib.tilePath({ level: 0, index: Math.floor((entry - 1) / 256), width: 256 });

  it('agrees with one thread on an intact log with lines longer than a read', async () => {
    await writeFile(path, original);
    expect(original.length).toBeGreaterThan(32 << 20);
    // The tree checkpoint covers every entry: the genesis checkpoint's, the appends, and the segment header.
    const r = await both();
    expect(r).toMatchObject({ ok: true, checkpoint: 'signed' });
    expect(r.size).toBe(lineStarts.length);
  });

  it.each([1, 256, 257, 30_001, 41_234, 50_000, 79_872])(
    'agrees with one thread on a flipped byte in entry %i, naming its tile',
    async (entry) => {
      const b = Buffer.from(original);
      const at = (lineStarts[entry - 1] as number) + 30;
      b[at] = (b[at] as number) ^ 0x04;
      await writeFile(path, b);
      expect((await both()).first_bad).toEqual({ what: tileOf(entry), reason: 'holds other hashes than the log’s entries give' });
    },
  );

  it('agrees with one thread on a forged line longer than two reads, naming its tile', async () => {
    const at = lineStarts[40_000 - 1] as number;
    await writeFile(path, Buffer.concat([original.subarray(0, at), Buffer.from(`${'x'.repeat(2_500_000)}\n`), original.subarray(at)]));
    expect((await both()).first_bad).toEqual({ what: tileOf(40_000), reason: 'holds other hashes than the log’s entries give' });
  });

  it('agrees with one thread on a changed tile, naming the lowest when two are changed', async () => {
    await writeFile(path, original);
    const tiles = join(`${path}.tlog`);
    const forge = async (tile: string) => {
      const b = await readFile(join(tiles, tile));
      b[7] = (b[7] as number) ^ 1;
      await writeFile(join(tiles, tile), b);
      return async () => {
        b[7] = (b[7] as number) ^ 1;
        await writeFile(join(tiles, tile), b);
      };
    };
    const upper = lib.tilePath({ level: 1, index: 0, width: 256 });
    const undoUpper = await forge(upper);
    expect((await both()).first_bad).toMatchObject({ what: upper });
    const undoLower = await forge(tileOf(200 * 256 + 1));
    expect((await both()).first_bad).toMatchObject({ what: tileOf(200 * 256 + 1) });
    await undoLower();
    await undoUpper();
    expect((await both()).ok).toBe(true);
  });
});
