import { closeSync, constants as fsc, fstatSync, lstatSync, openSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { isAbsolute, join, sep } from 'node:path';

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
  /** Exact paths an operator allows although {@link CODE_PATH_NAMES} would refuse them. */
  allow?: readonly string[];
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
 * Files and directories through which a program on the host runs code or takes settings when a
 * person next works there: a git repository's config and hooks (`core.fsmonitor`, `core.pager`,
 * hooks), other version control, direnv, editors' workspace settings, shell start-up files, agent
 * and MCP configuration. A bind whose path has such a name as any component is refused, and so is
 * a `rw` bind of a directory that holds one directly, unless {@link BindRules.allow} names it.
 */
export const CODE_PATH_NAMES: readonly string[] = [
  '.git',
  '.gitconfig',
  '.gitmodules',
  '.hg',
  '.hgrc',
  '.svn',
  '.bzr',
  '.envrc',
  '.direnv',
  '.vscode',
  '.idea',
  '.devcontainer',
  '.bashrc',
  '.bash_profile',
  '.bash_login',
  '.bash_logout',
  '.profile',
  '.zshrc',
  '.zshenv',
  '.zprofile',
  '.zlogin',
  '.cshrc',
  '.tcshrc',
  '.kshrc',
  '.inputrc',
  '.mcp.json',
  '.claude',
  '.cursor',
  '.ripgreprc',
  '.pre-commit-config.yaml',
];

const O_DIRECTORY = fsc.O_DIRECTORY;
const CODE_NAMES_FOLDED = new Set(CODE_PATH_NAMES.map((n) => n.toLowerCase()));

function isCodePathName(name: string): boolean {
  return CODE_NAMES_FOLDED.has(name.toLowerCase());
}

const neverBound = (dr: string) => `${dr} is never bound (credentials or forge's own state)`;
const containsDenied = (dr: string) => `it contains ${dr}, which is never bound; bind a narrower path`;

interface Inode {
  dev: number;
  ino: number;
}

function sameInode(a: Inode, b: Inode): boolean {
  return a.dev === b.dev && a.ino === b.ino;
}

function inodeOf(fd: number): Inode {
  const st = fstatSync(fd);
  return { dev: st.dev, ino: st.ino };
}

/** The inodes of "/" and of each directory down to `path` (resolved), itself last; undefined when it does not exist or this user cannot reach it. */
function inodeChain(path: string): Inode[] | undefined {
  const out: Inode[] = [];
  let at = '';
  for (const part of ['', ...path.split('/').filter(Boolean)]) {
    at = part ? `${at}/${part}` : '/';
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(at);
    } catch {
      // Missing, or not reachable by this user (`/root/.ssh` for anyone but root): no inode to compare.
      return undefined;
    }
    if (!st) return undefined;
    out.push({ dev: st.dev, ino: st.ino });
    if (at === '/') at = '';
  }
  return out;
}

export type CanonicalPath = { ok: true; path: string } | { ok: false; message: string };

/**
 * The one spelling of a requested bind path, made before any check: absolute, repeated slashes
 * collapsed, no trailing slash, no "." or ".." segment (refused, not resolved: the caller names the
 * plain path). Every check, the walk and the mount see only this spelling.
 */
export function canonicalBindPath(path: unknown): CanonicalPath {
  if (typeof path !== 'string' || path.length === 0 || path.includes('\0')) return { ok: false, message: 'not a path' };
  if (!isAbsolute(path)) return { ok: false, message: 'the path must be absolute' };
  const parts = path.split('/').filter((seg) => seg !== '');
  if (parts.some((seg) => seg === '..' || seg === '.')) {
    return { ok: false, message: '"." and ".." segments are not allowed; give the plain absolute path' };
  }
  return { ok: true, path: `/${parts.join('/')}` };
}

function errno(err: unknown): string {
  return (err as NodeJS.ErrnoException).code ?? 'error';
}

/**
 * Checks one bind request and opens the path without ever re-walking it by name: each component
 * is opened relative to the descriptor of the one before (`/proc/self/fd/<dir>/<name>` with
 * `O_PATH | O_NOFOLLOW`, as `openat` does), so a symbolic link anywhere on the way, or one swapped
 * in while checking (a rename or `RENAME_EXCHANGE` race), stops the walk instead of being
 * followed. A `rw` + `create` bind creates its file relative to the parent's descriptor with
 * `O_CREAT | O_EXCL | O_NOFOLLOW`. Refuses (`bind_denied`, with the reason) a relative path, any
 * `..` segment, a path outside every root, a path that is (or contains) a denied one, a path
 * through which a host program runs code ({@link CODE_PATH_NAMES}), anything but a regular file
 * or a directory, and a `rw` file with other hard links. The descriptor is the inode that was
 * checked and is the one bwrap mounts (`--bind-fd`).
 */
