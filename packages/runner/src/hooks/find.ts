import { createHash } from 'node:crypto';
import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, readSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { PolicySnapshot } from '@forge/policy';

/**
 * Finding a call's hooks (docs/architecture.md "Hooks"): the executables of
 * `<home>/hooks/<stage>.d/` (every tool), then of `<home>/hooks/tools/<name>/<stage>.d/` (that
 * tool), each in lexical order, then the same under `<project>/.forge/hooks` when policy
 * `hooks.project` allows it; names starting with `.` are not hooks.
 *
 * Who may install a hook where: a hook runs around every call it applies to and may refuse or
 * rewrite it, so it must be the operator's. A hook file is a regular file (not a link) of at
 * most 1 MiB, executable by its owner, owned by the user forge runs as or by root, and writable
 * by no one else; so is each directory from `<home>/hooks` down to it. A file or directory there
 * that breaks the rule refuses every call it would apply to (`hook_failed`, naming it): a hook
 * someone else could have written is never run and never skipped.
 */

export type HookStage = 'pre' | 'post';

/** One hook as read for one call: its bytes are what runs and what the audit entry's digest names. */
export interface HookFile {
  path: string;
  /** `sha256:<hex>` of its bytes. */
  digest: string;
  bytes: Buffer;
}

/** The hooks that apply, in order, or the first thing that makes them untrustworthy. */
export type FoundHooks = { ok: true; hooks: HookFile[] } | { ok: false; path: string; message: string };

/** Largest hook file. */
export const MAX_HOOK_BYTES = 1 << 20;

/**
 * The hooks directories that apply under `snap`: the home's, then the project's when policy
 * `hooks.project` says so.
 */
export function hookRoots(paths: { hooksDir: string; projectForge: string }, snap: PolicySnapshot): string[] {
  return snap.policy.hooks.project ? [paths.hooksDir, join(paths.projectForge, 'hooks')] : [paths.hooksDir];
}

/**
 * The hooks of `stage` for the tool `name` under each of `roots` in turn. `seen`: what one look at
 * many tools has read so far, by directory (the global ones are read once for all of them).
 */
export function findHooks(roots: readonly string[], name: string, stage: HookStage, seen?: Map<string, FoundHooks>): FoundHooks {
  const hooks: HookFile[] = [];
  for (const root of roots) {
    const found = findUnder(root, name, stage, seen);
    if (!found.ok) return found;
    hooks.push(...found.hooks);
  }
  return { ok: true, hooks };
}

function findUnder(hooksDir: string, name: string, stage: HookStage, seen: Map<string, FoundHooks> | undefined): FoundHooks {
  const hooks: HookFile[] = [];
  if (!exists(hooksDir)) return { ok: true, hooks };
  for (const dir of [join(hooksDir, `${stage}.d`), join(hooksDir, 'tools', name, `${stage}.d`)]) {
    let found = seen?.get(dir);
    if (!found) {
      found = readHooksDir(hooksDir, dir);
      seen?.set(dir, found);
    }
    if (!found.ok) return found;
    hooks.push(...found.hooks);
  }
  return { ok: true, hooks };
}

/** The hooks in `dir` (under `hooksDir`), in lexical order: none when it does not exist. */
function readHooksDir(hooksDir: string, dir: string): FoundHooks {
  const hooks: HookFile[] = [];
  const uid = process.geteuid?.() ?? 0;
  if (!exists(dir)) return { ok: true, hooks };
  // Every directory from hooksDir down to this one.
  for (let d = dir; ; d = dirname(d)) {
    const bad = untrusted(d, uid, true);
    if (bad) return { ok: false, path: d, message: bad };
    if (d === hooksDir) break;
  }
  let names: string[];
  try {
    names = readdirSync(dir)
      .filter((n) => !n.startsWith('.'))
      .sort();
  } catch (err) {
    return { ok: false, path: dir, message: `cannot be read (${(err as NodeJS.ErrnoException).code})` };
  }
  for (const n of names) {
    const path = join(dir, n);
    const read = readHook(path, uid);
    if ('message' in read) return { ok: false, path, message: read.message };
    hooks.push(read);
  }
  return { ok: true, hooks };
}

/** Whether `p` exists (a dangling link counts); an error other than ENOENT counts too, and is met when it is read. */
function exists(p: string): boolean {
  try {
    return lstatSync(p, { throwIfNoEntry: false }) !== undefined;
  } catch {
    return true;
  }
}

/** Why `path` may not hold or be a hook, or undefined. */
function untrusted(path: string, uid: number, dir: boolean): string | undefined {
  let st: ReturnType<typeof lstatSync>;
  try {
    st = lstatSync(path);
  } catch (err) {
    return `cannot be read (${(err as NodeJS.ErrnoException).code})`;
  }
  if (st.isSymbolicLink()) return 'is a symbolic link: hooks and their directories must be real files and directories';
  if (dir ? !st.isDirectory() : !st.isFile()) return dir ? 'is not a directory' : 'is not a regular file';
  return ownership(st, uid);
}

function ownership(st: { uid: number; mode: number }, uid: number): string | undefined {
  if (st.uid !== uid && st.uid !== 0) return `belongs to uid ${st.uid}: only the user forge runs as (uid ${uid}) or root may install hooks`;
  if ((st.mode & 0o022) !== 0)
    return `is writable by ${st.mode & 0o002 ? 'everyone' : 'its group'} (mode ${(st.mode & 0o7777).toString(8)}): chmod go-w it`;
  return undefined;
}

/** The hook at `path`, read once by descriptor (what is checked is what runs), or why not. */
function readHook(path: string, uid: number): HookFile | { message: string } {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return { message: code === 'ELOOP' ? 'is a symbolic link: hooks must be real files' : `cannot be read (${code})` };
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return { message: 'is not a regular file' };
    const bad = ownership(st, uid);
    if (bad) return { message: bad };
    if ((st.mode & 0o100) === 0) return { message: 'is not executable by its owner: chmod u+x it, or move it out of the hooks directory' };
    if (st.size > MAX_HOOK_BYTES) return { message: `is ${st.size} bytes, over the ${MAX_HOOK_BYTES} a hook may have` };
    const bytes = Buffer.alloc(st.size);
    let at = 0;
    while (at < bytes.length) {
      const n = readSync(fd, bytes, at, bytes.length - at, at);
      if (n === 0) break;
      at += n;
    }
    const read = bytes.subarray(0, at);
    return { path, bytes: read, digest: `sha256:${createHash('sha256').update(read).digest('hex')}` };
  } finally {
    closeSync(fd);
  }
}
