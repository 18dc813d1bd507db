// forge's tiles read by code nobody here wrote: Go's sumdb/tlog computes every tile of the same
// tree and compares it with forge's file byte for byte, then reads the tree through its
// TileHashReader (which checks each tile against the tree head) and proves records from the tiles
// (test/interop/tilecheck.go).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it, onTestFinished } from 'vitest';
import { leafHash, MemoryTree, treeHead } from '../src/merkle.js';
import { writeTiles } from '../src/tiles.js';
import { runGo } from './helpers.js';

it('Go’s sumdb/tlog finds forge’s tiles identical to its own and proves records from them', () => {
  const work = mkdtempSync(join(tmpdir(), 'forge-tiles-go-'));
  onTestFinished(() => rmSync(work, { recursive: true, force: true }));
  const dir = join(work, 'log');
  const tree = new MemoryTree();
  const leaves: string[] = [];
  // Grown in steps, tiles written after each, so partial tiles are replaced as they fill.
  let written = 0;
  for (const step of [1, 255, 300, 65_000, 1234]) {
    for (let i = 0; i < step; i++) {
      const h = leafHash(Buffer.from(`{"seq":${tree.size + 1}}`));
      leaves.push(h.toString('hex'));
      tree.appendLeafHash(h);
    }
    writeTiles(dir, tree, written, tree.size);
    written = tree.size;
  }
  const r = runGo('tilecheck.go', 'tlog', { dir, leaves, size: tree.size, root: Buffer.from(treeHead(tree, tree.size)).toString('hex') });
  expect(r.stderr).toBe('');
  expect(r.stdout.trim()).toMatch(/^ok: \d+ tiles, 4 proofs$/);
  expect(r.status).toBe(0);
});
