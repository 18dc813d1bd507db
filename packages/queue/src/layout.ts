import { constants } from 'node:fs';
import { access, lstat, mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { describeCause, QueueError } from './errors.js';
import { DIR_MODE, errno } from './fsx.js';

/** The six directories of the shared queue file protocol. */
export const QUEUE_DIRS = ['inbox', 'pending', 'lease', 'claimed', 'done', 'failed'] as const;

/** Absolute paths of a queue's directories. */
export interface Layout {
  root: string;
  inbox: string;
  pending: string;
  lease: string;
  claimed: string;
  done: string;
  failed: string;
}

/** The steps at which the file queue reports progress to `onStep` (each right after its system call). */
export const FILE_QUEUE_STEPS = {
  publish: ['publish.temp', 'publish.link', 'publish.unlink', 'publish.sync'],
  claim: ['claim.mkdir', 'claim.rename', 'claim.sync'],
  lease: ['lease.mkdir', 'lease.temp', 'lease.link', 'lease.sync'],
  renew: ['renew.temp', 'renew.rename', 'renew.sync'],
  note: ['note.temp', 'note.rename', 'note.sync'],
  finish: [
    'finish.seal',
    'finish.temp',
    'finish.link',
    'finish.sync',
    'finish.rename',
    'finish.sync-request',
    'finish.claim-removed',
    'finish.lease-removed',
  ],
  recover: ['recover.lost', 'recover.return', 'recover.sync', 'recover.claim-removed'],
} as const;

/** One named step of FILE_QUEUE_STEPS. */
export type FileQueueStep = (typeof FILE_QUEUE_STEPS)[keyof typeof FILE_QUEUE_STEPS][number];

/** What every queue operation needs: where, the clock, the limits, and the step hook. */
export interface Ctx {
  q: Layout;
  leaseMs: number;
  maxAttempts: number;
  now: () => number;
  host: string;
  step: (name: FileQueueStep) => void;
}

/** The paths of the queue rooted at `dir`. */
export function layoutOf(dir: string): Layout {
  const root = resolve(dir);
  return {
    root,
    inbox: join(root, 'inbox'),
    pending: join(root, 'pending'),
    lease: join(root, 'lease'),
    claimed: join(root, 'claimed'),
    done: join(root, 'done'),
    failed: join(root, 'failed'),
  };
}

/**
 * Creates the queue's directories (mode 0700) where missing and checks that each is a real,
 * writable directory; `queue_unusable` naming the one that is not.
 */
export async function prepareLayout(dir: string): Promise<Layout> {
  const q = layoutOf(dir);
  const paths = [q.root, ...QUEUE_DIRS.map((d) => q[d])];
  for (const path of paths) {
    try {
      await mkdir(path, { recursive: path === q.root, mode: DIR_MODE });
    } catch (err) {
      if (errno(err) !== 'EEXIST') {
        throw new QueueError(
          'queue_unusable',
          `cannot create the queue directory ${path}: ${describeCause(err)}; choose a directory this user can write, or create it with mode 0700`,
          { cause: err },
        );
      }
    }
    let ok = false;
    try {
      ok = (await lstat(path)).isDirectory();
      await access(path, constants.R_OK | constants.W_OK | constants.X_OK);
    } catch (err) {
      throw new QueueError(
        'queue_unusable',
        `the queue directory ${path} cannot be used: ${describeCause(err)}; give this user read and write access to it (chmod 700), or choose another directory`,
        { cause: err },
      );
    }
    if (!ok) {
      throw new QueueError(
        'queue_unusable',
        `${path} is not a directory (a file or a symlink is in its place); remove it or choose another queue directory`,
      );
    }
  }
  return q;
}
