// The open log's Merkle tree (src/live-tree.ts, SPEC.md section 9.4): the tiles and signed tree
// checkpoint the writer keeps as it appends, rotates, reopens, shares the log and is killed, each
// checked against the tree read from the log's lines afterwards (logTree, a separate reader).

import { spawnSync } from 'node:child_process';
import { createPrivateKey, generateKeyPairSync, randomInt } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rmdir, unlink as unlinkFile, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { waitFor } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { generateSigningKeys } from '../src/checkpoint.js';
import { openAuditLog } from '../src/log.js';
import { logTree } from '../src/log-tree.js';
import { inclusionProof, leafHash, type MemoryTree, treeHead, verifyInclusion } from '../src/merkle.js';
import { formatTreeCheckpoint, noteVerifierKey, openNote, parseTreeCheckpoint, signNote } from '../src/note.js';
import { TILE_WIDTH, type Tile, TileHashes, tileData, tileFiles, tilePath } from '../src/tiles.js';
import { verifyTiles } from '../src/verify-tiles.js';
import { checkAcks, expectCleanExit, readAcks, readChain, spawnWriter } from './children.js';
import { CLI, tempDir } from './helpers.js';

const KEY_NAME = 'forge-audit';
const ORIGIN = 'test.example/audit';

/** A tile's place from its path (`tile/0/x001/067.p/5`), or undefined for another file. */
function parseTilePath(rel: string): Tile | undefined {
  const m = /^tile\/(\d+)\/((?:x\d{3}\/)*\d{3})(?:\.p\/(\d+))?$/.exec(rel);
  if (!m) return undefined;
  const index = Number((m[2] as string).replaceAll('x', '').replaceAll('/', ''));
  return { level: Number(m[1]), index, width: m[3] ? Number(m[3]) : TILE_WIDTH };
}

async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      else out.push(relative(dir, p));
    }
  };
  await walk(dir);
  return out.sort();
}

/**
 * Checks the log's tiles against its lines: every tile there holds exactly the hashes of the tree
 * read from the log, every full tile of that tree is there, and (with `vkey`) the tree checkpoint
 * is signed, of the log's size, and has the tree's head. Returns the reference tree.
 */
async function expectTilesOfLog(path: string, vkey?: string): Promise<MemoryTree> {
  const tree = await logTree(path);
  const dir = `${path}.tlog`;
  const files = await filesUnder(dir);
  const stray = files.filter((f) => f !== 'checkpoint' && !parseTilePath(f));
  expect(stray, 'files in the tile directory that are neither tiles nor the checkpoint').toEqual([]);
  for (const f of files) {
    const tile = parseTilePath(f);
    if (!tile) continue;
    expect((await readFile(join(dir, f))).equals(tileData(tree, tile)), `${f} holds the tree's hashes`).toBe(true);
  }
  for (let level = 0; Math.floor(tree.size / TILE_WIDTH ** level) >= TILE_WIDTH; level++) {
    const full = Math.floor(Math.floor(tree.size / TILE_WIDTH ** level) / TILE_WIDTH);
    for (let index = 0; index < full; index++) expect(files).toContain(tilePath({ level, index, width: TILE_WIDTH }));
  }
  expect(await verifyTiles(path, vkey ? { verifierKeys: [vkey] } : {})).toMatchObject({ ok: true, size: tree.size });
  if (vkey) {
    const opened = openNote(await readFile(join(dir, 'checkpoint')), [vkey]);
    expect(opened.ok, JSON.stringify(opened)).toBe(true);
    const cp = parseTreeCheckpoint((opened as { text: string }).text);
    expect(cp).toMatchObject({ origin: ORIGIN, size: tree.size });
    expect(Buffer.from((cp as { root: Uint8Array }).root).equals(Buffer.from(treeHead(tree, tree.size)))).toBe(true);
  }
  return tree;
}

function keys(): { privateKey: string; vkey: string } {
  const { privateKey } = generateSigningKeys();
  return { privateKey, vkey: noteVerifierKey(KEY_NAME, createPrivateKey(privateKey)) };
}

const tree = { origin: ORIGIN };

/** The lines of the log, in order (each without its newline), by reading its segments. */
async function lines(path: string): Promise<Buffer[]> {
  return (await readChain(path)).entries.map((e) => e.line.subarray(0, e.line.length - 1));
}

