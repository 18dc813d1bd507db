import { existsSync } from 'node:fs';
import { lstat } from 'node:fs/promises';
import { join } from 'node:path';
import { FILE_QUEUE_STEPS, openFileQueue } from '@forge/queue';
import { describeJobQueue } from '../src/queue.js';
import { tempDir } from '../src/temp.js';

if (!existsSync(new URL('../../queue/dist/index.js', import.meta.url))) {
  throw new Error('the job queue suite runs child processes against the built queue: run `pnpm --filter @forge/queue build` first');
}

const OPENER = new URL('./queue-file-open.mjs', import.meta.url).pathname;

describeJobQueue('file queue (openFileQueue)', async () => {
  const dir = tempDir('forge-conf-queue-');
  const exists = async (p: string) =>
    lstat(p).then(
      () => true,
      () => false,
    );
  return {
    open: (options) => openFileQueue(dir.path, options),
    child: { module: OPENER, export: 'openFileQueueChild', spec: { dir: dir.path } },
    crashSteps: FILE_QUEUE_STEPS,
    // The protocol's durable states: pending/J, claimed/J/J, done/J, failed/J.
    statesOf: async (id) => {
      const J = `${id}.req.json`;
      const where: Record<string, string> = {
        pending: join(dir.path, 'pending', J),
        claimed: join(dir.path, 'claimed', J, J),
        done: join(dir.path, 'done', J),
        failed: join(dir.path, 'failed', J),
      };
      const states: string[] = [];
      for (const [state, path] of Object.entries(where)) if (await exists(path)) states.push(state);
      return states;
    },
    cleanup: async () => dir.remove(),
  };
});
