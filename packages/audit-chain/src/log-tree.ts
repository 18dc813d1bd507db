/**
 * A log file's Merkle tree (SPEC.md section 9), built by reading every segment's lines in order:
 * each complete line is the next leaf. What is read is not verified here: verify the log first
 * (`verifyLog`) when the tree is to vouch for it.
 */
import type { FileHandle } from 'node:fs/promises';
import { AuditError } from './errors.js';
import { scanLines } from './lines.js';
import { MemoryTree } from './merkle.js';
import { openRegular } from './regular-file.js';
import { listSealedSegments, logFiles } from './segments.js';

/**
 * The tree of the first `entries` entries of the log at `path` (all of them by default);
 * `onLeaf` sees each leaf's line (without its newline) as it is added, by index.
 */
export async function logTree(
  path: string,
  entries = Number.MAX_SAFE_INTEGER,
  onLeaf?: (index: number, line: Buffer) => void,
): Promise<MemoryTree> {
  const tree = new MemoryTree();
  await eachLine(path, entries, (index, line) => {
    onLeaf?.(index, line);
    tree.append(line);
  });
  return tree;
}

/**
 * Calls `onLine` with each of the first `entries` lines of the log at `path` (every segment, in
 * order; each without its newline, a view valid during the call) and returns how many there
 * were; fewer than `entries` asked for (when not all) is `log_corrupt`.
 */
export async function eachLine(path: string, entries: number, onLine: (index: number, line: Buffer) => void): Promise<number> {
  return eachSegment(path, entries, async (fh, from) => {
    let n = from;
    const { size } = await fh.stat();
    await scanLines(fh, 0, size, (line) => {
      if (line.torn || line.oversized) return false;
      onLine(n++, line.bytes.subarray(0, line.bytes.length - 1));
      return n < entries;
    });
    return n;
  });
}

/**
 * Opens the log's segments in order (the sealed ones, then the active one; a missing active one
 * ends the log) while fewer than `entries` were read: `read` gets each open segment and the
 * count before it, and returns the count past it. Fewer than `entries` asked for (when not all)
 * is `log_corrupt`.
 */
export async function eachSegment(
  path: string,
  entries: number,
  read: (fh: FileHandle, before: number) => Promise<number>,
): Promise<number> {
  const files = logFiles(path);
  let n = 0;
  for (const segment of [...(await listSealedSegments(files)).map((s) => s.path), files.active]) {
    if (n >= entries) break;
    let fh: FileHandle;
    try {
      fh = await openRegular(segment);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' && segment === files.active) break;
      throw new AuditError('io_error', `cannot read ${segment}: ${(err as Error).message}`);
    }
    try {
      n = await read(fh, n);
    } finally {
      await fh.close();
    }
  }
  if (entries !== Number.MAX_SAFE_INTEGER && n < entries)
    throw new AuditError('log_corrupt', `${path} holds ${n} entries, not the ${entries} asked for`);
  return n;
}
