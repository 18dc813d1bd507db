import { readdir, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/** Paths of the files that make up one log (SPEC.md section 1). */
export interface LogFiles {
  /** The active segment. */
  active: string;
  dir: string;
  base: string;
  checkpoints: string;
  lock: string;
}

export function logFiles(path: string): LogFiles {
  const dir = dirname(path);
  const base = basename(path);
  return { active: path, dir, base, checkpoints: `${path}.checkpoints`, lock: `${path}.lock` };
}

export function segmentName(base: string, n: number): string {
  return `${base}.${String(n).padStart(6, '0')}`;
}

export interface SealedSegment {
  n: number;
  path: string;
}

/** Sealed segments of the log, sorted by number (gaps are the caller's to judge). */
export async function listSealedSegments(files: LogFiles): Promise<SealedSegment[]> {
  const names = await readdir(files.dir);
  const prefix = `${files.base}.`;
  const out: SealedSegment[] = [];
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    const rest = name.slice(prefix.length);
    const n = Number(rest);
    // Only the canonical spelling is a segment (SPEC.md section 1): L.000000 or L.0000001 are not.
    if (!/^\d{6,}$/.test(rest) || n < 1 || name !== segmentName(files.base, n)) continue;
    out.push({ n, path: join(files.dir, name) });
  }
  return out.sort((a, b) => a.n - b.n);
}

/** The bytes of every segment of the log, sealed and active (0 for what cannot be read). */
export async function logBytes(files: LogFiles): Promise<number> {
  let total = 0;
  for (const p of [...(await listSealedSegments(files)).map((s) => s.path), files.active]) {
    total += await stat(p).then(
      (st) => st.size,
      () => 0,
    );
  }
  return total;
}
