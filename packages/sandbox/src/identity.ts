import { chmodSync, chownSync, closeSync, constants as fsc, lchownSync, lstatSync, openSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { claimInode } from './bind-lease.js';
import type { CheckedBind } from './binds.js';
import { SandboxError } from './errors.js';
import type { SandboxIdentity } from './probe.js';

/**
 * Binds for a sandbox that runs as another host uid than this process (this process is root, the
 * sandbox {@link SandboxIdentity}): the tool reaches a bound path with that uid's permissions only.
 *
 * - A `ro` bind must be readable by it as it is (its owner, group or other bits): nothing is
 *   changed to make it so, and one that is not is refused with what to do.
 * - A `rw` bind is handed to it for the run: the inode's owner becomes the sandbox uid, and when
 *   the run is over the owner *and mode* are set back (a tool's `chmod 2777` does not stay), with
 *   every entry the tool created under a bound directory given to the bound directory's owner
 *   without `o+w` or set-id bits. Nothing else changes hands.
 * - One run at a time holds an inode `rw`, across every forge process of the host (bind-lease.ts):
 *   another run's `rw` bind of a held inode is refused, never handed over twice.
 */
export interface BindGrant {
  /** Gives back what was handed over; call once, after the run (its processes are gone). */
  restore(): void;
}

const NONE: BindGrant = { restore() {} };

/** Readable (and for a directory searchable) by `id`, from the mode bits alone. */
function canRead(st: { uid: number; gid: number; mode: number }, id: SandboxIdentity, dir: boolean): boolean {
  const need = dir ? 0o5 : 0o4;
  const bits = st.uid === id.uid ? (st.mode >> 6) & 7 : st.gid === id.gid ? (st.mode >> 3) & 7 : st.mode & 7;
  return (bits & need) === need;
}

/**
 * Checks and prepares `binds` for `id`. Returns at once when the sandbox runs as this process's
 * own uid. Throws `bind_denied` for a `ro` bind the sandbox uid cannot read.
 */
export function grantBinds(binds: readonly CheckedBind[], id: SandboxIdentity): BindGrant {
  if (id.drop.length === 0 || binds.length === 0) return NONE;
  const handed: { path: string; uid: number; gid: number; mode: number; dir: boolean; release(): void }[] = [];
  const restore = () => {
    for (const h of handed.splice(0)) {
      try {
        if (h.dir) giveBack(h.path, id, h.uid, h.gid, 0);
        chownSync(h.path, h.uid, h.gid);
        chmodSync(h.path, h.mode);
      } catch {
        // gone meanwhile: nothing left to give back
      } finally {
        h.release();
      }
    }
  };
  try {
    for (const b of binds) {
      // Through the checked descriptor: the inode that is mounted, whatever the path is now.
      const at = `/proc/self/fd/${b.fd}`;
      const st = statSync(at);
      const dir = b.kind === 'directory';
      if (b.mode === 'ro') {
        if (!canRead(st, id, dir)) {
          throw new SandboxError(
            'bind_denied',
            `cannot bind ${JSON.stringify(b.path)} read-only: this process runs as root, so the tool runs as uid ${id.uid}, which cannot read it (owner uid ${st.uid}, mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')}); make it readable to others (chmod o+r${dir ? 'x' : ''}) or run forge as an ordinary user`,
          );
        }
        continue;
      }
      const claim = claimInode(st, b.path, id.uid);
      if (!claim.ok) throw new SandboxError('bind_denied', claim.message);
      handed.push({ path: at, uid: claim.uid, gid: claim.gid, mode: claim.mode, dir, release: claim.release });
      chownSync(at, id.uid, id.gid);
    }
  } catch (err) {
    restore();
    throw err;
  }
  return { restore };
}

/**
 * Gives every entry under the directory at `path` that belongs to the sandbox uid to `uid:gid`,
 * never following a link (the tool may have left any), down to a bounded depth.
 */
function giveBack(path: string, id: SandboxIdentity, uid: number, gid: number, depth: number): void {
  if (depth > 64) return;
  let fd: number;
  try {
    // The top is this process's /proc/self/fd link to the checked bind (followed on purpose);
    // below it, no name is followed.
    fd = openSync(path, fsc.O_RDONLY | fsc.O_DIRECTORY | (depth === 0 ? 0 : fsc.O_NOFOLLOW));
  } catch {
    return;
  }
  try {
    const here = `/proc/self/fd/${fd}`;
    for (const name of readdirSync(here)) {
      const at = join(here, name);
      const st = lstatSync(at, { throwIfNoEntry: false });
      if (!st) continue;
      if (st.uid === id.uid) {
        lchownSync(at, uid, gid);
        // Given back without set-user-id, set-group-id or o+w: nothing a tool left can run as, or be changed by, others.
        const safe = st.mode & 0o7777 & ~(0o4000 | 0o2000 | 0o002);
        if (!st.isSymbolicLink() && safe !== (st.mode & 0o7777)) chmodSync(at, safe);
      }
      if (st.isDirectory()) giveBack(at, id, uid, gid, depth + 1);
    }
  } finally {
    closeSync(fd);
  }
}
