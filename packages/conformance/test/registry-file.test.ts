import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileToolStore } from '@forge/registry';
import { describeToolStore } from '../src/registry.js';
import { tempDir } from '../src/temp.js';

if (!existsSync(new URL('../../registry/dist/index.js', import.meta.url))) {
  throw new Error('the tool store suite runs child processes against the built registry: run `pnpm --filter @forge/registry build` first');
}

const OPENER = new URL('./registry-file-store.mjs', import.meta.url).pathname;

describeToolStore('file store (fileToolStore)', async () => {
  const dir = tempDir('forge-conf-registry-');
  return {
    open: async (scope, options = {}) => fileToolStore(scope, join(dir.path, scope), options.builtins ?? []),
    child: { module: OPENER, export: 'openFileToolStore', args: [dir.path] },
    // A torn file, as a writer without the atomic steps would leave it.
    corrupt: async (scope, name) => writeFile(join(dir.path, scope, `${name}.json`), '{"name": "half'),
    cleanup: async () => dir.remove(),
  };
});
