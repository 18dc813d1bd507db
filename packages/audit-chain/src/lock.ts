import { randomBytes } from 'node:crypto';
import { readFileSync, readlinkSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { AuditError } from './errors.js';

/**
 * A cross-process lock on one path, held as a directory `<path>` that holds an `owner` file.
 *
 * Why not proper-lockfile: it knows a holder only by the lock's mtime, so a crashed holder blocks
 * everyone for the stale period (2 s at the least, 10 s by default). Here the owner record says
 * which process holds the lock (host, pid namespace, boot, pid, process start time), so a waiter
 * on the same host can prove the holder dead and take over at once; mtime staleness remains the
 * fallback for holders it cannot inspect (another host on a shared filesystem).
 *
 * Acquiring renames a prepared directory (owner file already inside) onto `<path>`: rename onto
 * a non-empty directory fails, so the lock never exists without its owner record.
 *
 * What a process killed mid-operation leaves beside the lock (staging `<path>.<token>.tmp`,
 * removal `<path>.<token>.released` / `.dead`, break markers `<path>.break-<token>`) is removed at
 * acquire time (see {@link DirLock.sweep}): a leftover goes once its owner record names a process
 * provably dead, or, with no owner record yet, once it is older than the stale period (so a
 * directory another process is creating right now stays); a marker goes once its victim no longer
 * holds the lock. A live holder's directories are never touched.
 */
export interface LockOptions {
  /** A lock whose mtime is older than this, and whose holder cannot be inspected, is broken. */
  staleMs?: number;
  /** Give up (`lock_timeout`) after waiting this long. */
  timeoutMs?: number;
}

interface Owner {
  host: string;
  pidns: string;
  boot: string;
  pid: number;
  start: string;
  token: string;
  time: string;
}

const BREAK_MARKER_TTL_MS = 10 * 60_000;
/** A lock instance sweeps leftovers at its first acquire, after each break, and at most this often otherwise. */
const SWEEP_EVERY_MS = 60_000;
/** Leftover names after `<path>.`: break markers, then staging and removal directories. */
const LEFTOVER = /^(?:break-(.+)|([0-9a-f]{24})\.(?:tmp|dead|released))$/;

let selfIdentity: Omit<Owner, 'token' | 'time'> | undefined;

function readOr(fn: () => string, fallback: string): string {
  try {
    return fn();
  } catch {
    return fallback;
  }
}

/** Fields 3 on of /proc/<pid>/stat (state, ppid, …; start time at index 19), or [] when unreadable. */
function statFields(pid: number | 'self'): string[] {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return [];
  }
}

/** Start time of a process in clock ticks since boot (field 22 of /proc/<pid>/stat), or ''. */
function processStart(pid: number | 'self'): string {
  return statFields(pid)[19] ?? '';
}

function identity(): Omit<Owner, 'token' | 'time'> {
  selfIdentity ??= {
    host: hostname(),
    pidns: readOr(() => readlinkSync('/proc/self/ns/pid'), ''),
    boot: readOr(() => readFileSync('/proc/sys/kernel/random/boot_id', 'latin1').trim(), ''),
    pid: process.pid,
    start: processStart('self'),
  };
  return selfIdentity;
}

/** Whether this process can tell if the owner's process lives: same host and pid namespace. */
function canInspect(owner: Owner): boolean {
  const me = identity();
  return owner.host === me.host && owner.pidns === me.pidns;
}

