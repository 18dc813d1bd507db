import { closeSync, constants as fsc, mkdirSync, openSync, readFileSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Host-wide leases on the inodes of `rw` binds (docs/security.md, invariant 3). When the sandbox
 * runs as another uid than forge (forge is root), a `rw` bind is handed to that uid for the run and
 * given back after it. Every run on the host shares that uid, so a second run handed the same
 * inode at once would have it taken back in the middle of its run by the first one's give-back, and
 * the give-back of the second would record the sandbox uid as the owner to restore. So one run at
 * a time may hold an inode `rw`: the lease is a file named by the inode (`<dev>-<ino>`) in
 * {@link LEASE_DIR}, created exclusively, holding the owner and mode to restore and the holding
 * process (pid and start time). Another run's claim of a held inode is refused; a lease whose
 * holder died (a crash or `kill -9` mid-run) is taken over with its recorded owner and mode, so the
 * give-back that did not happen happens at the end of the next run.
 */
export const LEASE_DIR = '/run/forge/bind-leases';

/** What a lease records: the inode's owner and mode before any run had it, and who holds it. */
interface LeaseRecord {
  uid: number;
  gid: number;
  mode: number;
  pid: number;
  start: string;
  path: string;
}

export type Claim = { ok: true; uid: number; gid: number; mode: number; release(): void } | { ok: false; message: string };

/** This process's start time (field 22 of /proc/self/stat): with the pid, a process the pid cannot be reused for. */
function startTime(pid: number | 'self'): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count fields after its last ')'.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

function alive(r: LeaseRecord): boolean {
  return startTime(r.pid) === r.start;
}

function readRecord(file: string): LeaseRecord | undefined {
  try {
    const r = JSON.parse(readFileSync(file, 'utf8')) as LeaseRecord;
    return Number.isInteger(r.uid) && Number.isInteger(r.gid) && Number.isInteger(r.mode) && Number.isInteger(r.pid) ? r : undefined;
  } catch {
    return undefined;
  }
}

function writeNew(file: string, r: LeaseRecord): boolean {
  let fd: number;
  try {
    fd = openSync(file, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
  try {
    writeSync(fd, JSON.stringify(r));
  } finally {
    closeSync(fd);
  }
  return true;
}

/**
 * Claims the inode `st` (of the bind `path`) for this run. `sandboxUid` is the uid runs are handed
 * inodes to: an inode owned by it with no live lease was left by a run that crashed and is being
 * recovered, and is refused too. The claim's `uid`, `gid` and `mode` are what to restore.
 */
export function claimInode(
  st: { dev: number; ino: number; uid: number; gid: number; mode: number },
  path: string,
  sandboxUid: number,
  dir = LEASE_DIR,
): Claim {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = join(dir, `${st.dev}-${st.ino}`);
  const me = { pid: process.pid, start: startTime('self') ?? '', path };
  const busy = (r: LeaseRecord | undefined): Claim => ({
    ok: false,
    message: `cannot bind ${JSON.stringify(path)} read-write: another run holds it read-write now (${r ? `forge process ${r.pid}, as ${JSON.stringify(r.path)}` : 'its lease is being taken over'}); runs of one host take a read-write bind one at a time, so call again when that run has ended`,
  });
  const release = () => {
    try {
      unlinkSync(file);
    } catch {
      // already gone
    }
  };
  for (let attempt = 0; attempt < 3; attempt++) {
    const fresh: LeaseRecord = { uid: st.uid, gid: st.gid, mode: st.mode & 0o7777, ...me };
    if (st.uid !== sandboxUid && writeNew(file, fresh)) return { ok: true, uid: fresh.uid, gid: fresh.gid, mode: fresh.mode, release };
    const held = readRecord(file);
    if (held && alive(held)) return busy(held);
    if (!held) {
      // No lease, and the inode is the sandbox uid's: a crashed run's leftover whose lease is gone.
      if (st.uid === sandboxUid) {
        return {
          ok: false,
          message: `cannot bind ${JSON.stringify(path)} read-write: it belongs to the sandbox user (uid ${sandboxUid}) and no run holds it, so a run that crashed left it; give it back to its owner (chown) and call again`,
        };
      }
      continue; // the lease went between the two reads: claim again
    }
    // The holder died mid-run: take the lease over by moving it aside (exactly one taker succeeds),
    // keeping the owner and mode it recorded, which this run restores at its end.
    const aside = `${file}.${process.pid}.${attempt}`;
    try {
      renameSync(file, aside);
    } catch {
      return busy(undefined);
    }
    const dead = readRecord(aside) ?? held;
    const taken: LeaseRecord = { uid: dead.uid, gid: dead.gid, mode: dead.mode, ...me };
    const ok = writeNew(file, taken);
    try {
      unlinkSync(aside);
    } catch {
      // gone
    }
    if (ok) return { ok: true, uid: taken.uid, gid: taken.gid, mode: taken.mode, release };
    return busy(readRecord(file));
  }
  return busy(undefined);
}
