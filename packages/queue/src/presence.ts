import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';

/** One process working a queue: a front-end that publishes calls, or a worker that runs them. */
export interface Member {
  /** Unique among the members (letters, digits, `_`, `-`). */
  name: string;
  kind: 'front-end' | 'worker';
  host: string;
  pid: number;
  /** When it started and when it last said it is alive (ms since the epoch). */
  startedAt: number;
  beatAt: number;
  /** Anything else it wants `forge status` to show (its version, its transport, its concurrency). */
  facts?: Record<string, string | number | boolean>;
}

/** Who works a queue: each member beats while it runs and leaves when it stops. */
export interface PresenceStore {
  /** Says `member` is alive now (creates or refreshes its record). */
  beat(member: Omit<Member, 'beatAt'>): Promise<void>;
  /** Removes a member's record (a clean stop). */
  leave(name: string): Promise<void>;
  /** Every member recorded, with whether it looks alive: a recent beat, and on this host a live pid. */
  list(options?: { staleMs?: number }): Promise<(Member & { alive: boolean })[]>;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$/;
/** A member whose last beat is older than this is shown as gone (beats come every few seconds). */
export const PRESENCE_STALE_MS = 30_000;

/**
 * Presence in a directory (`<queue>/../presence` for the file queue): one small JSON file per
 * member, replaced atomically at each beat, mode 0600. Readers skip what they cannot parse.
 */
export function filePresence(dir: string, now: () => number = Date.now): PresenceStore {
  const ensure = () => mkdirSync(dir, { recursive: true, mode: 0o700 });
  return {
    async beat(m) {
      if (!NAME.test(m.name)) throw new TypeError(`presence: member name ${JSON.stringify(m.name)} is not 1 to 100 of A-Z a-z 0-9 _ -`);
      ensure();
      const file = join(dir, `${m.name}.json`);
      const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
      const fd = openSync(tmp, 'wx', 0o600);
      try {
        writeSync(fd, JSON.stringify({ ...m, beatAt: now() }));
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      renameSync(tmp, file);
    },
    async leave(name) {
      if (NAME.test(name)) rmSync(join(dir, `${name}.json`), { force: true });
    },
    async list(o = {}) {
      const stale = o.staleMs ?? PRESENCE_STALE_MS;
      let names: string[];
      try {
        names = readdirSync(dir);
      } catch {
        return [];
      }
      const here = hostname();
      const out: (Member & { alive: boolean })[] = [];
      for (const n of names) {
        if (!n.endsWith('.json')) continue;
        let m: Member;
        try {
          m = JSON.parse(readFileSync(join(dir, n), 'utf8')) as Member;
        } catch {
          continue;
        }
        if (typeof m.name !== 'string' || typeof m.pid !== 'number' || typeof m.beatAt !== 'number') continue;
        out.push({ ...m, alive: looksAlive(m, now() - m.beatAt, stale, here) });
      }
      return out.sort((a, b) => (a.kind === b.kind ? (a.name < b.name ? -1 : 1) : a.kind === 'front-end' ? -1 : 1));
    },
  };
}

/**
 * Whether a member silent for `silentMs` looks alive: a beat within `staleMs`, and when it is on
 * this host (`here`), a process with its pid. For other presence stores (a database's).
 */
export function looksAlive(m: Pick<Member, 'host' | 'pid'>, silentMs: number, staleMs: number, here: string = hostname()): boolean {
  return silentMs < staleMs && (m.host !== here || pidAlive(m.pid));
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
