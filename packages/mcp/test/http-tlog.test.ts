// The audit log's tree served beside /mcp (src/httpTlog.ts): a monitor reads the signed tree
// checkpoint and the tiles over HTTP and proves a call's receipt from them alone; nothing but
// canonical tile paths inside the tree directory is served, through the same Host and token checks.
import { createPrivateKey } from 'node:crypto';
import { renameSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import {
  generateSigningKeys,
  inclusionProof,
  logTree,
  newTiles,
  noteVerifierKey,
  openNote,
  parseTreeCheckpoint,
  TileHashes,
  tileData,
  tilePath,
  verifyInclusion,
} from '@forge/audit-chain';
import fc from 'fast-check';
import { describe, expect, it, onTestFinished } from 'vitest';
import { tlogFile } from '../src/httpTlog.js';
import { serveHttp } from '../src/index.js';
import { example, newForge, tempDirs } from './helpers.js';

/** A GET (or another method) with the path sent as written, and the Host given. */
function get(url: string, path: string, o: { method?: string; host?: string; token?: string } = {}) {
  const u = new URL(url);
  return new Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }>((done, fail) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path,
        method: o.method ?? 'GET',
        headers: { host: o.host ?? u.host, ...(o.token ? { authorization: `Bearer ${o.token}` } : {}) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => done({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      },
    );
    req.on('error', fail);
    req.end();
  });
}