export function checkBind(req: BindRequest, rules: BindRules): BindCheck {
  const mode = req.mode ?? 'ro';
  const deny = (message: string): BindCheck => ({
    ok: false,
    code: 'bind_denied',
    message: `cannot bind ${JSON.stringify(req.path)}: ${message}`,
  });
  const spelled = canonicalBindPath(req.path);
  if (!spelled.ok) return deny(spelled.message);
  // From here on only the canonical spelling is checked, walked and mounted.
  const wanted = spelled.path;

  const roots = rules.roots.map((r) => tryRealpath(r)).filter((r): r is string => r !== undefined);
  if (roots.length === 0) return deny('no bind roots are configured, so nothing may be bound');
  if (!roots.some((r) => within(wanted, r))) return deny(`it is outside the allowed roots (${roots.join(', ')})`);
  const denied = (rules.deny ?? defaultDenyList()).map((d) => tryRealpath(d) ?? d);
  for (const dr of denied) {
    if (within(wanted, dr)) return deny(neverBound(dr));
    if (within(dr, wanted)) return deny(containsDenied(dr));
  }
  const allowed = new Set((rules.allow ?? []).map((a) => tryRealpath(a) ?? a));
  // Compared without case: on a case-folding filesystem (vfat, ext4 casefold) ".GIT" is ".git".
  const codeName = wanted.split('/').find((seg) => isCodePathName(seg));
  if (codeName && !allowed.has(wanted)) {
    return deny(
      `${codeName} is where a program on the host finds code to run (a repository's config and hooks, shell or editor settings), so it is never bound by default; bind another path, or have an operator allow this one in policy (bind_allow)`,
    );
  }

  // The walk: "/" first, then one component at a time from the descriptor of the one before.
  const parts = wanted.split('/').filter(Boolean);
  let dir: number;
  try {
    dir = openSync('/', O_PATH | O_DIRECTORY);
  } catch (err) {
    return deny(`"/" could not be opened (${errno(err)})`);
  }
  const through = (i: number) => `/${parts.slice(0, i + 1).join('/')}`;
  const symlinkAt = (i: number) => {
    const real = tryRealpath(through(i));
    return i === parts.length - 1 && real
      ? `it goes through a symbolic link (it resolves to ${real}); bind the real path instead`
      : `it goes through a symbolic link (${through(i)}); bind the real path instead`;
  };
  // The inodes walked through, "/" first: what the kernel resolved, whatever the spelling was.
  const walked: Inode[] = [inodeOf(dir)];
  for (let i = 0; i < parts.length - 1; i++) {
    let next: number;
    try {
      next = openSync(`/proc/self/fd/${dir}/${parts[i]}`, O_PATH | O_DIRECTORY | fsc.O_NOFOLLOW);
    } catch (err) {
      closeSync(dir);
      const code = errno(err);
      if (code === 'ELOOP' || code === 'ENOTDIR') {
        const st = lstatSync(through(i), { throwIfNoEntry: false });
        return deny(st?.isSymbolicLink() ? symlinkAt(i) : `${through(i)} is not a directory`);
      }
      return deny(code === 'ENOENT' ? `its directory ${through(i)} does not exist` : `${through(i)} could not be opened (${code})`);
    }
    closeSync(dir);
    dir = next;
    walked.push(inodeOf(dir));
  }
  const name = parts[parts.length - 1] as string;
  const at = `/proc/self/fd/${dir}/${name}`;
  let fd: number | undefined;
  try {
    try {
      fd = openSync(at, O_PATH | fsc.O_NOFOLLOW);
    } catch (err) {
      if (errno(err) !== 'ENOENT') return deny(`it could not be opened (${errno(err)})`);
      if (!(mode === 'rw' && req.create)) return deny('it does not exist');
      // Created in the directory that was walked to, never through a name that could be swapped.
      try {
        closeSync(openSync(at, fsc.O_CREAT | fsc.O_EXCL | fsc.O_WRONLY | fsc.O_NOFOLLOW, 0o600));
        fd = openSync(at, O_PATH | fsc.O_NOFOLLOW);
      } catch (e) {
        return deny(`it could not be created (${errno(e)})`);
      }
    }
  } finally {
    closeSync(dir);
  }
  const refuse = (message: string): BindCheck => {
    closeSync(fd as number);
    return deny(message);
  };
  const st = fstatSync(fd);
  if (st.isSymbolicLink()) return refuse(symlinkAt(parts.length - 1));
  // The denied paths again, by identity: a spelling the names above did not catch (a folded
  // case, a hard link, a bind mount of forge's state elsewhere) still reaches the same inode.
  walked.push({ dev: st.dev, ino: st.ino });
  for (const dr of denied) {
    const chain = inodeChain(dr);
    if (!chain) continue;
    const target = chain[chain.length - 1] as Inode;
    if (walked.some((w) => sameInode(w, target))) return refuse(neverBound(dr));
    if (st.isDirectory() && chain.some((c) => sameInode(c, { dev: st.dev, ino: st.ino }))) return refuse(containsDenied(dr));
  }
  const kind = st.isFile() ? 'file' : st.isDirectory() ? 'directory' : undefined;
  if (!kind) {
    const what = st.isSocket() ? 'a socket' : st.isFIFO() ? 'a FIFO' : 'a device or special file';
    return refuse(`it is ${what}; only regular files and directories can be bound`);
  }
  if (mode === 'rw' && kind === 'file' && st.nlink > 1) {
    return refuse(`it has ${st.nlink} hard links, so writing it would change every other name of it too; bind a file with one link`);
  }
  if (mode === 'rw' && kind === 'directory') {
    try {
      const held = readdirSync(`/proc/self/fd/${fd}`).find((n) => isCodePathName(n));
      if (held && !allowed.has(wanted)) {
        return refuse(
          `it holds ${held}, where a program on the host finds code to run, and a rw bind would let the tool change it; bind a narrower directory, or have an operator allow this one in policy (bind_allow)`,
        );
      }
    } catch (err) {
      return refuse(`it could not be read (${errno(err)})`);
    }
  }
  return { ok: true, bind: { path: wanted, mode, kind, fd } };
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
