import { chmodSync, chownSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { SandboxIdentity } from './probe.js';
import { shellFor } from './shell.js';
import { processTempDir } from './tmp.js';

export { reachable } from './tmp.js';

import { which } from './which.js';

/**
 * Sources the sandbox's uid cannot reach, when this process is root and the sandbox runs as
 * another uid (see `SandboxIdentity`). bwrap resolves every mount source by path with the uid it
 * runs as, even one given by descriptor (`--bind-fd` reads the descriptor's path back and checks
 * the inode), so a source below a directory that uid cannot search (`/root`, a 0700 project or
 * temporary directory) cannot be mounted by it. Widening those directories would widen them for
 * every user of the host; instead the launcher, still root, enters a mount namespace of its own
 * (`unshare -m`, private propagation: nothing reaches the host's mount table) and binds each such
 * source onto a mount point in this process's staging directory, which only root and the
 * sandbox's group can search (0710). bwrap then mounts the staged path. A checked bind is staged
 * from its descriptor (`/proc/self/fd/N`), and the mount point is checked to hold that very inode
 * before bwrap starts, so the inode checked is the one mounted.
 */

let root: string | undefined;
let serial = 0;

/** This process's staging directory: made on first use (0710, group: the sandbox's), removed at exit. */
function stagingRoot(id: SandboxIdentity): string {
  if (root) return root;
  const dir = processTempDir('stage', id);
  chownSync(dir, process.getuid?.() ?? 0, id.gid);
  chmodSync(dir, 0o710);
  root = dir;
  return dir;
}

/** One source to stage: a path (a trusted mount) or `/proc/self/fd/N` (a checked bind's descriptor). */
export interface StageRequest {
  from: string;
  kind: 'file' | 'directory';
  /** A descriptor `from` refers to, closed once staged (bwrap never sees it, so would pass it on). */
  closeFd?: number;
  /**
   * Remount the staged point `noexec,nosuid,nodev` (a `rw` source): bwrap keeps a bind's flags, so
   * nothing the tool writes there can be executed or carry privileges, inside or through it.
   */
  noexec?: boolean;
}

/** What staging a run's sources gives: where each is mounted, the launcher's prefix, and the cleanup. */
export interface Staged {
  /** Mount point of each request, in order. */
  points: string[];
  /** argv to put before the rest of the launcher's command (empty when nothing is staged). */
  prefix: string[];
  /** Removes the mount points (after the sandbox that used them is gone). */
  remove(): void;
}

const NOTHING: Staged = { points: [], prefix: [], remove() {} };

/**
 * Makes a mount point per request and the launcher prefix that binds each source onto it in a
 * private mount namespace. Throws when `unshare` or `mount` (util-linux) cannot be found.
 */
export function stage(requests: readonly StageRequest[], id: SandboxIdentity): Staged {
  if (requests.length === 0) return NOTHING;
  const unshare = which('unshare', ['/usr/bin', '/bin']);
  const mount = which('mount', ['/usr/bin', '/bin']);
  if (!unshare || !mount) {
    throw new Error(
      'running as root, a source the sandbox uid cannot reach must be staged with unshare and mount (util-linux), and they are not installed: apt-get install -y util-linux mount',
    );
  }
  const dir = stagingRoot(id);
  const points = requests.map((r) => {
    const p = join(dir, `s${++serial}`);
    if (r.kind === 'directory') mkdirSync(p, { mode: 0o700 });
    else writeFileSync(p, '', { mode: 0o600, flag: 'wx' });
    return p;
  });
  // Sources and points go as arguments (never inside the script): any byte of a path is safe.
  // mount resolves the source's path itself (it refuses a /proc/self/fd link uncanonicalized), so
  // the point is then checked to be the very inode of the source (`-ef`: same device and inode).
  const binds = requests.map((r, i) => {
    const [a, b] = [`"\${${2 * i + 1}}"`, `"\${${2 * i + 2}}"`];
    const flags = r.noexec ? ` && ${mount} -o remount,bind,noexec,nosuid,nodev ${b}` : '';
    return `${mount} --bind ${a} ${b} && [ ${a} -ef ${b} ]${flags}`;
  });
  const args = requests.flatMap((r, i) => [r.from, points[i] as string]);
  const closes = requests.flatMap((r) => (r.closeFd === undefined ? [] : [`exec ${r.closeFd}<&-`]));
  return {
    points,
    prefix: [
      unshare,
      '--mount',
      '--propagation',
      'private',
      '--',
      shellFor(Math.max(0, ...requests.map((r) => r.closeFd ?? 0))),
      '-c',
      `${[...binds, ...closes].join(' && ')} && shift ${args.length} && exec "$@"`,
      'stage',
      ...args,
    ],
    remove() {
      for (const p of points) rmSync(p, { recursive: true, force: true });
    },
  };
}
