import { createPublicKey, type KeyObject } from 'node:crypto';
import { constants as fsc } from 'node:fs';
import { type FileHandle, open, readFile, rename, stat, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import {
  type Checkpoint,
  checkpointLine,
  type KeyInput,
  latestCheckpoint,
  parseCheckpoint,
  signCheckpoint,
  toKey,
  verifyCheckpointSignature,
} from './checkpoint.js';
import { AuditError, describeCause } from './errors.js';
import { type AuditEntry, assertEventType, buildLine, checkLine, encodeData, GENESIS_HASH, SUFFIX_BYTES, sha256Hex } from './format.js';
import type { JsonValue } from './ijson.js';
import { lastLine } from './lines.js';
import { DirLock, type LockOptions } from './lock.js';
import { type LogFiles, listSealedSegments, logFiles, segmentName } from './segments.js';
import { tailLog } from './tail.js';
import { type FirstBad, verifyAfterCheckpoint } from './verify.js';

/** The default of `OpenAuditLogOptions.fullVerifyBytes`: 16 MiB, read and hashed in well under 100 ms. */
const FULL_VERIFY_BYTES = 16 * 1024 * 1024;

/** Low-level file operations the writer uses for a batch; replaceable to inject faults in tests. */
export interface WriterIo {
  write(handle: FileHandle, data: Buffer): Promise<void>;
  datasync(handle: FileHandle): Promise<void>;
}

const defaultIo: WriterIo = {
  async write(handle, data) {
    let off = 0;
    while (off < data.length) {
      const { bytesWritten } = await handle.write(data, off, data.length - off);
      off += bytesWritten;
    }
  },
  datasync: (handle) => handle.datasync(),
};

export interface OpenAuditLogOptions {
  /** Ed25519 private key (PEM or KeyObject) used to sign checkpoints. */
  signingKey?: KeyInput;
  /** Largest entry line accepted, in bytes (default 1 MiB). Larger appends fail `entry_too_large`. */
  maxEntryBytes?: number;
  /** Largest single write of a group commit, in bytes (default 4 MiB). */
  maxBatchBytes?: number;
  /** Rotate automatically once the active segment passes this size (default: never). */
  maxSegmentBytes?: number;
  /** Cross-process lock timing. */
  lock?: LockOptions;
  /** Mode of files the log creates (default 0o600). */
  fileMode?: number;
  /** Clock for entry and checkpoint times (default `() => new Date()`). */
  clock?: () => Date;
  /**
   * Refuse to open a log that is behind its latest checkpoint (default true). Turning this off
   * lets a writer extend a truncated or rolled-back history; its chain is then verified from the
   * first entry at open (no checkpoint is trusted to vouch for any), and a broken one is still
   * refused.
   */
  checkCheckpoint?: boolean;
  /**
   * A log of at most this many bytes (every segment) is verified from its first entry at open;
   * a larger one from its newest trusted checkpoint, which vouches for the entries before it
   * (default 16 MiB). A byte flipped before the checkpoint is then `verifyLog`'s to find.
   */
  fullVerifyBytes?: number;
  /**
   * A file outside the log's directory that keeps a copy of the newest signed checkpoint, replaced
   * after each one (needs `signingKey`). At open the log must hold the entry it names, so deleting
   * the log together with its checkpoint file is caught (`log_behind_checkpoint`).
   */
  anchorFile?: string;
  /** Replaces the batch write and data sync (fault injection in tests). */
  io?: Partial<WriterIo>;
}

/** What an acknowledged append returns: the entry is durable on disk. */
export interface AppendResult {
  seq: number;
  hash: string;
  ts: string;
}

export interface RotateResult {
  /** Number of the segment that was sealed. */
  sealed: number;
  /** Path of the sealed segment file. */
  path: string;
  /** Entries in the whole log after rotation (including the seal and the new segment's header). */
  entries: number;
}

/** The last entry of a log: its `seq` and `hash` (0 and `GENESIS_HASH` when the log is empty). */
export interface LogHead {
  seq: number;
  hash: string;
}

/** Options of {@link AuditLog.entries}. */
export interface EntriesOptions {
  /** First sequence number wanted (default 1). */
  from?: number;
}

/** An open, appendable log. Close it (or `await using`) to flush and release the file. */
export interface AuditLog {
  readonly path: string;
  /**
   * Appends one entry. Resolves once it is durable (written and data-synced as part of a group
   * commit); rejects with `invalid_type`, `invalid_data`, `entry_too_large`, `write_failed`,
   * `log_corrupt`, `lock_timeout` or `closed`, and then nothing of it is in the log.
   */
  append(type: string, data?: JsonValue): Promise<AppendResult>;
  /** Commits everything appended so far, then records a checkpoint (signed when a key is set). */
  checkpoint(): Promise<Checkpoint>;
  /** Commits everything appended so far, then seals the active segment and starts the next one. */
  rotate(): Promise<RotateResult>;
  /** Resolves when everything appended before the call is durable. */
  flush(): Promise<void>;
  /**
   * The last durable entry of the whole log, as seen by every process appending to it (read under
   * the writers' lock, after this log's own earlier appends): `{ seq: 0, hash: GENESIS_HASH }`
   * for an empty log. Rejects with `closed`, `log_corrupt` or `lock_timeout`.
   */
  head(): Promise<LogHead>;
  /**
   * Verified entries with `seq >= from` (default 1), oldest first, as committed when each is read:
   * every line's hash is checked and each entry must link to the one before it. Throws
   * `log_corrupt` at the first entry that fails (run `verifyLog` for the full verdict).
   */
  entries(options?: EntriesOptions): AsyncIterable<AuditEntry>;
  /** Flushes, then closes the file. Later appends reject with `closed`. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

interface Pending {
  type: string;
  dataJson: string;
  bytes: number;
  resolve(r: AppendResult): void;
  reject(e: unknown): void;
}

/** What the writer knows of the active segment, valid while (dev, ino, size) are unchanged. */
interface Tail {
  dev: number;
  ino: number;
  size: number;
  seq: number;
  hash: string;
  segment: number;
}

/**
 * Opens (creating when missing) the log at `path` for appending. The directory must exist.
 * Repairs a torn tail left by a crash (SPEC.md section 6), refuses a log that is behind its latest
 * checkpoint (`log_behind_checkpoint`), then verifies the entries after that checkpoint (every
 * entry without one; the checkpoint vouches for those before it, which are not read again) and
 * refuses a broken chain (`log_corrupt`, naming the first bad entry): nothing is appended to it.
 */
export async function openAuditLog(path: string, options: OpenAuditLogOptions = {}): Promise<AuditLog> {
  const writer = new Writer(path, options);
  try {
    await writer.open();
  } catch (err) {
    await writer.close().catch(() => {});
    throw err;
  }
  return writer;
}

class Writer implements AuditLog {
  readonly path: string;
  private readonly files: LogFiles;
  private readonly lock: DirLock;
  private readonly io: WriterIo;
  private readonly clock: () => Date;
  private readonly maxEntryBytes: number;
  private readonly maxBatchBytes: number;
  private readonly maxSegmentBytes: number;
  private readonly fileMode: number;
  private readonly key: KeyObject | undefined;
  private readonly checkCheckpoint: boolean;
  private readonly fullVerifyBytes: number;
  private readonly anchorFile: string | undefined;
  private handle: FileHandle | undefined;
  private tail: Tail | undefined;
  private queue: Pending[] = [];
  private scheduled = false;
  private chain: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(path: string, o: OpenAuditLogOptions) {
    this.path = path;
    this.files = logFiles(path);
    this.lock = new DirLock(this.files.lock, o.lock);
    this.io = { ...defaultIo, ...o.io };
    this.clock = o.clock ?? (() => new Date());
    this.maxEntryBytes = o.maxEntryBytes ?? 1 << 20;
    this.maxBatchBytes = Math.max(o.maxBatchBytes ?? 4 << 20, this.maxEntryBytes);
    this.maxSegmentBytes = o.maxSegmentBytes ?? Number.POSITIVE_INFINITY;
    this.fileMode = o.fileMode ?? 0o600;
    this.key = o.signingKey === undefined ? undefined : toKey(o.signingKey, 'private', 'signingKey');
    this.checkCheckpoint = o.checkCheckpoint ?? true;
    this.fullVerifyBytes = o.fullVerifyBytes ?? FULL_VERIFY_BYTES;
    this.anchorFile = o.anchorFile;
  }

  async open(): Promise<void> {
    try {
      await stat(this.files.dir);
    } catch (err) {
      throw new AuditError(
        'io_error',
        `cannot open log ${this.path}: directory ${this.files.dir} is not accessible (${describeCause(err)}); create it first`,
        { cause: err },
      );
    }
    await this.serial(() =>
      this.withLock(async () => {
        // Reading the tail now repairs a torn last line and refuses a damaged one at open time.
        try {
          await this.refresh();
        } catch (err) {
          // A damaged last line: name the first damaged entry instead, which may come before it.
          if (err instanceof AuditError && err.code === 'log_corrupt') {
            await this.assertChainIntact(this.checkCheckpoint ? await this.anchors().catch(() => undefined) : undefined);
          }
          throw err;
        }
        const cp = this.checkCheckpoint ? await this.assertNotBehindCheckpoint() : undefined;
        await this.assertChainIntact(cp);
        // A log small enough to read whole in a blink is then verified from its first entry: a
        // byte flipped before the newest checkpoint is refused at open too (a checkpoint vouches
        // for the entries as they were when it was written, not for what happened to them since).
        if (cp && cp.entries > 0 && (await this.logBytes()) <= this.fullVerifyBytes) await this.assertChainIntact(undefined);
      }),
    );
    // What a crashed writer left beside the lock (a prepared directory, say) goes once it is old.
    void this.lock.sweep().catch(() => {});
  }

  append(type: string, data: JsonValue = null): Promise<AppendResult> {
    try {
      if (this.closed) throw new AuditError('closed', `log ${this.path} is closed; open it again to append`);
      assertEventType(type);
      const dataJson = encodeData(data);
      // Fixed parts: {"seq":,"ts":"","type":"","data":,"prev":""} + suffix, seq ≤ 16 digits, ts 24.
      const bytes = 46 + 16 + 24 + type.length + Buffer.byteLength(dataJson) + 64 + SUFFIX_BYTES;
      if (bytes > this.maxEntryBytes) {
        throw new AuditError(
          'entry_too_large',
          `entry of type "${type}" would be ${bytes} bytes, over the ${this.maxEntryBytes}-byte limit; log a digest or a reference instead of the body`,
        );
      }
      return new Promise<AppendResult>((resolve, reject) => {
        this.queue.push({ type, dataJson, bytes, resolve, reject });
        if (!this.scheduled) {
          this.scheduled = true;
          void this.serial(() => {
            this.scheduled = false;
            return this.commitQueued();
          }).catch(() => {});
        }
      });
    } catch (err) {
      return Promise.reject(err);
    }
  }

  flush(): Promise<void> {
    return this.serial(() => this.commitQueued());
  }

  checkpoint(): Promise<Checkpoint> {
    return this.serial(async () => {
      this.assertOpen();
      await this.commitQueued();
      return this.withLock(() => this.checkpointLocked());
    });
  }

  /** Records a checkpoint of the log as it is now (signed when a key is set, then copied to the anchor file). */
  private async checkpointLocked(): Promise<Checkpoint> {
    const t = await this.refresh();
    let cp: Checkpoint = {
      entries: t.seq,
      head: t.hash,
      segment: t.segment,
      offset: t.size,
      time: this.clock().toISOString(),
    };
    if (this.key) cp = signCheckpoint(cp, this.key);
    const fh = await open(this.files.checkpoints, fsc.O_RDWR | fsc.O_APPEND | fsc.O_CREAT, this.fileMode);
    let size = 0;
    try {
      size = (await fh.stat()).size;
      // An interrupted checkpoint write left a torn last line: drop it (it was never
      // acknowledged, and the next checkpoint restates everything it held).
      const last = await lastLine(fh, size);
      if (last?.torn) {
        size = last.start;
        await fh.truncate(size);
      }
      await this.io.write(fh, Buffer.from(checkpointLine(cp)));
      await this.io.datasync(fh);
    } catch (err) {
      await fh.truncate(size).catch(() => {});
      throw new AuditError('write_failed', `cannot write checkpoint to ${this.files.checkpoints}: ${describeCause(err)}`, {
        cause: err,
      });
    } finally {
      await fh.close();
    }
    if (this.key && this.anchorFile) await writeAnchor(this.anchorFile, cp, this.fileMode);
    return cp;
  }

  /**
   * Appends `audit.reanchored` (what the log holds now, the newest signed checkpoint it does not
   * hold, and the operator's reason), then signs a checkpoint over the log as it is: the explicit,
   * recorded way past `log_unanchored` and `log_behind_checkpoint`.
   */
  reanchor(reason: string): Promise<Reanchored> {
    return this.serial(async () => {
      this.assertOpen();
      if (!this.key) throw new AuditError('invalid_key', `re-anchoring ${this.path} needs the signing key; set it and run again`);
      await this.commitQueued();
      return this.withLock(async () => {
        const t = await this.refresh();
        let rejected: string | undefined;
        let known: Checkpoint | undefined;
        try {
          known = await this.anchors();
        } catch (err) {
          // A changed or foreign anchor file: recorded, then replaced by the new checkpoint.
          if (!(err instanceof AuditError) || err.code !== 'log_unanchored') throw err;
          rejected = err.message;
          known = await latestCheckpoint(this.files.checkpoints, createPublicKey(this.key as KeyObject));
        }
        const before = { entries: t.seq, head: t.hash };
        const held = known ? await this.holds(known, t) : true;
        const last = known ? { entries: known.entries, head: known.head, time: known.time, segment: known.segment } : null;
        const data = {
          reason,
          log: before,
          last_signed_checkpoint: last,
          missing_entries: known && !held ? Math.max(0, known.entries - t.seq) : 0,
          held: known ? held : null,
          ...(rejected ? { anchor_rejected: rejected } : {}),
        };
        await this.writeEntries([{ type: 'audit.reanchored', dataJson: encodeData(data as JsonValue) }]);
        const cp = await this.checkpointLocked();
        return { ...data, checkpoint: cp };
      });
    });
  }

  rotate(): Promise<RotateResult> {
    return this.serial(async () => {
      this.assertOpen();
      await this.commitQueued();
      return this.withLock(async () => {
        await this.refresh();
        return this.rotateLocked();
      });
    });
  }

  head(): Promise<LogHead> {
    return this.serial(async () => {
      this.assertOpen();
      return this.withLock(async () => {
        const t = await this.refresh();
        return { seq: t.seq, hash: t.hash };
      });
    });
  }

  entries(options: EntriesOptions = {}): AsyncIterable<AuditEntry> {
    return entriesFrom(this.path, options.from ?? 1, () => this.assertOpen());
  }

  async close(): Promise<void> {
    if (this.closed) return this.chain.then(() => {});
    this.closed = true;
    await this.serial(async () => {
      await this.commitQueued();
      await this.handle?.close();
      this.handle = undefined;
      this.tail = undefined;
      await this.lock.discard();
    });
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // ---- internals -------------------------------------------------------------------------

  private assertOpen(): void {
    if (this.closed) throw new AuditError('closed', `log ${this.path} is closed; open it again`);
  }

  /** Runs operations of this writer one at a time, in call order. */
  private serial<T>(op: () => Promise<T>): Promise<T> {
    const p = this.chain.then(op);
    this.chain = p.catch(() => {});
    return p;
  }

  private async withLock<T>(fn: () => Promise<T>): Promise<T> {
    await this.lock.acquire();
    try {
      return await fn();
    } finally {
      await this.lock.release();
      // With nothing queued, the next acquisition's directory is made now, so a lone append
      // waits on one rename. With more queued, the next batch makes its own at once (waiting for
      // a background one would only add steps).
      if (!this.closed && this.queue.length === 0) this.lock.prepare();
    }
  }

  /** Commits every queued append, one locked batch (one write, one data sync) at a time. */
  private async commitQueued(): Promise<void> {
    while (this.queue.length > 0) {
      let n = 0;
      let bytes = 0;
      while (n < this.queue.length && (n === 0 || bytes + (this.queue[n] as Pending).bytes <= this.maxBatchBytes)) {
        bytes += (this.queue[n] as Pending).bytes;
        n++;
      }
      const batch = this.queue.splice(0, n);
      let durable = false;
      try {
        await this.withLock(async () => {
          await this.refresh();
          const r = await this.writeEntries(batch.map((p) => ({ type: p.type, dataJson: p.dataJson })));
          if ((this.tail as Tail).size > this.maxSegmentBytes) {
            // The batch is durable whatever happens here: a failed rotation must not reject it.
            // The next batch re-reads the tail and tries again.
            await this.rotateLocked().catch(() => {
              this.tail = undefined;
            });
          }
          // Acknowledged once durable: the callers go on while the lock is released (the next
          // operation of this writer still waits for that).
          durable = true;
          for (const [i, p] of batch.entries()) p.resolve(r[i] as AppendResult);
        });
      } catch (err) {
        if (!durable) for (const p of batch) p.reject(err);
      }
    }
  }

  /**
   * Brings `this.tail` up to date with the file under the lock: reopens after a rotation by
   * another writer, re-reads only the last line after another writer's append, repairs a torn
   * tail, and creates the active segment when a crash left none.
   */
  private async refresh(): Promise<Tail> {
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
      this.handle = await open(this.path, fsc.O_RDWR | fsc.O_APPEND | fsc.O_CREAT, this.fileMode);
    } catch (err) {
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
        await this.writeEntries([{ type: 'audit.segment', dataJson: encodeData(header) }]);
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
    if (repairNote) await this.writeEntries([{ type: 'audit.repaired', dataJson: repairNote }]);
    return this.tail as unknown as Tail;
  }

  /** The last entry of sealed segment `n` (seq 0 and genesis when `n` is 0). */
  private async sealedTail(n: number): Promise<{ seq: number; hash: string }> {
    if (n === 0) return { seq: 0, hash: GENESIS_HASH };
    const path = join(this.files.dir, segmentName(this.files.base, n));
    const fh = await open(path, 'r');
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
  private async writeEntries(items: { type: string; dataJson: string }[]): Promise<AppendResult[]> {
    const t = this.tail as Tail;
    const fh = this.handle as FileHandle;
    const ts = this.clock().toISOString();
    const lines: Buffer[] = [];
    const results: AppendResult[] = [];
    let seq = t.seq;
    let prev = t.hash;
    for (const it of items) {
      seq++;
      const { line, hash } = buildLine(seq, ts, it.type, it.dataJson, prev);
      lines.push(line);
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
    return results;
  }

  /** Seals the active segment and starts the next (SPEC.md section 8). Lock held, tail fresh. */
  private async rotateLocked(): Promise<RotateResult> {
    const t = this.tail as Tail;
    await this.writeEntries([{ type: 'audit.sealed', dataJson: encodeData({ segment: t.segment }) }]);
    const sealedPath = join(this.files.dir, segmentName(this.files.base, t.segment));
    await this.handle?.close();
    this.handle = undefined;
    await rename(this.path, sealedPath);
    await syncDir(this.files.dir);
    this.handle = await open(this.path, fsc.O_RDWR | fsc.O_APPEND | fsc.O_CREAT | fsc.O_EXCL, this.fileMode);
    const st = await this.handle.stat();
    const sealedTail = this.tail as Tail;
    this.tail = { dev: st.dev, ino: st.ino, size: 0, seq: sealedTail.seq, hash: sealedTail.hash, segment: t.segment + 1 };
    await this.writeEntries([{ type: 'audit.segment', dataJson: encodeData({ segment: t.segment + 1, previous: basename(sealedPath) }) }]);
    await syncDir(this.files.dir);
    return { sealed: t.segment, path: sealedPath, entries: (this.tail as Tail).seq };
  }

  /**
   * The newest checkpoint the log must hold: with a signing key, only checkpoints that key signed
   * (in the checkpoint file, or the anchor file's copy, whichever is newer); without one, the
   * checkpoint file's last.
   */
  private async anchors(): Promise<Checkpoint | undefined> {
    const pub = this.key ? createPublicKey(this.key) : undefined;
    const inFile = await latestCheckpoint(this.files.checkpoints, pub);
    if (!pub || !this.anchorFile) return inFile;
    const copy = await readAnchor(this.anchorFile, pub);
    if (!copy) return inFile;
    if (!inFile) return copy;
    return copy.segment > inFile.segment || (copy.segment === inFile.segment && copy.entries > inFile.entries) ? copy : inFile;
  }

  /** Whether the active segment holds checkpoint `cp`'s entry at its offset (a sealed segment's checkpoint: verify covers it). */
  private async holds(cp: Checkpoint, t: Tail): Promise<boolean> {
    if (cp.entries === 0 || cp.segment < t.segment) return true;
    if (cp.segment > t.segment || t.size < cp.offset) return false;
    const at = await lastLine(this.handle as FileHandle, cp.offset);
    const c = at && !at.torn ? checkLine(at.line) : undefined;
    return c?.ok === true && c.entry.seq === cp.entries && c.entry.hash === cp.head;
  }

  /**
   * Refuses a log that is shorter than its newest checkpoint (`log_behind_checkpoint`; one that
   * disagrees with it is refused by {@link assertChainIntact}), and, with a signing key, a log
   * holding entries that no checkpoint signed by that key covers (`log_unanchored`): a log cut
   * with its checkpoints removed is never signed over again without an operator's recorded
   * decision ({@link reanchorAuditLog}). Returns that checkpoint.
   */
  private async assertNotBehindCheckpoint(): Promise<Checkpoint | undefined> {
    const cp = await this.anchors();
    const t = await this.refresh();
    if (!cp) {
      if (this.key && t.seq > 0) {
        throw new AuditError(
          'log_unanchored',
          `${this.path} holds ${t.seq} entries but no checkpoint signed by this key covers them (the checkpoints ${this.files.checkpoints}${this.anchorFile ? ` and ${this.anchorFile}` : ''} are missing, unsigned or signed by another key): the log may have been cut and its checkpoints removed. Check it with "forge audit verify"; to sign over it as it is, re-anchor it ("forge audit anchor --reason …", recorded in the log)`,
        );
      }
      return undefined;
    }
    if (cp.entries === 0) return cp;
    const behind = (why: string) => behindCheckpoint(this.path, cp, why);
    if (cp.segment > t.segment) throw behind(`is in segment ${t.segment}, but a checkpoint covers segment ${cp.segment}`);
    if (cp.segment === t.segment && t.size < cp.offset)
      throw behind(`is ${t.size} bytes, shorter than its checkpoint (${cp.offset} bytes)`);
    // Whether the checkpointed entry is there (or damaged) is the chain check's first step.
    return cp;
  }

  /** The bytes of every segment of the log, sealed and active (0 for what cannot be read). */
  private async logBytes(): Promise<number> {
    let total = 0;
    for (const p of [...(await listSealedSegments(this.files)).map((s) => s.path), this.files.active]) {
      total += await stat(p).then(
        (st) => st.size,
        () => 0,
      );
    }
    return total;
  }

  /**
   * Refuses a log that does not hold checkpoint `cp`'s entry where `cp` says
   * (`log_behind_checkpoint`: rolled back), or whose entries from `cp`'s on (every entry, without
   * one) do not verify (`log_corrupt`): appending would extend a broken chain, and each later entry
   * would link to damage. `cp` vouches for the entries before it, which are not read again: the
   * cost is bounded by how often checkpoints are written, and damage before `cp` is left to
   * `verifyLog`.
   */
  private async assertChainIntact(cp: Checkpoint | undefined): Promise<void> {
    const r = await verifyAfterCheckpoint(this.path, cp, { takeLock: false });
    const bad = r.first_bad;
    if (!bad) return;
    // The checkpointed entry is not where the checkpoint says: a cut or rolled-back log.
    const missing = bad.reason === 'truncated' || bad.reason === 'rollback' || bad.reason === 'segment_missing';
    if (cp && bad.seq === cp.entries && missing)
      throw behindCheckpoint(this.path, cp, `does not hold the checkpointed entry: ${bad.message}`);
    throw brokenChain(this.path, bad);
  }
}

/** `log_behind_checkpoint` for the log at `path`, which `why` (is shorter, does not hold it, …) than `cp`. */
function behindCheckpoint(path: string, cp: Checkpoint, why: string): AuditError {
  return new AuditError(
    'log_behind_checkpoint',
    `${path} ${why} (checkpoint of ${cp.time}: ${cp.entries} entries, head ${cp.head.slice(0, 12)}…); it was truncated or rolled back — run "forge-audit verify ${path}" and restore the log before appending, or re-anchor it ("forge audit anchor --reason …", recorded in the log)`,
  );
}

/** `log_corrupt` for a chain that breaks at `bad`: the entry, what is wrong, and what to do. */
function brokenChain(path: string, bad: FirstBad): AuditError {
  const where = bad.line > 0 ? `${bad.file} line ${bad.line}` : bad.file;
  return new AuditError(
    'log_corrupt',
    `${path}: entry ${bad.seq} (${where}) ${bad.reason}: ${bad.message}. The chain is broken there, so nothing is appended to it (every entry from ${bad.seq} on is untrusted): see it with "forge-audit verify ${path}" (forge audit verify), then restore the log from a backup, or move it aside with its .checkpoints file and sealed segments (keep them as evidence) so that a new log starts`,
  );
}

/** What {@link reanchorAuditLog} recorded in `audit.reanchored`, and the checkpoint it signed. */
export interface Reanchored {
  reason: string;
  /** The log when it was re-anchored. */
  log: { entries: number; head: string };
  /** The newest checkpoint signed by the key that was known (checkpoint file or anchor file), if any. */
  last_signed_checkpoint: { entries: number; head: string; time: string; segment: number } | null;
  /** Entries that checkpoint covered and the log no longer holds (0 when it holds them). */
  missing_entries: number;
  /** Whether the log still held that checkpoint's entry (null when there was none). */
  held: boolean | null;
  /** Why the anchor file was not taken (changed, or signed by another key), when it was not. */
  anchor_rejected?: string;
  checkpoint: Checkpoint;
}

/**
 * Re-anchors a signed log an operator has inspected and decided to keep as it is: opens it without
 * the checkpoint check, appends `audit.reanchored` recording what is missing and `reason`, and
 * signs a checkpoint over it (copied to `anchorFile`). The only way past `log_unanchored`.
 */
export async function reanchorAuditLog(
  path: string,
  o: { signingKey: KeyInput; reason: string; anchorFile?: string; clock?: () => Date },
): Promise<Reanchored> {
  if (typeof o.reason !== 'string' || o.reason.trim() === '') {
    throw new AuditError(
      'invalid_data',
      're-anchoring needs a reason (it is recorded in the log): say what was checked and why the log is kept',
    );
  }
  const writer = new Writer(path, {
    signingKey: o.signingKey,
    checkCheckpoint: false,
    ...(o.anchorFile ? { anchorFile: o.anchorFile } : {}),
    ...(o.clock ? { clock: o.clock } : {}),
  });
  await writer.open();
  try {
    return await writer.reanchor(o.reason);
  } finally {
    await writer.close();
  }
}

/** The anchor file's checkpoint when it is one signed by `pub`; a missing file is none; anything else refuses. */
async function readAnchor(path: string, pub: KeyObject): Promise<Checkpoint | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new AuditError('io_error', `cannot read the audit anchor ${path}: ${describeCause(err)}`, { cause: err });
  }
  const cp = parseCheckpoint(text.trim());
  if (typeof cp === 'string' || !verifyCheckpointSignature(cp, pub)) {
    throw new AuditError(
      'log_unanchored',
      `the audit anchor ${path} is not a checkpoint signed by this key (${typeof cp === 'string' ? cp : 'bad signature'}); it was changed, or the key was replaced: check the log with "forge audit verify", then re-anchor it ("forge audit anchor --reason …")`,
    );
  }
  return cp;
}

/** Replaces the anchor file with `cp` durably: a synced temporary renamed over it, then the directory synced. */
async function writeAnchor(path: string, cp: Checkpoint, mode: number): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
  try {
    const fh = await open(tmp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_TRUNC | fsc.O_NOFOLLOW, mode);
    try {
      await fh.writeFile(checkpointLine(cp));
      await fh.datasync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
    await syncDir(dirname(path));
  } catch (err) {
    await unlink(tmp).catch(() => {});
    throw new AuditError('write_failed', `cannot write the audit anchor ${path}: ${describeCause(err)}`, { cause: err });
  }
}

/** Entries of the log at `path` with seq >= `from`, verified from the first (tailLog). */
async function* entriesFrom(path: string, from: number, assertOpen: () => void): AsyncGenerator<AuditEntry> {
  if (!Number.isSafeInteger(from) || from < 1) {
    throw new RangeError(`entries({ from: ${from} }): "from" must be a positive integer`);
  }
  assertOpen();
  for await (const e of tailLog(path)) if (e.seq >= from) yield e;
}

async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}
