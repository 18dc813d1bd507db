/**
 * A log file's Merkle tree (SPEC.md section 9), built by reading every segment's lines in order:
 * each complete line is the next leaf. What is read is not verified here: verify the log first
 * (`verifyLog`) when the tree is to vouch for it.
 */
import { open } from 'node:fs/promises';
import { AuditError } from './errors.js';
import { scanLines } from './lines.js';
import { MemoryTree } from './merkle.js';
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
  const files = logFiles(path);
  const tree = new MemoryTree();
  const segments = [...(await listSealedSegments(files)).map((s) => s.path), files.active];
  for (const segment of segments) {
    if (tree.size >= entries) break;
    let fh: Awaited<ReturnType<typeof open>>;
    try {
      fh = await open(segment, 'r');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' && segment === files.active) break;
      throw new AuditError('io_error', `cannot read ${segment}: ${(err as Error).message}`);
    }
    try {
      const { size } = await fh.stat();
      await scanLines(fh, 0, size, (line) => {
        if (line.torn || line.oversized) return false;
        const leaf = line.bytes.subarray(0, line.bytes.length - 1);
        onLeaf?.(tree.size, leaf);
        tree.append(leaf);
        return tree.size < entries;
      });
    } finally {
      await fh.close();
    }
  }
  if (entries !== Number.MAX_SAFE_INTEGER && tree.size < entries)
    throw new AuditError('log_corrupt', `${path} holds ${tree.size} entries, not the ${entries} asked for`);
  return tree;
}
