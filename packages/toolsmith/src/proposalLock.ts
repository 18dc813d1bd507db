import { join } from 'node:path';
import { DirLock } from '@forge/audit-chain';
import { codedError } from './fsErrors.js';

/**
 * A lock whose holder cannot be inspected (another host or pid namespace) and stopped refreshing
 * it for this long is taken over; a holder on this host that died is taken over at once.
 */
export const LOCK_STALE_MS = 10_000;
/** How long a transition waits for a live holder of a proposal's lock. */
export const LOCK_WAIT_MS = 30_000;

/**
 * Runs `fn` holding the cross-process lock of proposal `id` in the store directory `root`
 * (`<id>.lock`, forge's one lock design: an owner record inside, see `DirLock` of
 * @forge/audit-chain), waiting up to `lockWaitMs` for a live holder. `fn` gets `lost()`: true
 * once the lock was taken from this process (judged stale from another host), so that it writes
 * nothing. Throws an Error with `code` `dir_unusable` (the lock cannot be made) or `lock_timeout`.
 */
export async function withProposalLock<T>(
  root: string,
  id: string,
  lockWaitMs: number,
  fn: (lost: () => Promise<boolean>) => Promise<T>,
): Promise<T> {
  const path = join(root, `${id}.lock`);
  const lock = new DirLock(path, { staleMs: LOCK_STALE_MS, timeoutMs: lockWaitMs });
  try {
    await lock.acquire();
  } catch (err) {
    if ((err as { code?: unknown }).code === 'lock_timeout')
      throw codedError('lock_timeout', `proposal ${id} in ${root} is locked by another process: ${(err as Error).message}`, err);
    throw codedError(
      'dir_unusable',
      `cannot lock proposal ${id} in ${root}: ${(err as Error).message}; check the directory's permissions`,
      err,
    );
  }
  try {
    return await fn(() => lock.lost());
  } finally {
    await lock.release().catch(() => {});
  }
}
