import type { FileHandle } from 'node:fs/promises';

/** Longest line a reader accepts before calling it malformed (bounds memory on hostile input). */
export const MAX_LINE_BYTES = 16 << 20;

export interface RawLine {
  /**
   * The line's bytes including its final '\n' (absent only for a torn last line). A view into a
   * reused buffer: valid only during the callback.
   */
  bytes: Buffer;
  /** Byte offset of the line's first byte in the file. */
  start: number;
  /** True when the line is the last bytes read and lacks a final '\n'. */
  torn: boolean;
  /** True when the line was longer than {@link MAX_LINE_BYTES} and was cut short. */
  oversized: boolean;
}

/**
 * Calls `onLine` for each line of an open file from `from` up to `end` (exclusive), reading in
 * large chunks with bounded memory (one chunk plus one line). `onLine` returns `false` to stop.
 * Returns the offset just past the last complete line delivered.
 */
export async function scanLines(
  fh: FileHandle,
  from: number,
  end: number,
  onLine: (line: RawLine) => boolean,
  chunkBytes = 1 << 20,
): Promise<number> {
  let pos = from;
  let carry: Buffer | undefined;
  let carryStart = from;
  let oversized = false;
  const chunk = Buffer.allocUnsafe(chunkBytes);
  while (pos < end) {
    const { bytesRead } = await fh.read(chunk, 0, Math.min(chunkBytes, end - pos), pos);
    if (bytesRead === 0) break;
    const buf = chunk.subarray(0, bytesRead);
    let i = 0;
    for (;;) {
      const nl = buf.indexOf(0x0a, i);
      if (nl < 0) break;
      let line: RawLine;
      if (carry) {
        line = { bytes: oversized ? carry : Buffer.concat([carry, buf.subarray(i, nl + 1)]), start: carryStart, torn: false, oversized };
        carry = undefined;
        oversized = false;
      } else {
        line = { bytes: buf.subarray(i, nl + 1), start: pos + i, torn: false, oversized: false };
      }
      i = nl + 1;
      if (onLine(line) === false) return line.start + line.bytes.length;
    }
    if (i < buf.length) {
      const rest = buf.subarray(i);
      if (!carry) {
        carry = Buffer.from(rest);
        carryStart = pos + i;
      } else if (!oversized) {
        carry = Buffer.concat([carry, rest]);
      }
      if (carry.length > MAX_LINE_BYTES) {
        carry = carry.subarray(0, MAX_LINE_BYTES);
        oversized = true;
      }
    }
    pos += bytesRead;
  }
  if (carry) {
    onLine({ bytes: carry, start: carryStart, torn: true, oversized });
    return carryStart;
  }
  return pos;
}

/** The last line ending at or before `size`: its bytes, start offset, and whether it lacks '\n'. */
export async function lastLine(fh: FileHandle, size: number): Promise<{ line: Buffer; start: number; torn: boolean } | undefined> {
  if (size === 0) return undefined;
  const chunk = 64 * 1024;
  let buf = Buffer.alloc(0);
  let pos = size;
  let torn: boolean | undefined;
  for (;;) {
    const len = Math.min(chunk, pos);
    pos -= len;
    const part = Buffer.alloc(len);
    await fh.read(part, 0, len, pos);
    buf = buf.length === 0 ? part : Buffer.concat([part, buf]);
    torn ??= buf[buf.length - 1] !== 0x0a;
    // Search for the newline that ends the previous line (skip the final byte if it is ours).
    const searchEnd = torn ? buf.length - 1 : buf.length - 2;
    const nl = searchEnd >= 0 ? buf.lastIndexOf(0x0a, searchEnd) : -1;
    if (nl >= 0) return { line: buf.subarray(nl + 1), start: pos + nl + 1, torn };
    if (pos === 0) return { line: buf, start: 0, torn };
  }
}
