import { existsSync } from 'node:fs';
import { appendFile } from 'node:fs/promises';
import { join } from 'node:path';
import { openGapStore } from '../../toolsmith/src/gaps.js';
import { describeGapStore } from '../src/gaps.js';
import { tempDir } from '../src/temp.js';

if (!existsSync(new URL('../../toolsmith/dist/index.js', import.meta.url))) {
  throw new Error('the gap store suite runs child processes against the built toolsmith: run `pnpm --filter @forge/toolsmith build` first');
}

const OPENER = new URL('./toolsmith-file-stores.mjs', import.meta.url).pathname;

// The file store of @forge/toolsmith (<dir>/gaps.jsonl): a fresh directory per test.
describeGapStore('file store (openGapStore)', async () => {
  const dir = tempDir('forge-conf-gaps-');
  return {
    open: async (options = {}) => openGapStore({ dir: dir.path, ...options }),
    child: { module: OPENER, export: 'openFileGapStore', args: [dir.path] },
    // A line that is not JSON, one that is not a record, and a torn last line (a writer killed mid-append).
    corrupt: () => appendFile(join(dir.path, 'gaps.jsonl'), 'not json\n{"kind":"missing_tool"}\n{"kind":"missing_tool","signa'),
    cleanup: async () => dir.remove(),
  };
});
