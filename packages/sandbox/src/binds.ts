import { closeSync, constants as fsc, fstatSync, openSync, readlinkSync, realpathSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join, sep } from 'node:path';

/** A path the caller (ultimately an agent) asks to see inside the sandbox. Hostile input. */
export interface BindRequest {
  /** Absolute host path; it appears at the same path inside. */
  path: string;
  /** `ro` (default) or `rw`. */
  mode?: 'ro' | 'rw';
  /** For `rw`: create the file (empty, mode 0600) when it does not exist yet. */
  create?: boolean;
}

/** Where binds may point. */
export interface BindRules {
  /** Directories a bind must lie inside (after resolving). Empty: nothing may be bound. */
  roots: readonly string[];
  /** Paths that may never be bound, nor any directory containing them (defaults: {@link defaultDenyList}). */
  deny?: readonly string[];
}

/** A bind that passed every check, held open by an `O_PATH` descriptor: the checked inode is the one mounted. */
export interface CheckedBind {
  path: string;
  mode: 'ro' | 'rw';
  kind: 'file' | 'directory';
  /** `O_PATH` descriptor of the checked inode; close with {@link closeBinds} after the run. */
  fd: number;
}

export type BindCheck = { ok: true; bind: CheckedBind } | { ok: false; code: 'bind_denied'; message: string };

// O_PATH is not in fs.constants; its value is the same on x86_64 and aarch64 (asm-generic).
const O_PATH = 0o10000000;

/** Secrets and credentials a sandbox never sees, whatever the roots say. */
export function defaultDenyList(home = homedir()): string[] {
  const h = (p: string) => join(home, p);
  return [
    h('.ssh'),
    h('.gnupg'),
    h('.aws'),
    h('.azure'),
    h('.config/gcloud'),
    h('.kube'),
    h('.docker'),
    h('.netrc'),
    h('.npmrc'),
    h('.pypirc'),
    h('.git-credentials'),
    h('.config/gh'),
    '/etc/shadow',
    '/etc/gshadow',
    '/etc/sudoers',
    '/root/.ssh',
    '/var/run/docker.sock',
    '/run/docker.sock',
  ];
}

function within(path: string, dir: string): boolean {
  return path === dir || path.startsWith(dir.endsWith(sep) ? dir : dir + sep);
}

function tryRealpath(p: string): string | undefined {
  try {
    return realpathSync(p);
  } catch {
    return undefined;
  }
}

/**
 * Checks one bind request and opens the path with `O_PATH | O_NOFOLLOW`. Refuses (`bind_denied`,
 * with the reason) a relative path, any `..` segment, a path that goes through a symbolic link, a
 * path outside every root, a path that is (or contains) a denied one, and anything but a regular
 * file or a directory (sockets, FIFOs, devices). After opening, the descriptor's own path is read
 * back from /proc and must be the checked one, so a rename or symlink swap between the check and
 * the open is caught, and the inode that was checked is the one bwrap mounts (`--bind-fd`).
 */
export function checkBind(req: BindRequest, rules: BindRules): BindCheck {
  const mode = req.mode ?? 'ro';
  const deny = (message: string): BindCheck => ({
    ok: false,
    code: 'bind_denied',
    message: `cannot bind ${JSON.stringify(req.path)}: ${message}`,
  });
  const path = req.path;
  if (typeof path !== 'string' || path.length === 0 || path.includes('\0')) return deny('not a path');
  if (!isAbsolute(path)) return deny('the path must be absolute');
  if (path.split('/').some((seg) => seg === '..' || seg === '.'))
    return deny('"." and ".." segments are not allowed; give the plain absolute path');
  const wanted = path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;

  const roots = rules.roots.map((r) => tryRealpath(r)).filter((r): r is string => r !== undefined);
  if (roots.length === 0) return deny('no bind roots are configured, so nothing may be bound');
  const inRoots = (p: string) => roots.some((r) => within(p, r));

  const denied = (p: string): BindCheck | undefined => {
    for (const d of rules.deny ?? defaultDenyList()) {
      const dr = tryRealpath(d) ?? d;
      if (within(p, dr)) return deny(`${dr} is never bound (credentials or forge's own state)`);
      if (within(dr, p)) return deny(`it contains ${dr}, which is never bound; bind a narrower path`);
    }
    return undefined;
  };

  let real = tryRealpath(wanted);
  if (real === undefined) {
    if (!(mode === 'rw' && req.create)) return deny('it does not exist');
    // Create the file first, inside an allowed root, never through a symlink, and never where
    // the deny list forbids (an empty file there can be harm enough: a policy file, say).
    const parent = tryRealpath(dirname(wanted));
    if (parent === undefined || parent !== dirname(wanted)) return deny('its directory does not exist or goes through a symbolic link');
    if (!inRoots(parent)) return deny(`it is outside the allowed roots (${roots.join(', ')})`);
    const refused = denied(wanted);
    if (refused) return refused;
    try {
      closeSync(openSync(wanted, fsc.O_CREAT | fsc.O_EXCL | fsc.O_WRONLY | fsc.O_NOFOLLOW, 0o600));
    } catch (err) {
      return deny(`it could not be created (${(err as NodeJS.ErrnoException).code})`);
    }
    real = wanted;
  }
  if (real !== wanted) return deny(`it goes through a symbolic link (it resolves to ${real}); bind the real path instead`);
  if (!inRoots(real)) return deny(`it is outside the allowed roots (${roots.join(', ')})`);
  const refused = denied(real);
  if (refused) return refused;

  let fd: number;
  try {
    fd = openSync(real, O_PATH | fsc.O_NOFOLLOW);
  } catch (err) {
    return deny(`it could not be opened (${(err as NodeJS.ErrnoException).code})`);
  }
  const refuse = (message: string): BindCheck => {
    closeSync(fd);
    return deny(message);
  };
  const st = fstatSync(fd);
  const kind = st.isFile() ? 'file' : st.isDirectory() ? 'directory' : undefined;
  if (!kind) {
    const what = st.isSocket() ? 'a socket' : st.isFIFO() ? 'a FIFO' : st.isSymbolicLink() ? 'a symbolic link' : 'a device or special file';
    return refuse(`it is ${what}; only regular files and directories can be bound`);
  }
  let opened: string;
  try {
    opened = readlinkSync(`/proc/self/fd/${fd}`);
  } catch {
    return refuse('its opened descriptor cannot be checked (/proc is not mounted)');
  }
  if (opened !== real) return refuse(`it changed while being checked (now ${opened}); try again`);
  return { ok: true, bind: { path: real, mode, kind, fd } };
}

/** Closes the descriptors of checked binds (after the run that used them). */
export function closeBinds(binds: readonly CheckedBind[]): void {
  for (const b of binds) {
    try {
      closeSync(b.fd);
    } catch {
      // already closed
    }
  }
}
