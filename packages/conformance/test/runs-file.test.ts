import { existsSync } from 'node:fs';
import { mkdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { runDirName } from '../../runner/src/runIds.js';
import { fileRunStore } from '../../runner/src/runStore.js';
import { describeRunStore, runIdOf } from '../src/runs.js';
import { tempDir } from '../src/temp.js';

if (!existsSync(new URL('../../runner/dist/index.js', import.meta.url))) {
  throw new Error('the run store suite runs child processes against the built runner: run `pnpm --filter @forge/runner build` first');
}

const OPENER = new URL('./cache-file-store.mjs', import.meta.url).pathname;

describeRunStore('file store (fileRunStore)', async () => {
  const dir = tempDir('forge-conf-runs-');
  return {
    open: async () => fileRunStore(dir.path),
    runDir: async (runId) => {
      const run = join(dir.path, runDirName(runId) as string);
      await mkdir(join(run, 'artifacts'), { recursive: true, mode: 0o700 });
      return run;
    },
    child: { module: OPENER, export: 'openFileRunStore', args: [dir.path] },
    cleanup: async () => dir.remove(),
  };
});

it('the file store keeps today’s layout: <ts>_<id>/run_manifest.json (0600, pretty JSON) and hits.jsonl lines', async () => {
  const dir = tempDir('forge-conf-runs-');
  try {
    const store = fileRunStore(dir.path);
    const id = runIdOf();
    await mkdir(join(dir.path, runDirName(id) as string), { recursive: true });
    await store.writeManifest(id, { run_id: id, persona: 'p' });
    const file = join(dir.path, runDirName(id) as string, 'run_manifest.json');
    expect(await readFile(file, 'utf8')).toBe(`${JSON.stringify({ run_id: id, persona: 'p' }, null, 2)}\n`);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    const hit = runIdOf();
    await store.appendHit({ run_id: hit, seed_run: id, persona: 'p' });
    expect(await readFile(join(dir.path, 'hits.jsonl'), 'utf8')).toBe(`${JSON.stringify({ run_id: hit, seed_run: id, persona: 'p' })}\n`);
  } finally {
    dir.remove();
  }
});
