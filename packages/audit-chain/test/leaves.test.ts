// Hashing leaves by the chunk (src/leaves.ts) and adding them by the run (TileRows.addRun): the
// fast paths verifyTiles takes must give exactly the hashes and tiles of one leaf at a time.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { chunkLeaves } from '../src/leaves.js';
import { foldRow, HASH_SIZE, leafHash, nodeHash } from '../src/merkle.js';
import { type FullTile, subtree, TileRows } from '../src/tile-rows.js';
import { TILE_WIDTH } from '../src/tiles.js';

/** Lines (without newlines) as a chunk: a spare byte, then each line and its newline. */
function chunkOf(lines: Buffer[], spare = 0x41): Buffer {
  return Buffer.concat([Buffer.from([spare]), ...lines.flatMap((l) => [l, Buffer.from('\n')])]);
}

const line = fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b.map((x) => (x === 10 ? 11 : x))));
const hashOf = (i: number) => leafHash(Buffer.from(`leaf ${i}`));

describe('chunkLeaves', () => {
  it('gives each line’s leaf hash, leaves the chunk as it was, and folds the full tiles inside it', () => {
    fc.assert(
      fc.property(fc.array(line, { maxLength: 700 }), fc.nat(1000), fc.integer({ min: 0, max: 255 }), (lines, first, spare) => {
        const buf = chunkOf(lines, spare);
        const before = Buffer.from(buf);
        const r = chunkLeaves(buf, 1, buf.length, first);
        expect(buf.equals(before)).toBe(true);
        expect(r.count).toBe(lines.length);
        expect(r.hashes.equals(Buffer.concat(lines.map(leafHash)))).toBe(true);
        const start = (TILE_WIDTH - (first % TILE_WIDTH)) % TILE_WIDTH;
        const folds: Uint8Array[] = [];
        for (let at = start; at + TILE_WIDTH <= lines.length; at += TILE_WIDTH)
          folds.push(subtree(lines.slice(at, at + TILE_WIDTH).map(leafHash)));
        expect(r.tiles?.start).toBe(start);
        expect(r.tiles?.hashes.equals(Buffer.concat(folds))).toBe(true);
      }),
      { numRuns: 60 },
    );
  });

  it('reads only the lines in its range, and refuses a range with no byte before it', () => {
    const buf = chunkOf([Buffer.from('a'), Buffer.from('b'), Buffer.from('c')]);
    const r = chunkLeaves(buf, 3, 5);
    expect(r.count).toBe(1);
    expect(r.hashes.equals(leafHash(Buffer.from('b')))).toBe(true);
    expect(r.tiles).toBeUndefined();
    expect(() => chunkLeaves(buf, 0, buf.length)).toThrow(RangeError);
  });
});

describe('foldRow', () => {
  it('hashes a row pairwise to the subtree hash nodeHash gives', () => {
    for (const count of [1, 2, 4, 8, 256]) {
      const row = Array.from({ length: count }, (_, i) => hashOf(i));
      let level: Uint8Array[] = row;
      while (level.length > 1)
        level = level.flatMap((_, i) => (i % 2 ? [] : [nodeHash(level[i] as Uint8Array, level[i + 1] as Uint8Array)]));
      const buf = Buffer.concat([Buffer.alloc(1), ...row]);
      foldRow(buf, count);
      expect(buf.subarray(1, 1 + HASH_SIZE).equals(Buffer.from(level[0] as Uint8Array))).toBe(true);
    }
  });
});

describe('TileRows.addRun', () => {
  it('gives the tiles, partial tiles and tree head that adding one leaf at a time gives, however the runs are cut', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 3 * TILE_WIDTH * 2 + 17 }),
        fc.array(fc.integer({ min: 1, max: 700 }), { minLength: 1 }),
        fc.boolean(),
        (size, cuts, fold) => {
          const leaves = Array.from({ length: size }, (_, i) => hashOf(i));
          const one = new TileRows();
          const oneTiles: FullTile[] = [];
          for (const l of leaves) one.add(l, (t) => oneTiles.push({ ...t, data: Buffer.from(t.data) }));
          const runs = new TileRows();
          const runTiles: FullTile[] = [];
          for (let at = 0, k = 0; at < size; k++) {
            const n = Math.min(cuts[k % cuts.length] as number, size - at);
            const hashes = Buffer.concat(leaves.slice(at, at + n));
            // The tile hashes chunkLeaves would give for this run (from its first index).
            let folded: { start: number; hashes: Buffer } | undefined;
            if (fold) {
              const start = (TILE_WIDTH - (at % TILE_WIDTH)) % TILE_WIDTH;
              const parts: Uint8Array[] = [];
              for (let s = start; s + TILE_WIDTH <= n; s += TILE_WIDTH) parts.push(subtree(leaves.slice(at + s, at + s + TILE_WIDTH)));
              folded = { start, hashes: Buffer.concat(parts) };
            }
            runs.addRun(hashes, n, (t) => runTiles.push({ ...t, data: Buffer.from(t.data) }), folded);
            at += n;
          }
          expect(runs.size).toBe(one.size);
          expect(runTiles).toEqual(oneTiles);
          expect(runs.partials()).toEqual(one.partials());
          expect(Buffer.from(runs.root()).equals(Buffer.from(one.root()))).toBe(true);
        },
      ),
      { numRuns: 40 },
    );
  });

  it('takes the tile hashes it is given (they are what saves the hashing)', () => {
    const leaves = Buffer.concat(Array.from({ length: TILE_WIDTH }, (_, i) => hashOf(i)));
    const honest = new TileRows();
    honest.addRun(leaves, TILE_WIDTH, () => {});
    const given = new TileRows();
    given.addRun(leaves, TILE_WIDTH, () => {}, { start: 0, hashes: Buffer.alloc(HASH_SIZE) });
    expect(Buffer.from(given.root()).equals(Buffer.alloc(HASH_SIZE))).toBe(true);
    expect(Buffer.from(honest.root()).equals(Buffer.alloc(HASH_SIZE))).toBe(false);
  });
});
