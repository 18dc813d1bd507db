/**
 * What probe()'s trial sandbox found, kept in a file so that a one-shot command (a CLI call, a
 * worker's first job) does not start a trial sandbox every time: bwrap's version and the trial's
 * outcome. A kept answer is used only while everything the trial depends on is as it was when it
 * ran: the boot, bwrap's binary (path, inode, size, time, mode, owner), the setpriv it runs behind,
 * this process's uid and gid, the sandbox's identity, the host roots bound, the kernel's user
 * namespace switches and the trial itself. Only a trial that passed is kept: a host that fails is
 * probed again each time, so its fix is seen at once. A file that is not this user's own, readable
 * by others, or not a kept answer is ignored (and replaced).
 */
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, lstatSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

/** Bumped whenever what a kept answer holds, or what it is keyed on, changes. */
const FORMAT = 1;

/** Kernel switches a trial sandbox's outcome depends on (absent ones count as absent). */
const SWITCHES = [
  '/proc/sys/kernel/unprivileged_userns_clone',
  '/proc/sys/user/max_user_namespaces',
  '/proc/sys/kernel/apparmor_restrict_unprivileged_userns',
  '/proc/sys/kernel/apparmor_restrict_unprivileged_unconfined',
];

/** What a trial that passed found. */
export interface TrialFacts {
  /** bwrap's version. */
  version: string;
  /** Whether RLIMIT_NPROC counts per user namespace here (see HostInfo.processLimit). */
  perRun: boolean;
}

/**
 * The key a kept answer must match: everything the trial's outcome depends on, hashed. Undefined
 * when one of them cannot be read (then nothing is kept or used).
 */
export function trialKey(o: {
  bwrap: string;
  drop: readonly string[];
  identity: { uid: number; gid: number };
  roots: unknown;
  trial: readonly string[];
}): string | undefined {
  try {
    const file = (p: string) => {
      const st = statSync(p);
      return [p, st.dev, st.ino, st.size, st.mtimeMs, st.ctimeMs, st.mode, st.uid];
    };
    const parts = {
      format: FORMAT,
      boot: readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim(),
      bwrap: file(o.bwrap),
      drop: o.drop.length > 0 ? [file(o.drop[0] as string), ...o.drop.slice(1)] : [],
      self: [process.getuid?.(), process.getgid?.()],
      identity: [o.identity.uid, o.identity.gid],
      roots: o.roots,
      switches: SWITCHES.map((p) => {
        try {
          return readFileSync(p, 'utf8').trim();
        } catch {
          return null;
        }
      }),
      trial: o.trial,
    };
    return createHash('sha256').update(JSON.stringify(parts)).digest('hex');
  } catch {
    return undefined;
  }
}

/** The answer kept in `file` under `key`, when there is one this process may trust. */
export function readTrial(file: string, key: string): TrialFacts | undefined {
  try {
    const st = lstatSync(file);
    if (!st.isFile() || st.uid !== process.getuid?.() || (st.mode & 0o077) !== 0) return undefined;
    const kept = JSON.parse(readFileSync(file, 'utf8')) as { key?: unknown; version?: unknown; perRun?: unknown };
    if (kept.key !== key || typeof kept.version !== 'string' || typeof kept.perRun !== 'boolean') return undefined;
    return { version: kept.version, perRun: kept.perRun };
  } catch {
    return undefined;
  }
}

/** Keeps `facts` in `file` under `key` (0600, replaced whole); a failure to write is not an error. */
export function keepTrial(file: string, key: string, facts: TrialFacts): void {
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  try {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    const fd = openSync(tmp, 'wx', 0o600);
    try {
      writeSync(fd, JSON.stringify({ key, ...facts }));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, file);
  } catch {
    rmSync(tmp, { force: true });
  }
}
