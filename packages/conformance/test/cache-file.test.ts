import { existsSync } from 'node:fs';
import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { fileCacheStore } from '../../runner/src/cacheStore.js';
import { describeCacheStore, keyOf } from '../src/cache.js';
import { tempDir } from '../src/temp.js';

if (!existsSync(new URL('../../runner/dist/index.js', import.meta.url))) {
  throw new Error('the cache store suite runs child processes against the built runner: run `pnpm --filter @forge/runner build` first');
}

const OPENER = new URL('./cache-file-store.mjs', import.meta.url).pathname;

describeCacheStore('file store (fileCacheStore)', async () => {
  const dir = tempDir('forge-conf-cache-');
  return {
    open: async (o = {}) => fileCacheStore(dir.path, o.limits ?? {}, o.now ?? Date.now),
    child: { module: OPENER, export: 'openFileCacheStore', args: [dir.path] },
    // Half an entry, as a writer without the atomic steps would leave it.
    corrupt: async (key) => writeFile(join(dir.path, `${key}.json`), '{"envelope": {"ok": tr'),
    cleanup: async () => dir.remove(),
  };
});

it('the file store keeps today’s layout: <key>.json, mode 0600, and removes a write cut short when it opens', async () => {
  const dir = tempDir('forge-conf-cache-');
  try {
    const store = fileCacheStore(dir.path);
    await store.set(keyOf('a'), { ok: true, data: 1, meta: {} }, 'seed');
    const { statSync } = await import('node:fs');
    expect(statSync(join(dir.path, `${keyOf('a')}.json`)).mode & 0o777).toBe(0o600);
    expect(statSync(dir.path).mode & 0o777).toBe(0o700);
    await writeFile(join(dir.path, `${keyOf('b')}.json.tmp-1-x`), '{"half');
    fileCacheStore(dir.path);
    expect(await readdir(dir.path)).toEqual([`${keyOf('a')}.json`]);
  } finally {
    dir.remove();
  }
});
