import { existsSync } from 'node:fs';
import { filePresence } from '@forge/queue';
import { describePresenceStore } from '../src/presence.js';
import { tempDir } from '../src/temp.js';

if (!existsSync(new URL('../../queue/dist/index.js', import.meta.url))) {
  throw new Error('the presence suite runs child processes against the built queue package: run `pnpm --filter @forge/queue build` first');
}

describePresenceStore('files (filePresence)', async () => {
  const dir = tempDir('forge-conf-presence-');
  return {
    open: async () => filePresence(dir.path),
    child: { module: new URL('../../queue/dist/index.js', import.meta.url).pathname, export: 'filePresence', args: [dir.path] },
    cleanup: async () => dir.remove(),
  };
});
