import { constants as fsc } from 'node:fs';
import { type FileHandle, open, rename, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import type { Checkpoint } from './checkpoint.js';
import { AuditError, describeCause } from './errors.js';
import { buildLine, checkLine, encodeData, GENESIS_HASH, sha256Hex } from './format.js';
import { lastLine } from './lines.js';
import type { AppendResult, RotateResult, WriterIo } from './log-types.js';
import { assertRegular, openRegular } from './regular-file.js';
import { type LogFiles, listSealedSegments, segmentName } from './segments.js';

/** What the writer knows of the active segment, valid while (dev, ino, size) are unchanged. */
export interface Tail {
  dev: number;
  ino: number;
  size: number;
  seq: number;
  hash: string;
  segment: number;
}

/** The writer's way of writing: the batch write and data sync (replaceable for fault injection), the clock, the mode of new files. */
export interface SegmentIo {
  io: WriterIo;
  clock: () => Date;
  fileMode: number;
  /** Told of every line written and every rotation, once durable (the log's Merkle tree). */
  observer?: SegmentObserver;
}

/** What follows the segment's writes: lines written at a position, with their leaf hashes, and rotations. */
export interface SegmentObserver {
  written(segment: number, start: number, lines: readonly Buffer[], leaves: readonly Buffer[]): void;
  rotated(sealed: number, size: number): void;
}

/** The batch write and data sync used unless a test replaces them. */
export const defaultIo: WriterIo = {
  async write(handle, data) {
    let off = 0;
    while (off < data.length) {
      const { bytesWritten } = await handle.write(data, off, data.length - off);
      off += bytesWritten;
    }
  },
  datasync: (handle) => handle.datasync(),
};

/**
 * The active segment of one log as one writer sees it: the open file and its last entry (the
 * tail), kept current as other writers append and rotate, repaired when a crash tore its last line
 * (SPEC.md section 6), written a batch at a time (one write, one data sync, rolled back on
 * failure) and rotated (section 8). Every method but {@link close} runs under the writers' lock.
 */
export class ActiveSegment {
  private readonly io: WriterIo;
  private readonly clock: () => Date;
  private readonly fileMode: number;
  private readonly observer: SegmentObserver | undefined;
  private handle: FileHandle | undefined;
  private tail: Tail | undefined;

  constructor(
    private readonly path: string,
    private readonly files: LogFiles,
    o: SegmentIo,
  ) {
    this.io = o.io;
    this.clock = o.clock;
    this.fileMode = o.fileMode;
    this.observer = o.observer;
  }

  /** Bytes of the active segment after the last write (0 before the first refresh). */
  get size(): number {
    return this.tail?.size ?? 0;
  }

  /** Forgets the tail: the next {@link refresh} reads it again (after a failure left the file in doubt). */
  forget(): void {
    this.tail = undefined;
  }

  /** Closes the file; a later {@link refresh} reopens it. */
  async close(): Promise<void> {
    await this.handle?.close();
    this.handle = undefined;
    this.tail = undefined;
  }

  /**
   * Brings `this.tail` up to date with the file under the lock: reopens after a rotation by
   * another writer, re-reads only the last line after another writer's append, repairs a torn
   * tail, and creates the active segment when a crash left none.
   */
  async refresh(): Promise<Tail> {
    const st = await stat(this.path).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return undefined;
      throw new AuditError('io_error', `cannot stat ${this.path}: ${describeCause(err)}`, { cause: err });
    });
    if (st && this.handle && this.tail && st.ino === this.tail.ino && st.dev === this.tail.dev) {
      return st.size === this.tail.size ? this.tail : this.readTail(this.tail.segment);
    }
    await this.handle?.close();
    this.handle = undefined;
    this.tail = undefined;
    try {
      // Only a regular file: a FIFO or device put in the log's place is refused (opened read-write,
      // a FIFO does not block the open on Linux; O_NONBLOCK is not kept on the log's own writes).
      this.handle = await open(this.path, fsc.O_RDWR | fsc.O_APPEND | fsc.O_CREAT, this.fileMode);
      await assertRegular(this.handle, this.path);
    } catch (err) {
      await this.handle?.close();
      this.handle = undefined;
      throw new AuditError('io_error', `cannot open ${this.path} for appending: ${describeCause(err)}`, { cause: err });
    }
    const sealed = await listSealedSegments(this.files);
    return this.readTail((sealed.at(-1)?.n ?? 0) + 1);
  }

  /** Reads the active segment's last entry into `this.tail`, repairing a torn tail first. */
  private async readTail(segment: number): Promise<Tail> {
    const fh = this.handle as FileHandle;
    const { dev, ino, size: fileSize } = await fh.stat();
    let size = fileSize;
    let last = await lastLine(fh, size);
    let repairNote: string | undefined;
    if (last?.torn) {
      repairNote = await this.repairTornTail(last.start, size);
      size = last.start;
      last = await lastLine(fh, size);
    }
    if (!last) {
      const prev = await this.sealedTail(segment - 1);
      this.tail = { dev, ino, size: 0, seq: prev.seq, hash: prev.hash, segment };
      if (segment > 1) {
        // A rotation crashed after sealing: start the segment with its header now.
        const header = { segment, previous: segmentName(this.files.base, segment - 1) };
        await this.write([{ type: 'audit.segment', dataJson: encodeData(header) }]);
      }
    } else {
      const c = checkLine(last.line);
      if (!c.ok) {
        this.tail = undefined;
        throw new AuditError(
          'log_corrupt',
          `the last entry of ${this.path} (at byte ${last.start}) is damaged: ${c.message}; refusing to append to a damaged log — run "forge-audit verify ${this.path}"`,
        );
      }
      this.tail = { dev, ino, size, seq: c.entry.seq, hash: c.entry.hash, segment };
    }
    if (repairNote) await this.write([{ type: 'audit.repaired', dataJson: repairNote }]);
    return this.tail as unknown as Tail;
  }

  /** The last entry of sealed segment `n` (seq 0 and genesis when `n` is 0). */
  private async sealedTail(n: number): Promise<{ seq: number; hash: string }> {
    if (n === 0) return { seq: 0, hash: GENESIS_HASH };
    const path = join(this.files.dir, segmentName(this.files.base, n));
    const fh = await openRegular(path);
    try {
      const t = await lastLine(fh, (await fh.stat()).size);
      const c = t && !t.torn ? checkLine(t.line) : undefined;
      if (!c?.ok) {
        throw new AuditError(
          'log_corrupt',
          `sealed segment ${path} does not end with a valid entry; run "forge-audit verify ${this.path}"`,
        );
      }
      return { seq: c.entry.seq, hash: c.entry.hash };
    } finally {
      await fh.close();
    }
  }

  /** Moves torn bytes [start, size) aside and truncates the active segment (SPEC.md section 6). */
  private async repairTornTail(start: number, size: number): Promise<string> {
    const fh = this.handle as FileHandle;
    const torn = Buffer.alloc(size - start);
    await fh.read(torn, 0, torn.length, start);
    const stamp = this.clock().toISOString().replace(/[:.]/g, '-');
    let name = '';
    for (let i = 0; ; i++) {
      name = `${this.files.base}.recovered-${stamp}-${i}`;
      try {
        const out = await open(join(this.files.dir, name), 'wx', this.fileMode);
        try {
          await out.write(torn);
          await out.datasync();
        } finally {
          await out.close();
        }
        break;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
    }
    await syncDir(this.files.dir);
    await fh.truncate(start);
    await fh.datasync();
    return encodeData({ reason: 'torn_tail', bytes: torn.length, offset: start, recovered: name, sha256: sha256Hex(torn) });
  }

  /** Writes entries after the current tail as one write and one data sync; rolls back on failure. */
  async write(items: { type: string; dataJson: string }[]): Promise<AppendResult[]> {
    const t = this.tail as Tail;
    const fh = this.handle as FileHandle;
    const ts = this.clock().toISOString();
    const lines: Buffer[] = [];
    const leaves: Buffer[] = [];
    const results: AppendResult[] = [];
    let seq = t.seq;
    let prev = t.hash;
    for (const it of items) {
      seq++;
      const { line, hash, leaf } = buildLine(seq, ts, it.type, it.dataJson, prev);
      lines.push(line);
      leaves.push(leaf);
      results.push({ seq, hash, ts });
      prev = hash;
    }
    const buf = lines.length === 1 ? (lines[0] as Buffer) : Buffer.concat(lines);
    try {
      await this.io.write(fh, buf);
      await this.io.datasync(fh);
    } catch (err) {
      // Take the file back to where the batch started, so no unacknowledged entry survives.
      try {
        await fh.truncate(t.size);
        await fh.datasync();
      } catch {
        this.tail = undefined; // unknown state: the next batch re-reads (and repairs) the tail
        await fh.close().catch(() => {});
        this.handle = undefined;
      }
      throw new AuditError('write_failed', `append to ${this.path} failed and was rolled back: ${describeCause(err)}`, { cause: err });
    }
    this.tail = { ...t, size: t.size + buf.length, seq, hash: prev };
    for (const [i, r] of results.entries()) r.leaf = (leaves[i] as Buffer).toString('hex');
    this.observer?.written(t.segment, t.size, lines, leaves);
    return results;
  }

  /** Seals the active segment and starts the next (SPEC.md section 8). Lock held, tail fresh. */
  async rotate(): Promise<RotateResult> {
    const t = this.tail as Tail;
    await this.write([{ type: 'audit.sealed', dataJson: encodeData({ segment: t.segment }) }]);
    const sealedPath = join(this.files.dir, segmentName(this.files.base, t.segment));
    await this.handle?.close();
    this.handle = undefined;
    await rename(this.path, sealedPath);
    await syncDir(this.files.dir);
    this.observer?.rotated(t.segment, (this.tail as Tail).size);
    this.handle = await open(this.path, fsc.O_RDWR | fsc.O_APPEND | fsc.O_CREAT | fsc.O_EXCL, this.fileMode);
    const st = await this.handle.stat();
    const sealedTail = this.tail as Tail;
    this.tail = { dev: st.dev, ino: st.ino, size: 0, seq: sealedTail.seq, hash: sealedTail.hash, segment: t.segment + 1 };
    await this.write([{ type: 'audit.segment', dataJson: encodeData({ segment: t.segment + 1, previous: basename(sealedPath) }) }]);
    await syncDir(this.files.dir);
    return { sealed: t.segment, path: sealedPath, entries: (this.tail as Tail).seq };
  }

  /** Whether the active segment holds checkpoint `cp`'s entry at its offset (a sealed segment's checkpoint: verify covers it). */
  async holds(cp: Checkpoint, t: Tail): Promise<boolean> {
    if (cp.entries === 0 || cp.segment < t.segment) return true;
    if (cp.segment > t.segment || t.size < cp.offset) return false;
    const at = await lastLine(this.handle as FileHandle, cp.offset);
    const c = at && !at.torn ? checkLine(at.line) : undefined;
    return c?.ok === true && c.entry.seq === cp.entries && c.entry.hash === cp.head;
  }
}

/** Makes a rename or a new file in `dir` durable. */
export async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}
