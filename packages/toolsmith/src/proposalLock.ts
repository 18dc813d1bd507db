import { createRequire } from 'node:module';
import { join } from 'node:path';
import type lockfileType from 'proper-lockfile';
import { codedError, errno } from './fsErrors.js';

// proper-lockfile (with graceful-fs) is loaded by the first transition: reading never locks.
const require = createRequire(import.meta.url);
let lockfileModule: typeof lockfileType | undefined;
function lockfile(): typeof lockfileType {
  lockfileModule ??= require('proper-lockfile') as typeof lockfileType;
  return lockfileModule;
}

/** A lock whose holder stopped refreshing it for this long is taken over (proper-lockfile's `stale`). */
export const LOCK_STALE_MS = 10_000;
/** How long a transition waits for a held lock: past the stale time, so a crashed holder is taken over, not failed on. */
export const LOCK_WAIT_MS = 30_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs `fn` holding the cross-process lock of proposal `id` in the store directory `root`
 * (`<id>.lock`), waiting up to `lockWaitMs` for another holder. `fn` gets `lost()`: true once the
 * lock was taken over (this process stalled past the stale time), so that it writes nothing.
 * Throws an Error with `code` `dir_unusable` (the lock cannot be made) or `lock_timeout`.
 */
export async function withProposalLock<T>(
  root: string,
  id: string,
  lockWaitMs: number,
  fn: (lost: () => boolean) => Promise<T>,
): Promise<T> {
  let compromised = false;
  let release: (() => Promise<void>) | undefined;
  const deadline = Date.now() + lockWaitMs;
  for (let wait = 5; !release; wait = Math.min(wait * 1.5, 100)) {
    try {
      release = await lockfile().lock(join(root, `${id}.json`), {
        realpath: false,
        lockfilePath: join(root, `${id}.lock`),
        stale: LOCK_STALE_MS,
        retries: 0,
        // Lost means this process stalled past the stale time and another may have taken over:
        // the write is then refused (`fn`'s `lost()`) rather than crashing the process.
        onCompromised: () => {
          compromised = true;
        },
      });
    } catch (err) {
      if (errno(err) !== 'ELOCKED') {
        throw codedError(
          'dir_unusable',
          `cannot lock proposal ${id} in ${root}: ${(err as Error).message}; check the directory's permissions`,
          err,
        );
      }
      if (Date.now() >= deadline) {
        throw codedError(
          'lock_timeout',
          `proposal ${id} in ${root} has been locked by another process for over ${lockWaitMs} ms; retry, or remove ${join(root, `${id}.lock`)} if no forge process is running`,
          err,
        );
      }
      await sleep(wait * (0.5 + Math.random()));
    }
  }
  try {
    return await fn(() => compromised);
  } finally {
    await release().catch(() => {});
  }
}