describe('the audit log’s tree over HTTP', () => {
  it('serves the signed checkpoint and the tiles a monitor proves a receipt with, and nothing else', async () => {
    const dirs = tempDirs();
    const keys = generateSigningKeys();
    const keyFile = join(dirs.root, 'audit.key');
    writeFileSync(keyFile, keys.privateKey, { mode: 0o600 });
    const forge = await newForge(dirs, { auditKey: keyFile });
    const server = await serveHttp(forge);
    onTestFinished(() => server.close());
    const made = await forge.forgeTool(await example('fib'));
    expect(made.ok).toBe(true);
    const answers = [];
    for (let n = 0; n < 300; n++) answers.push(await forge.callTool('fib', { n: n % 40 }));
    const log = forge.paths.auditLog;
    // Closing the engine writes its last checkpoint, and with it the tree's.
    await forge.close();

    const vkey = noteVerifierKey('forge-operator', createPrivateKey(keys.privateKey));
    const cpRes = await get(server.url, '/audit/log/checkpoint');
    expect(cpRes.status).toBe(200);
    expect(cpRes.headers['content-type']).toBe('text/plain; charset=utf-8');
    const opened = openNote(cpRes.body, [vkey]);
    expect(opened.ok).toBe(true);
    const cp = parseTreeCheckpoint((opened as { text: string }).text) as { origin: string; size: number; root: Uint8Array };
    expect(cp.origin).toBe(`${hostname()}${resolve(log)}`);
    expect(cp.size).toBeGreaterThan(300);

    // Every tile of that size, fetched over HTTP, as the log's own lines give them.
    const ref = await logTree(log, cp.size);
    const fetched = new Map<string, Uint8Array>();
    for (const tile of newTiles(0, cp.size)) {
      const r = await get(server.url, `/audit/log/${tilePath(tile)}`);
      expect(r.status, tilePath(tile)).toBe(200);
      expect(r.body.equals(tileData(ref, tile))).toBe(true);
      expect(r.headers['cache-control']).toBe(tile.width === 256 ? 'public, max-age=31536000, immutable' : 'no-cache');
      fetched.set(tilePath(tile), r.body);
    }
    // A partial tile of an older size whose tile has filled since: served as the full tile's first hashes.
    const older = await get(server.url, '/audit/log/tile/0/000.p/7');
    expect([older.status, older.body.equals(tileData(ref, { level: 0, index: 0, width: 7 }))]).toEqual([200, true]);
    const fromHttp = new TileHashes((tile) => fetched.get(tilePath(tile)), cp.size);
    const receipt = answers[123]?.meta?.audit as { index: number; leaf_hash: string };
    const proof = inclusionProof(fromHttp, receipt.index, cp.size);
    expect(verifyInclusion(receipt.index, cp.size, Buffer.from(receipt.leaf_hash, 'hex'), proof, cp.root)).toBe(true);

    // Only canonical tile paths, only regular files inside the tree, only reading.
    for (const path of [
      '/audit/log/tile/0/../../forge.log',
      '/audit/log/tile/0/%2e%2e/%2e%2e/forge.log',
      '/audit/log/tile/0/0000',
      '/audit/log/tile/0/x000/000',
      '/audit/log/tile/00/000',
      '/audit/log/tile/0/000.p/256',
      '/audit/log/tile/0/000.p/05',
      '/audit/log/tile/entries/000',
      '/audit/log/checkpoint.tmp-1',
      '/audit/log/',
      '/audit/log/tile/0/999',
    ]) {
      const r = await get(server.url, path);
      expect(r.status, path).toBe(404);
      expect(r.body.toString()).not.toContain('"seq"');
    }
    const tiles = `${log}.tlog`;
    unlinkSync(join(tiles, 'tile/0/000'));
    symlinkSync(log, join(tiles, 'tile/0/000'));
    expect((await get(server.url, '/audit/log/tile/0/000')).status).toBe(404);
    // The tree's directory swapped for a link to another directory that holds a "checkpoint".
    renameSync(tiles, `${tiles}.moved`);
    symlinkSync(`${tiles}.moved`, tiles);
    expect((await get(server.url, '/audit/log/checkpoint')).status).toBe(404);
    expect((await get(server.url, '/audit/log/checkpoint', { method: 'POST' })).status).toBe(405);
    expect((await get(server.url, '/audit/log/checkpoint', { host: 'evil.example' })).status).toBe(403);
  });

  it('with tokens, serves the tree to the personas named as its readers alone', async () => {
    const dirs = tempDirs();
    const forge = await newForge(dirs);
    const agent = 'a-long-enough-token-0123456789';
    const monitor = 'the-monitors-token-0123456789';
    const server = await serveHttp(forge, {
      tokens: { [agent]: { persona: 'agent' }, [monitor]: { persona: 'monitor' } },
      auditReaders: ['monitor'],
    });
    onTestFinished(() => server.close());
    expect((await get(server.url, '/audit/log/checkpoint')).status).toBe(401);
    // Another persona's token: the tree is derived from every persona's calls, so not to it.
    const refused = await get(server.url, '/audit/log/checkpoint', { token: agent });
    expect(refused.status).toBe(403);
    expect(JSON.parse(refused.body.toString()).error.message).toMatch(
      /served to the tokens of the personas named as its readers .*persona "agent"/,
    );
    expect((await get(server.url, '/audit/log/tile/0/000.p/1', { token: agent })).status).toBe(403);
    // The reader's token passes; no key here, so the tree has no signed checkpoint to serve.
    expect((await get(server.url, '/audit/log/checkpoint', { token: monitor })).status).toBe(404);
  });

  it('takes a tile path only in the one spelling tilePath writes, whatever is asked (property)', () => {
    const tile = fc.record({
      level: fc.integer({ min: 0, max: 63 }),
      index: fc.oneof(fc.integer({ min: 0, max: 2000 }), fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER })),
      width: fc.integer({ min: 1, max: 256 }),
    });
    // Every tile's own path is taken, and names that tile.
    fc.assert(
      fc.property(tile, (t) => {
        expect(tlogFile(tilePath(t))?.tile).toEqual(t);
      }),
    );
    // Anything else asked is a tile path's canonical spelling or nothing: never another file.
    const pieces = fc.constantFrom(
      'tile/',
      '0',
      '1',
      '9',
      '00',
      'x',
      'x0',
      '/',
      '.p/',
      '..',
      '.',
      '%2e',
      '//',
      'checkpoint',
      '000',
      '255',
      '256',
      '-1',
      ' ',
      '\\',
    );
    fc.assert(
      fc.property(
        fc.array(pieces, { maxLength: 12 }).map((xs) => xs.join('')),
        (rel) => {
          const t = tlogFile(rel);
          if (!t) return;
          if (rel === 'checkpoint') return;
          expect(t.tile && tilePath(t.tile)).toBe(rel);
        },
      ),
      { numRuns: 2000 },
    );
  });
});
