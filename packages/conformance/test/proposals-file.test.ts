import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { openProposalStore } from '../../toolsmith/src/proposals.js';
import { describeProposalStore } from '../src/proposals.js';
import { tempDir } from '../src/temp.js';

if (!existsSync(new URL('../../toolsmith/dist/index.js', import.meta.url))) {
  throw new Error(
    'the proposal store suite runs child processes against the built toolsmith: run `pnpm --filter @forge/toolsmith build` first',
  );
}

const OPENER = new URL('./toolsmith-file-stores.mjs', import.meta.url).pathname;

// The file store of @forge/toolsmith (<dir>/proposals/<id>.json): a fresh directory per test.
describeProposalStore('file store (openProposalStore)', async () => {
  const dir = tempDir('forge-conf-proposals-');
  return {
    open: async (options = {}) => openProposalStore({ dir: dir.path, ...options }),
    child: { module: OPENER, export: 'openFileProposalStore', args: [dir.path] },
    // A torn file, as a writer without the atomic steps would leave it.
    corrupt: (id) => writeFile(join(dir.path, 'proposals', `${id}.json`), '{"id": "half'),
    cleanup: async () => dir.remove(),
  };
});
