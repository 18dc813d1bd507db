// How a child process of the job queue suite opens the file queue of queue-file.test.ts, with the
// crash hook armed from FORGE_QUEUE_CRASH_AT / FORGE_QUEUE_CRASH_SKIP.
import { openFileQueue } from '@forge/queue';

/** The file queue in `spec.dir`, killing this process with SIGKILL right after the armed step. */
export function openFileQueueChild(spec, options) {
  const at = process.env.FORGE_QUEUE_CRASH_AT;
  let skip = Number(process.env.FORGE_QUEUE_CRASH_SKIP ?? 0);
  const onStep = (step) => {
    if (step !== at) return;
    if (skip-- > 0) return;
    process.kill(process.pid, 'SIGKILL');
  };
  return openFileQueue(spec.dir, { ...options, ...(at ? { onStep } : {}) });
}