/** True only when the owner is provably gone: same host and pid namespace, and its process is not. */
function ownerIsDead(owner: Owner): boolean {
  const me = identity();
  if (!canInspect(owner)) return false;
  if (owner.boot && me.boot && owner.boot !== me.boot) return true;
  try {
    process.kill(owner.pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
  // The pid exists. A zombie (exited, not yet reaped by its parent) holds nothing any more, and
  // a live holder on this host is never broken for staleness: without this, a holder whose
  // parent is slow to reap it would keep the lock. Otherwise the pid is the holder only if it
  // started when the holder did.
  const fields = statFields(owner.pid);
  if (fields[0] === 'Z' || fields[0] === 'X') return true;
  const now = fields[19];
  return Boolean(owner.start && now && now !== owner.start);
}

/** Whether `path` is a directory with nothing in it (false when it is absent or anything else). */
async function isEmptyDir(path: string): Promise<boolean> {
  try {
    return (await readdir(path)).length === 0;
  } catch {
    return false;
  }
}

function isBusy(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException).code;
  return code === 'ENOTEMPTY' || code === 'EEXIST' || code === 'EISDIR' || code === 'ENOTDIR';
}

export class DirLock {
  readonly path: string;
  private readonly staleMs: number;
  private readonly timeoutMs: number;
  private token: string | undefined;
  private refresh: NodeJS.Timeout | undefined;
  /** The next acquisition's directory, owner record inside, made ahead of need (see prepare()). */
  private prepared: { token: string; staging: string; at: number } | undefined;
  private preparing: Promise<void> | undefined;
  /** When this instance last swept leftovers (0: never; reset by a break). */
  private swept = 0;
  private sweeping: Promise<void> | undefined;

  constructor(path: string, options: LockOptions = {}) {
    this.path = path;
    this.staleMs = options.staleMs ?? 10_000;
    this.timeoutMs = options.timeoutMs ?? 30_000;
  }

  get held(): boolean {
    return this.token !== undefined;
  }

  /**
   * Makes the next acquisition's directory now (owner record inside), so that acquiring is one
   * rename: the writer calls it after a release that leaves nothing queued, off the path of the
   * next append.
   */
  prepare(): void {
    if (this.prepared || this.preparing) return;
    this.preparing = (async () => {
      const token = randomBytes(12).toString('hex');
      const staging = `${this.path}.${token}.tmp`;
      await this.stage(token, staging);
      this.prepared = { token, staging, at: Date.now() };
    })()
      .catch(() => {}) // acquire() makes one itself
      .finally(() => {
        this.preparing = undefined;
      });
  }

  /** Removes a prepared directory (the writer is closing). */
  async discard(): Promise<void> {
    await this.preparing;
    const p = this.prepared;
    this.prepared = undefined;
    if (p) await rm(p.staging, { recursive: true, force: true });
  }

  /**
   * Removes what dead processes left beside the lock: staging and removal directories whose owner
   * record names a process provably dead (same host and pid namespace, the way a dead holder's
   * lock is proven), or that have no owner record and are older than the stale period; break
   * markers whose victim no longer holds the lock (a victim's token never comes back), or whose
   * own breaker is provably dead; and, as before, anything older than ten minutes. Never throws.
   */
  sweep(): Promise<void> {
    this.swept = Date.now();
    this.sweeping ??= this.sweepNow().finally(() => {
      this.sweeping = undefined;
    });
    return this.sweeping;
  }

  private async sweepNow(): Promise<void> {
    const dir = dirname(this.path);
    const base = `${basename(this.path)}.`;
    const names = (await readdir(dir).catch(() => [] as string[])).filter((n) => n.startsWith(base) && LEFTOVER.test(n.slice(base.length)));
    if (names.length === 0) return;
    const holder = await this.currentToken();
    const now = Date.now();
    for (const name of names) {
      const m = LEFTOVER.exec(name.slice(base.length));
      const p = join(dir, name);
      const st = await stat(p).catch(() => undefined);
      if (!m || !st?.isDirectory()) continue;
      const owner = await readOwnerIn(p);
      const victim = m[1];
      let remove: boolean;
      if (now - st.mtimeMs > BREAK_MARKER_TTL_MS) remove = true;
      else if (victim !== undefined) {
        // A marker only stops a second waiter breaking the same holder; once that holder is gone
        // (its lock renamed away; tokens are random) a waiter that still wants to break it finds
        // another token when it rereads the owner, so the marker is no longer needed.
        const gone = !victim.startsWith('unknown-') && holder !== undefined && holder !== victim;
        remove = gone || (owner ? ownerIsDead(owner) : now - st.mtimeMs > this.staleMs);
      } else {
        // The owner record inside names the process that made it (staging, released) or the
        // holder it belonged to (dead): either way, a live one is at work on it.
        remove = owner ? owner.token === m[2] && ownerIsDead(owner) : now - st.mtimeMs > this.staleMs;
      }
      if (remove) await rm(p, { recursive: true, force: true }).catch(() => {});
    }
  }

  /** The token of the lock's holder, null when there is no lock, undefined when that cannot be told. */
  private async currentToken(): Promise<string | null | undefined> {
    try {
      const owner = JSON.parse(await readFile(join(this.path, 'owner'), 'utf8')) as Owner;
      return typeof owner?.token === 'string' ? owner.token : undefined;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ENOENT' ? null : undefined;
    }
  }

  private async stage(token: string, staging: string): Promise<void> {
    const owner: Owner = { ...identity(), token, time: new Date().toISOString() };
    await mkdir(staging, { mode: 0o700 });
    try {
      await writeFile(join(staging, 'owner'), `${JSON.stringify(owner)}\n`, { mode: 0o600 });
    } catch (err) {
      await rm(staging, { recursive: true, force: true });
      throw err;
    }
  }

  async acquire(): Promise<void> {
    if (this.token) throw new Error('DirLock.acquire: already held');
    if (this.preparing) await this.preparing;
    let prepared = this.prepared;
    this.prepared = undefined;
    if (prepared && Date.now() - prepared.at > BREAK_MARKER_TTL_MS / 2) {
      // Old enough for another writer's sweep to remove: make a fresh one.
      await rm(prepared.staging, { recursive: true, force: true });
      prepared = undefined;
    }
    const token = prepared?.token ?? randomBytes(12).toString('hex');
    const staging = prepared?.staging ?? `${this.path}.${token}.tmp`;
    if (!prepared) await this.stage(token, staging);
    // At the first acquire (and once a minute): what dead processes left goes before this one
    // takes the lock (a sweep already under way, from opening the log say, is waited for).
    if (this.sweeping) await this.sweeping;
    else if (Date.now() - this.swept > SWEEP_EVERY_MS) await this.sweep();
    try {
      const deadline = Date.now() + this.timeoutMs;
      let delay = 1;
      let broke = false;
      for (;;) {
        try {
          // rename(2) replaces an empty directory: one at the lock's path is another design's lock
          // (proper-lockfile's, an older forge's), held until it is stale like any holder that
          // cannot be inspected. (A lock of this design always holds its owner record. One of the
          // other design made between this look and the rename is still replaced: a one-syscall window.)
          if (await isEmptyDir(this.path)) throw Object.assign(new Error('held by a lock of another design'), { code: 'EEXIST' });
          await rename(staging, this.path);
          this.token = token;
          // A directory prepared a while ago carries that time: freshen it, or a waiter would
          // take the lock for stale.
          if (prepared && Date.now() - prepared.at > this.staleMs / 4) {
            const now = new Date();
            await utimes(this.path, now, now).catch(() => {});
          }
          this.refresh = setInterval(
            () => {
              const now = new Date();
              utimes(this.path, now, now).catch(() => {});
            },
            Math.max(50, Math.floor(this.staleMs / 3)),
          );
          this.refresh.unref();
          // A holder died and this waiter broke its lock: remove its marker and what else the
          // dead left, now that the lock is ours.
          if (broke) await this.sweep();
          return;
        } catch (err) {
          if (prepared && (err as NodeJS.ErrnoException).code === 'ENOENT') {
            // The prepared directory was removed meanwhile: make it again, once.
            prepared = undefined;
            await this.stage(token, staging);
            continue;
          }
          if (!isBusy(err)) throw err;
        }
        if (await this.tryBreak()) {
          broke = true;
          continue;
        }
        if (Date.now() > deadline) {
          const holder = await this.readOwner();
          throw new AuditError(
            'lock_timeout',
            `could not lock ${this.path} within ${this.timeoutMs} ms: held by ${holder ? `pid ${holder.pid} on ${holder.host} since ${holder.time}` : 'an unknown holder'}; if that process is stuck, stop it (a dead holder's lock is broken automatically)`,
          );
        }
        await sleep(delay + Math.random() * delay);
        delay = Math.min(delay * 2, 20);
      }
    } finally {
      if (this.token !== token) await rm(staging, { recursive: true, force: true });
    }
  }

  async release(): Promise<void> {
    const token = this.token;
    if (!token) return;
    this.token = undefined;
    clearInterval(this.refresh);
    const owner = await this.readOwner();
    // Only remove the lock if it is still ours (it is, unless it was judged stale and broken).
    if (owner?.token !== token) return;
    const gone = `${this.path}.${token}.released`;
    await rename(this.path, gone);
    await rm(gone, { recursive: true, force: true });
  }

  /** Who holds the lock now, as its owner record says (undefined when none is held, or unreadable). */
  async holder(): Promise<{ host: string; pid: number; time: string } | undefined> {
    const o = await this.readOwner();
    return o && typeof o.pid === 'number' ? { host: String(o.host), pid: o.pid, time: String(o.time) } : undefined;
  }

  /**
   * Whether this holder lost the lock while holding it: its owner record is gone or names another
   * token (a waiter judged it stale, which happens only to a holder it cannot inspect, on another
   * host or in another pid namespace). A holder about to publish a write asks first.
   */
  async lost(): Promise<boolean> {
    const token = this.token;
    if (!token) return true;
    return (await this.readOwner())?.token !== token;
  }

  private readOwner(): Promise<Owner | undefined> {
    return readOwnerIn(this.path);
  }

  /**
   * Breaks the current lock if its holder is provably dead, or cannot be inspected (another host
   * or pid namespace, no owner record) and its mtime is stale; a live holder on this host is
   * waited for however long it takes (`lock_timeout` names it). Returns true
   * when the caller should retry at once. Exactly one waiter breaks a given holder: it must first
   * create that holder's break marker, and markers outlive any plausible race.
   */
  private async tryBreak(): Promise<boolean> {
    const owner = await this.readOwner();
    let mtimeMs: number;
    try {
      mtimeMs = (await stat(this.path)).mtimeMs;
    } catch {
      return true; // released meanwhile
    }
    // A holder that can be inspected keeps the lock while its process lives, however long its
    // mtime goes unrefreshed: starved of CPU (or stopped) it is slow, not gone, and it still
    // writes the batch it built from the head it read, so a waiter that broke its lock would
    // append from that same head and fork the chain. Staleness judges only the others.
    const stale = Date.now() - mtimeMs > this.staleMs;
    if (!(owner && canInspect(owner) ? ownerIsDead(owner) : stale)) return false;
    const victim = owner?.token ?? `unknown-${Math.floor(mtimeMs)}`;
    const marker = `${this.path}.break-${victim}`;
    // The marker appears with its owner record in place (staged, then renamed: a rename onto an
    // existing marker fails), so a breaker killed at any point never leaves a marker that names
    // no one, which no waiter could prove dead and which would stall every waiter for the stale
    // period. What a killed breaker leaves is a staging directory, swept like any other.
    const token = randomBytes(12).toString('hex');
    const staging = `${this.path}.${token}.tmp`;
    try {
      await mkdir(staging, { mode: 0o700 });
      await writeFile(join(staging, 'owner'), `${JSON.stringify({ ...identity(), token, time: new Date().toISOString() })}\n`, {
        mode: 0o600,
      });
    } catch {
      await rm(staging, { recursive: true, force: true }).catch(() => {});
      return false;
    }
    try {
      await rename(staging, marker);
    } catch {
      await rm(staging, { recursive: true, force: true }).catch(() => {});
      return false; // another waiter is breaking (or broke) this holder
    }
    const again = await this.readOwner();
    if ((again?.token ?? `unknown-${Math.floor(mtimeMs)}`) === victim) {
      const dead = `${this.path}.${victim}.dead`;
      try {
        await rename(this.path, dead);
        await rm(dead, { recursive: true, force: true });
      } catch {
        // Vanished meanwhile: nothing to break.
      }
    }
    return true;
  }
}

/** The owner record in the directory `dir`, or undefined (absent, torn, not one). */
async function readOwnerIn(dir: string): Promise<Owner | undefined> {
  try {
    const owner = JSON.parse(await readFile(join(dir, 'owner'), 'utf8')) as Owner;
    return typeof owner?.token === 'string' && typeof owner.pid === 'number' ? owner : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Runs `fn` holding the cross-process lock at `path` (a {@link DirLock}: a directory holding its
 * owner's record, so a holder that died is taken over at once) and releases it however `fn` ends.
 * The directory `path` is in must exist. Rejects with an `AuditError` `lock_timeout`, naming the
 * holder, when a live holder keeps the lock past `timeoutMs`.
 */
export async function withDirLock<T>(path: string, fn: () => Promise<T>, options: LockOptions = {}): Promise<T> {
  const lock = new DirLock(path, options);
  await lock.acquire();
  try {
    return await fn();
  } finally {
    await lock.release().catch(() => {});
  }
}
