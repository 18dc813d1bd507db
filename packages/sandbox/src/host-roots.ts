import { lstat, readlink } from 'node:fs/promises';

/** How a top-level directory of the host appears in the sandbox. */
export interface RootEntry {
  /** `/bin`, `/lib64`, … */
  path: string;
  /** A merged-/usr symlink (`usr/bin`), recreated as a symlink; undefined: a real directory, bound read-only. */
  symlink?: string;
}

/** /bin, /lib, … as the host has them: merged-/usr symlinks, or real directories. */
export async function hostRoots(): Promise<RootEntry[]> {
  const out: RootEntry[] = [];
  for (const name of ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32']) {
    const path = `/${name}`;
    const st = await lstat(path).catch(() => undefined);
    if (!st) continue;
    if (st.isSymbolicLink()) out.push({ path, symlink: await readlink(path) });
    else if (st.isDirectory()) out.push({ path });
  }
  return out;
}
