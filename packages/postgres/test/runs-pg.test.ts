import { createHash } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describeRunStore, runIdOf } from '@forge/conformance/runs';
import { describe, expect, it } from 'vitest';
import { postgresRunStore } from '../src/index.js';
import { codeOf, poolOn, tempDir, usePostgres } from './helpers.js';

const pg = usePostgres();
const OPENER = new URL('./cache-runs-child-stores.mjs', import.meta.url).pathname;

/** A run directory with `files` among its artifacts, under `root`. */
async function runDir(root: string, id: string, files: Record<string, string | Buffer> = {}): Promise<string> {
  const dir = join(root, id);
  for (const [p, content] of Object.entries(files)) {
    await mkdir(join(dir, 'artifacts', p, '..'), { recursive: true });
    await writeFile(join(dir, 'artifacts', p), content);
  }
  await mkdir(join(dir, 'artifacts'), { recursive: true });
  return dir;
}

describeRunStore('postgres (postgresRunStore)', async () => {
  const { url, pool } = await pg.database();
  const root = await tempDir();
  return {
    open: async () => postgresRunStore(pool),
    runDir: (id) => runDir(root, id),
    child: { module: OPENER, export: 'openPgRunStore', args: [url] },
    cleanup: async () => {},
  };
});

const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

describe('postgresRunStore on a real server', () => {
  it('a front-end on another host reads a worker’s run: manifest, metadata, and the copied bytes after the worker’s disk is gone', async () => {
    const { pool } = await pg.database();
    const root = await tempDir();
    const worker = postgresRunStore(pool, { host: 'worker-1' });
    const front = postgresRunStore(pool, { host: 'front-1' });
    const id = runIdOf();
    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 9]);
    const dir = await runDir(root, id, { 'plot.png': png, 'out/a.json': '{"a":1}' });
    await worker.writeManifest(id, { run_id: id, persona: 'alice' }, { runDir: dir });
    await rm(dir, { recursive: true });
    expect(await front.readManifest(id)).toEqual({ kind: 'run', manifest: { run_id: id, persona: 'alice' } });
    expect(await front.listArtifacts(id)).toEqual([
      { path: 'out', bytes: 0, kind: 'directory' },
      { path: 'out/a.json', bytes: 7, kind: 'file', sha256: sha('{"a":1}'), mime_type: 'application/json', bytes_kept: 'store' },
      { path: 'plot.png', bytes: 9, kind: 'file', sha256: sha(png), mime_type: 'image/png', bytes_kept: 'store' },
    ]);
    expect(await front.readArtifact(id, 'plot.png', 100)).toEqual({ ok: true, bytes: png });
  });

  it('over the caps the bytes stay on the worker: listed with host and path, read there, refused elsewhere naming both', async () => {
    const { pool } = await pg.database();
    const root = await tempDir();
    const worker = postgresRunStore(pool, { host: 'worker-1', maxArtifactBytes: 1000, maxRunBytes: 1500 });
    const front = postgresRunStore(pool, { host: 'front-1' });
    const id = runIdOf();
    const dir = await runDir(root, id, {
      'a.bin': 'a'.repeat(800),
      'b.bin': 'b'.repeat(800),
      'big.bin': 'c'.repeat(5000),
      'small.txt': 's',
    });
    await worker.writeManifest(id, { run_id: id, persona: 'p' }, { runDir: dir });
    const listed = await front.listArtifacts(id);
    const kept = Object.fromEntries(listed.map((a) => [a.path, a.bytes_kept]));
    // a fits; b would pass the run cap (1600 > 1500); big is over the file cap; small still fits.
    expect(kept).toEqual({ 'a.bin': 'store', 'b.bin': 'worker', 'big.bin': 'worker', 'small.txt': 'store' });
    expect(listed.find((a) => a.path === 'big.bin')).toEqual({
      path: 'big.bin',
      bytes: 5000,
      kind: 'file',
      sha256: sha('c'.repeat(5000)),
      mime_type: 'application/octet-stream',
      bytes_kept: 'worker',
      host: 'worker-1',
      worker_path: join(dir, 'artifacts', 'big.bin'),
    });
    const elsewhere = await front.readArtifact(id, 'big.bin', 1 << 20);
    expect(elsewhere).toMatchObject({ ok: false, problem: 'elsewhere' });
    const message = (elsewhere as { message: string }).message;
    expect(message).toContain('host "worker-1"');
    expect(message).toContain(join(dir, 'artifacts', 'big.bin'));
    expect(await worker.readArtifact(id, 'big.bin', 1 << 20)).toEqual({ ok: true, bytes: Buffer.from('c'.repeat(5000)) });
    expect(await worker.readArtifact(id, 'big.bin', 10)).toMatchObject({ ok: false, problem: 'too_large', size: 5000 });
    expect(await front.readArtifact(id, 'a.bin', 1 << 20)).toEqual({ ok: true, bytes: Buffer.from('a'.repeat(800)) });
    await rm(dir, { recursive: true });
    expect(await worker.readArtifact(id, 'big.bin', 1 << 20)).toMatchObject({
      ok: false,
      problem: 'elsewhere',
      message: expect.stringContaining('no longer there'),
    });
  });

  it('an unmigrated database is not_migrated (password never shown); bad options throw', async () => {
    const url = await pg.server().database();
    const pool = poolOn(url);
    const store = postgresRunStore(pool, { where: 'postgres://forge:s3cret-pw@db.example/forge' });
    expect(store.where).toBe('postgres://forge:***@db.example/forge');
    expect(await codeOf(store.readManifest(runIdOf()))).toBe('not_migrated');
    const err = (await store.writeManifest(runIdOf(), { a: 1 }).catch((e: unknown) => e)) as Error & { code: string };
    expect(err.code).toBe('not_migrated');
    expect((err as Error).message).not.toContain('s3cret-pw');
    expect(() => postgresRunStore(pool, { maxRunBytes: -1 })).toThrow(/maxRunBytes must be a non-negative integer/);
  });
});
