/**
 * The audit log's Merkle tree in PostgreSQL (src/audit-tree.ts): for the same entries, the tiles
 * the database serves are byte for byte the tiles the file log writes beside itself, partial
 * tiles of any size reached included, and its signed tree checkpoint has the same head.
 */
import { createPrivateKey } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  generateSigningKeys,
  logTree,
  newTiles,
  noteVerifierKey,
  openAuditLog,
  openNote,
  parseTreeCheckpoint,
  tileData,
  tilePath,
  treeHead,
} from '@forge/audit-chain';
import { describe, expect, it, onTestFinished } from 'vitest';
import { openPostgresAuditLog, postgresTiles } from '../src/index.js';
import { poolOn, tempDir, usePostgres } from './helpers.js';

const pgs = usePostgres();

describe('the audit log’s tree in PostgreSQL', () => {
  it('gives the file log’s tiles byte for byte, and a signed tree checkpoint with the same head', async () => {
    const url = await pgs.server().database();
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const keys = generateSigningKeys();
    const clock = () => new Date('2026-12-04T12:00:00.000Z');
    const tree = { origin: 'example.com/audit', keyName: 'forge-operator' };
    const file = await openAuditLog(path, { clock, signingKey: keys.privateKey, tree });
    const db = await openPostgresAuditLog(url, { clock, signingKey: keys.privateKey, tree });
    onTestFinished(() => db.close());
    await file.checkpoint();
    await db.checkpoint();
    // Batches of every size, one at a time in both (the same seqs, the same lines).
    let n = 0;
    for (const size of [1, 2, 255, 1, 700, 3, 64_000, 40, 1300]) {
      const data = Array.from({ length: size }, (_, i) => ({ n: n + i, pad: 'x'.repeat((n + i) % 7) }));
      n += size;
      const [a, b] = await Promise.all([
        Promise.all(data.map((d) => file.append('t.tree', d))),
        Promise.all(data.map((d) => db.append('t.tree', d))),
      ]);
      expect(b.map((r) => r.leaf)).toEqual(a.map((r) => r.leaf));
    }
    await file.checkpoint();
    await db.checkpoint();
    await file.close();

    const ref = await logTree(path);
    const tiles = postgresTiles(poolOn(url));
    // Every tile of every size the file log published (its own checkpoints), read from both.
    const sizes = [1, ref.size - 1, ref.size];
    for (const size of sizes)
      for (const tile of newTiles(0, size)) {
        const fromDb = await tiles.tile(tile.level, tile.index, tile.width);
        expect(fromDb?.equals(tileData(ref, tile)), `${tilePath(tile)} of size ${size}`).toBe(true);
      }
    for (const tile of newTiles(0, ref.size)) {
      const onDisk = await readFile(join(`${path}.tlog`, tilePath(tile)));
      expect((await tiles.tile(tile.level, tile.index, tile.width))?.equals(onDisk), tilePath(tile)).toBe(true);
    }
    expect(await tiles.tile(0, Math.floor(ref.size / 256) + 1, 1)).toBeUndefined();

    const vkey = noteVerifierKey('forge-operator', createPrivateKey(keys.privateKey));
    const opened = openNote((await tiles.checkpoint()) as string, [vkey]);
    expect(opened.ok).toBe(true);
    const cp = parseTreeCheckpoint((opened as { text: string }).text) as { origin: string; size: number; root: Uint8Array };
    expect(cp).toMatchObject({ origin: 'example.com/audit', size: ref.size });
    expect(Buffer.from(cp.root).equals(Buffer.from(treeHead(ref, ref.size)))).toBe(true);
    const fileNote = openNote(await readFile(join(`${path}.tlog`, 'checkpoint')), [vkey]) as { text: string };
    expect(fileNote.text).toBe((opened as { text: string }).text);
  });

  it('counts entries written before the tree (an older forge) at the next batch or checkpoint', async () => {
    const url = await pgs.server().database();
    const keys = generateSigningKeys();
    const db = await openPostgresAuditLog(url, { signingKey: keys.privateKey });
    onTestFinished(() => db.close());
    await db.checkpoint();
    await Promise.all(Array.from({ length: 600 }, (_, i) => db.append('t.old', { i })));
    const pool = poolOn(url);
    // As a database from before migration 2 is: the right edge at nothing.
    await pool.query("UPDATE forge_audit_head SET tree_size = 0, tree_rows = '{}' WHERE id = 1");
    await db.checkpoint();
    await db.append('t.new', {});
    await db.checkpoint();
    const vkey = noteVerifierKey('forge-audit', createPrivateKey(keys.privateKey));
    const tiles = postgresTiles(pool);
    const cp = parseTreeCheckpoint((openNote((await tiles.checkpoint()) as string, [vkey]) as { text: string }).text) as {
      size: number;
      root: Uint8Array;
    };
    expect(cp.size).toBe(601);
    const lines = (await pool.query<{ line: string }>('SELECT line FROM forge_audit_entries ORDER BY seq')).rows.map((r) => r.line);
    const dir = await tempDir();
    const path = join(dir, 'copy.log');
    await writeFile(path, lines.join(''));
    const ref = await logTree(path);
    expect(Buffer.from(cp.root).equals(Buffer.from(treeHead(ref, 601)))).toBe(true);
    for (const tile of newTiles(0, 601))
      expect((await tiles.tile(tile.level, tile.index, tile.width))?.equals(tileData(ref, tile))).toBe(true);
  });
});