describe('the open log’s Merkle tree', () => {
  it('writes the tiles and signed checkpoint of the tree its lines make, through rotations, reopenings and a second tile level', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const k = keys();
    const leaves = new Map<number, string>();
    let log = await openAuditLog(path, { signingKey: k.privateKey, tree });
    await log.checkpoint(); // a signed log opens again only from a checkpoint its key signed
    let appended = 0;
    let rotations = 0;
    for (let round = 0; round < 12; round++) {
      const n = round === 6 ? 66_000 : randomInt(1, 700);
      const results = await Promise.all(Array.from({ length: n }, (_, i) => log.append('t.write', { round, i })));
      for (const r of results) leaves.set(r.seq, r.leaf as string);
      appended += n;
      const step = randomInt(0, 4);
      if (step === 0) {
        await log.rotate();
        rotations++;
      }
      if (step === 1) await log.checkpoint();
      if (step === 2) {
        await log.close();
        log = await openAuditLog(path, { signingKey: k.privateKey, tree });
      }
    }
    const cp = await log.checkpoint();
    await log.close();
    // Each rotation adds two entries of the log's own: the sealed segment's last, the next one's header.
    expect(cp.entries).toBe(appended + 2 * rotations);
    const ref = await expectTilesOfLog(path, k.vkey);
    expect(ref.size).toBe(cp.entries);
    const byLine = await lines(path);
    for (const [seq, leaf] of leaves) expect(leaf, `entry ${seq}'s leaf hash`).toBe(leafHash(byLine[seq - 1] as Buffer).toString('hex'));
    expect(existsSync(join(`${path}.tlog`, 'tile/1/000'))).toBe(true);
  });

  it('stays one tree when two writers take turns on one log', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const k = keys();
    const a = await openAuditLog(path, { signingKey: k.privateKey, tree });
    const b = await openAuditLog(path, { signingKey: k.privateKey, tree });
    for (let round = 0; round < 20; round++) {
      const w = round % 2 === 0 ? a : b;
      await Promise.all(Array.from({ length: randomInt(1, 400) }, (_, i) => w.append('t.write', { round, i })));
      if (round % 5 === 4) await (round % 2 === 0 ? b : a).checkpoint();
      if (round === 11) await b.rotate();
    }
    await a.checkpoint();
    await a.close();
    await b.close();
    await expectTilesOfLog(path, k.vkey);
  });

  it('keeps tiles and no checkpoint note without a key, and no tree when asked for none', async () => {
    const dir = await tempDir();
    const unsigned = join(dir, 'unsigned.log');
    let log = await openAuditLog(unsigned, { tree });
    await Promise.all(Array.from({ length: 600 }, (_, i) => log.append('t.write', { i })));
    await log.checkpoint();
    await log.close();
    log = await openAuditLog(unsigned, { tree });
    await Promise.all(Array.from({ length: 300 }, (_, i) => log.append('t.write', { i })));
    await log.checkpoint();
    await log.close();
    await expectTilesOfLog(unsigned);
    expect(existsSync(join(`${unsigned}.tlog`, 'checkpoint'))).toBe(false);

    const none = join(dir, 'none.log');
    const plain = await openAuditLog(none, { tree: false });
    const r = await plain.append('t.write', { i: 0 });
    await plain.checkpoint();
    await plain.close();
    expect(existsSync(`${none}.tlog`)).toBe(false);
    expect(r.leaf).toBe(leafHash((await lines(none))[0] as Buffer).toString('hex'));
  });

  it('resumes from the checkpoint’s tiles, so a tile changed on disk is caught by the proofs it breaks, not signed over', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const k = keys();
    let log = await openAuditLog(path, { signingKey: k.privateKey, tree });
    await Promise.all(Array.from({ length: 700 }, (_, i) => log.append('t.write', { i })));
    await log.checkpoint();
    await log.close();
    // A full tile, which the tree resuming at the checkpoint does not read again.
    const full = join(`${path}.tlog`, 'tile/0/000');
    const forged = Buffer.from(await readFile(full));
    forged[5] = (forged[5] as number) ^ 1;
    await writeFile(full, forged);
    log = await openAuditLog(path, { signingKey: k.privateKey, tree });
    await Promise.all(Array.from({ length: 100 }, (_, i) => log.append('t.write', { i })));
    await log.checkpoint();
    await log.close();
    expect((await readFile(full)).equals(forged), 'the tree resumed from the tiles: the full tile was not rewritten').toBe(true);
    // The checkpoint is still the log's own; a proof through the changed tile fails against it.
    const ref = await logTree(path);
    const opened = openNote(await readFile(join(`${path}.tlog`, 'checkpoint')), [k.vkey]);
    const cp = parseTreeCheckpoint((opened as { text: string }).text) as { size: number; root: Uint8Array };
    expect(Buffer.from(cp.root).equals(Buffer.from(treeHead(ref, cp.size)))).toBe(true);
    const fromTiles = new TileHashes(tileFiles(`${path}.tlog`), cp.size);
    const line = (await lines(path))[1] as Buffer; // its proof starts with leaf 0, the hash changed
    expect(verifyInclusion(1, cp.size, leafHash(line), inclusionProof(fromTiles, 1, cp.size), cp.root)).toBe(false);
    expect(verifyInclusion(1, cp.size, leafHash(line), inclusionProof(ref, 1, cp.size), cp.root)).toBe(true);
  });

  it('verifyTiles and forge-audit verify-tiles find a tile or checkpoint changed on disk, naming it', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const k = keys();
    const log = await openAuditLog(path, { signingKey: k.privateKey, tree });
    await Promise.all(Array.from({ length: 1000 }, (_, i) => log.append('t.write', { i })));
    await log.checkpoint();
    await log.close();
    const cli = (...args: string[]) => spawnSync(process.execPath, [CLI, 'verify-tiles', path, ...args], { encoding: 'utf8' });
    expect(await verifyTiles(path, { verifierKeys: [k.vkey] })).toEqual({ ok: true, size: 1000, tiles: 5, checkpoint: 'signed' });
    const ok = cli('--vkey', k.vkey);
    expect([ok.status, ok.stdout.trim()]).toEqual([0, 'ok: 1000 entries, 5 tiles as the entries give them; tree checkpoint: signed']);
    const other = keys();
    expect(await verifyTiles(path, { verifierKeys: [other.vkey] })).toMatchObject({ ok: false, first_bad: { what: 'checkpoint' } });

    const tile = join(`${path}.tlog`, 'tile/0/001');
    const bytes = await readFile(tile);
    const changed = Buffer.from(bytes);
    changed[40] = (changed[40] as number) ^ 1;
    await writeFile(tile, changed);
    expect(await verifyTiles(path)).toMatchObject({
      ok: false,
      checkpoint: 'unverified',
      first_bad: { what: 'tile/0/001', reason: expect.stringMatching(/other hashes/) },
    });
    const bad = cli('--vkey', k.vkey);
    expect(bad.status).toBe(1);
    expect(bad.stdout).toMatch(/^MISMATCH: tile\/0\/001: holds other hashes/);
    // A tile with a hash too many, and a directory where a tile goes.
    await writeFile(tile, Buffer.concat([bytes, bytes.subarray(0, 32)]));
    expect(await verifyTiles(path)).toMatchObject({
      ok: false,
      first_bad: { what: 'tile/0/001', reason: expect.stringMatching(/other hashes/) },
    });
    await unlinkFile(tile);
    await mkdir(tile);
    expect(await verifyTiles(path)).toMatchObject({
      ok: false,
      first_bad: { what: 'tile/0/001', reason: expect.stringMatching(/^cannot be read/) },
    });
    await rmdir(tile);
    // A FIFO where a tile or the tree checkpoint goes: reported, not waited on.
    const fifoAt = async (file: string, what: string, restore: Buffer) => {
      await unlinkFile(file);
      expect(spawnSync('mkfifo', [file]).status).toBe(0);
      expect(await verifyTiles(path)).toMatchObject({
        ok: false,
        first_bad: { what, reason: expect.stringMatching(/not a regular file/) },
      });
      await unlinkFile(file);
      await writeFile(file, restore);
    };
    await writeFile(tile, bytes);
    await fifoAt(tile, 'tile/0/001', bytes);
    const note = join(`${path}.tlog`, 'checkpoint');
    await fifoAt(note, 'checkpoint', await readFile(note));
    const partial = join(`${path}.tlog`, tilePath({ level: 0, index: 3, width: 1000 - 768 }));
    await writeFile(partial, Buffer.alloc(0));
    expect(await verifyTiles(path)).toMatchObject({ ok: false, first_bad: { what: tilePath({ level: 0, index: 3, width: 232 }) } });
    await unlinkFile(partial);
    expect(await verifyTiles(path)).toMatchObject({ ok: false, first_bad: { reason: 'missing' } });
  });

  it('a reader of an older checkpoint whose partial tiles are gone (their tiles filled since) reads the full tiles’ first hashes', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const k = keys();
    const log = await openAuditLog(path, { signingKey: k.privateKey, tree });
    await Promise.all(Array.from({ length: 700 }, (_, i) => log.append('t.write', { i })));
    await log.checkpoint();
    const older = await readFile(join(`${path}.tlog`, 'checkpoint'), 'utf8');
    await Promise.all(Array.from({ length: 100 }, (_, i) => log.append('t.write', { i })));
    await log.checkpoint();
    await log.close();
    expect(existsSync(join(`${path}.tlog`, 'tile/0/002.p'))).toBe(false);
    const cp = parseTreeCheckpoint((openNote(older, [k.vkey]) as { text: string }).text) as { size: number; root: Uint8Array };
    const fromTiles = new TileHashes(tileFiles(`${path}.tlog`), cp.size);
    const line = (await lines(path))[650] as Buffer;
    expect(verifyInclusion(650, cp.size, leafHash(line), inclusionProof(fromTiles, 650, cp.size), cp.root)).toBe(true);
    await writeFile(join(`${path}.tlog`, 'checkpoint'), older);
    expect(await verifyTiles(path, { verifierKeys: [k.vkey] })).toMatchObject({ ok: true, size: cp.size });
  });

  it('never holds the log back: appends go on and the chain’s checkpoint is written while the tree cannot be', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const k = keys();
    // A file where the tree's directory goes: no tile can be written under it.
    await writeFile(`${path}.tlog`, 'not a directory');
    const log = await openAuditLog(path, { signingKey: k.privateKey, tree });
    const first = await log.checkpoint().catch((err: Error) => err);
    expect(first).toMatchObject({
      code: 'write_failed',
      message: expect.stringMatching(/^checkpoint of 0 entries recorded, but the tree checkpoint/),
    });
    const acks = await Promise.all(Array.from({ length: 600 }, (_, i) => log.append('t.write', { i })));
    expect(acks.map((a) => a.seq)).toEqual(Array.from({ length: 600 }, (_, i) => i + 1));
    await expect(log.checkpoint()).rejects.toMatchObject({ message: expect.stringMatching(/^checkpoint of 600 entries recorded/) });
    expect((await readFile(`${path}.checkpoints`, 'utf8')).trim().split('\n').at(-1)).toContain('"entries":600');
    // Once it can be written again, the tree is rebuilt from the log.
    await unlinkFile(`${path}.tlog`);
    await log.append('t.write', { after: true });
    await log.checkpoint();
    await log.close();
    await expectTilesOfLog(path, k.vkey);
  });

  it('starts again from the log when the checkpoint’s tiles or its note are not what the key signed (or not files at all)', async () => {
    const damages = [
      'partial tile',
      'note by another key',
      'note missing',
      'note of another size',
      'note a FIFO',
      'partial tile a FIFO',
    ] as const;
    for (const damage of damages) {
      const dir = await tempDir();
      const path = join(dir, 'audit.log');
      const k = keys();
      let log = await openAuditLog(path, { signingKey: k.privateKey, tree });
      await Promise.all(Array.from({ length: 700 }, (_, i) => log.append('t.write', { i })));
      const at = await log.checkpoint();
      await log.close();
      const tiles = `${path}.tlog`;
      const full = join(tiles, 'tile/0/000');
      await writeFile(full, Buffer.alloc(TILE_WIDTH * 32));
      const note = join(tiles, 'checkpoint');
      const partial = join(tiles, tilePath({ level: 0, index: Math.floor(at.entries / TILE_WIDTH), width: at.entries % TILE_WIDTH }));
      if (damage === 'note a FIFO' || damage === 'partial tile a FIFO') {
        // Put where forge reads its own file: never waited on (it would hold the log's opening forever).
        const at = damage === 'note a FIFO' ? note : partial;
        await unlinkFile(at);
        expect(spawnSync('mkfifo', [at]).status).toBe(0);
      } else if (damage === 'partial tile') {
        const bytes = Buffer.from(await readFile(partial));
        bytes[0] = (bytes[0] as number) ^ 1;
        await writeFile(partial, bytes);
      } else if (damage === 'note missing') {
        await writeFile(note, '');
      } else {
        const other = generateKeyPairSync('ed25519').privateKey;
        const opened = openNote(await readFile(note), [k.vkey]) as { text: string };
        const cp = parseTreeCheckpoint(opened.text) as { origin: string; size: number; root: Uint8Array };
        const text = formatTreeCheckpoint(damage === 'note of another size' ? { ...cp, size: cp.size - 1 } : cp);
        const signer = damage === 'note by another key' ? other : createPrivateKey(k.privateKey);
        await writeFile(note, signNote(text, [{ name: KEY_NAME, privateKey: signer }]));
      }
      log = await openAuditLog(path, { signingKey: k.privateKey, tree });
      await log.append('t.write', { after: damage });
      await log.checkpoint();
      await log.close();
      // Started from the first entry: every tile rewritten from the log, the zeroed one too.
      await expectTilesOfLog(path, k.vkey);
    }
  });

  it('stays one tree when writer processes append and checkpoint at once', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const k = keys();
    const go = join(dir, 'go');
    const writers = ['p0', 'p1', 'p2'].map((id, i) =>
      spawnWriter(path, 3000, id, {
        window: randomInt(1, 300),
        signingKey: k.privateKey,
        checkpointEvery: 400 + 100 * i,
        rotateEvery: 2500,
        treeOrigin: ORIGIN,
        go,
      }),
    );
    await waitFor('every writer to open the log', async () => {
      for (const w of writers) if (!(await readAcks(w.acksPath)).events.includes('ready')) return undefined;
      return true;
    });
    await writeFile(go, '');
    for (const w of writers) await expectCleanExit(w);
    const log = await openAuditLog(path, { signingKey: k.privateKey, tree });
    await log.checkpoint();
    await log.close();
    const acks = (await Promise.all(writers.map((w) => readAcks(w.acksPath)))).flatMap((r) => r.acks);
    expect(acks).toHaveLength(9000);
    expect(checkAcks((await readChain(path)).entries, acks)).toEqual([]);
    await expectTilesOfLog(path, k.vkey);
  });

  it('loses nothing acknowledged and leaves tiles that match the log when the writer is killed at any moment', async () => {
    const dir = await tempDir();
    const k = keys();
    for (let n = 0; n < 8; n++) {
      const path = join(dir, `audit-${Math.floor(n / 2)}.log`);
      const w = spawnWriter(path, Number.POSITIVE_INFINITY, `k${n}`, {
        acks: join(dir, `k${n}.acks`),
        window: randomInt(1, 400),
        signingKey: k.privateKey,
        checkpointEvery: randomInt(50, 700),
        rotateEvery: randomInt(2000, 6000),
        treeOrigin: ORIGIN,
      });
      // Killed once checkpoints are being written, at a moment no event marks.
      await waitFor(`writer k${n} to write a checkpoint`, async () => {
        if (w.child.exitCode !== null) throw new Error(`writer k${n} exited: ${w.stderr()}`);
        return (await readAcks(w.acksPath)).events.some((e) => e.startsWith('checkpoint')) ? true : undefined;
      });
      // Lets time pass: the kill is to land at a random moment among appends, tiles and checkpoints, which no event marks.
      await new Promise((r) => setTimeout(r, randomInt(0, 200)));
      w.child.kill('SIGKILL');
      expect(await w.exited).toEqual({ code: null, signal: 'SIGKILL' });
      const { acks } = await readAcks(w.acksPath);
      const log = await openAuditLog(path, { signingKey: k.privateKey, tree });
      await log.checkpoint();
      await log.close();
      expect(checkAcks((await readChain(path)).entries, acks)).toEqual([]);
      await expectTilesOfLog(path, k.vkey);
    }
  });
});
