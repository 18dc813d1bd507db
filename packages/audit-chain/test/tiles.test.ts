// Tiles (src/tiles.ts): paths as C2SP tlog-tiles writes them, the tiles each growth adds, and a
// tree read back from its tile files giving the same heads and proofs as the tree in memory.
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it, onTestFinished } from 'vitest';
import { consistencyProof, inclusionProof, leafHash, MemoryTree, treeHead } from '../src/merkle.js';
import { newTiles, TileHashes, tileFiles, tilePath, writeTiles } from '../src/tiles.js';

function tempRoot(): string {
  const root = mkdtempSync(join(tmpdir(), 'forge-tiles-test-'));
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  return root;
}

const hex = (xs: Uint8Array[]) => xs.map((x) => Buffer.from(x).toString('hex')).join();

describe('tiles', () => {
  it('are named as C2SP tlog-tiles names them', () => {
    expect(tilePath({ level: 0, index: 0, width: 256 })).toBe('tile/0/000');
    expect(tilePath({ level: 0, index: 67, width: 5 })).toBe('tile/0/067.p/5');
    expect(tilePath({ level: 1, index: 1234067, width: 256 })).toBe('tile/1/x001/x234/067');
    expect(tilePath({ level: 2, index: 1000, width: 1 })).toBe('tile/2/x001/000.p/1');
  });

  it('a growth adds its new full tiles and each level’s changed partial one', () => {
    expect(newTiles(0, 0)).toEqual([]);
    expect(newTiles(0, 5)).toEqual([{ level: 0, index: 0, width: 5 }]);
    expect(newTiles(5, 5)).toEqual([]);
    expect(newTiles(5, 256)).toEqual([
      { level: 0, index: 0, width: 256 },
      { level: 1, index: 0, width: 1 },
    ]);
    expect(newTiles(256, 300)).toEqual([{ level: 0, index: 1, width: 44 }]);
    expect(newTiles(0, 70000).map(tilePath)).toEqual([
      ...Array.from({ length: 273 }, (_, i) => `tile/0/${String(i).padStart(3, '0')}`),
      'tile/0/273.p/112',
      'tile/1/000',
      'tile/1/001.p/17',
      'tile/2/000.p/1',
    ]);
  });

  it('a tree read from its tiles gives the heads and proofs of the tree in memory, as it grows', () => {
    const root = tempRoot();
    const tree = new MemoryTree();
    let written = 0;
    const read = tileFiles(root);
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 700 }), fc.nat(), fc.nat(), (grow, a, b) => {
        for (let i = 0; i < grow; i++) tree.append(Buffer.from(`{"seq":${tree.size + 1}}`));
        writeTiles(root, tree, written, tree.size);
        written = tree.size;
        const n = tree.size;
        const tiles = new TileHashes(read, n);
        const i = a % n;
        const m = b % (n + 1);
        return (
          Buffer.from(treeHead(tiles, n)).equals(treeHead(tree, n)) &&
          hex(inclusionProof(tiles, i, n)) === hex(inclusionProof(tree, i, n)) &&
          hex(consistencyProof(tiles, m, n)) === hex(consistencyProof(tree, m, n))
        );
      }),
      { numRuns: 40 },
    );
    expect(tree.size).toBeGreaterThan(256 * 8);
  });

  it('a missing or cut tile is named; no temporary file is left', () => {
    const root = tempRoot();
    const tree = new MemoryTree();
    for (let i = 0; i < 600; i++) tree.appendLeafHash(leafHash(Buffer.from(String(i))));
    writeTiles(root, tree, 0, 600);
    const walk = (d: string): string[] =>
      readdirSync(d).flatMap((f) => (statSync(join(d, f)).isDirectory() ? walk(join(d, f)) : [join(d, f)]));
    expect(walk(root).filter((f) => f.includes('.tmp-'))).toEqual([]);
    // Leaf 300's proof needs the leaves' tile 1 (the head alone is read from the tile above).
    writeFileSync(join(root, 'tile/0/001'), Buffer.alloc(100));
    expect(() => inclusionProof(new TileHashes(tileFiles(root), 600), 300, 600)).toThrow(/tile\/0\/001 is 100 bytes, not 8192/);
    rmSync(join(root, 'tile/0/001'));
    expect(() => inclusionProof(new TileHashes(tileFiles(root), 600), 300, 600)).toThrow(/tile\/0\/001 is missing/);
    expect(Buffer.from(treeHead(new TileHashes(tileFiles(root), 600), 600)).equals(treeHead(tree, 600))).toBe(true);
  });
});
