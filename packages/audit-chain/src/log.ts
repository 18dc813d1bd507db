import { createPublicKey, type KeyObject } from 'node:crypto';
import { stat } from 'node:fs/promises';
import { hostname } from 'node:os';
import { resolve } from 'node:path';
import { ActiveSegment, defaultIo } from './active-segment.js';
import { type Checkpoint, type KeyInput, latestCheckpoint, toKey } from './checkpoint.js';
import { AuditError, describeCause } from './errors.js';
import { type AuditEntry, assertEventType, encodeData, SUFFIX_BYTES } from './format.js';
import type { JsonValue } from './ijson.js';
import { LiveTree, type TreeSigning } from './live-tree.js';
import { DirLock } from './lock.js';
import { LogAnchors } from './log-anchors.js';
import type {
  AppendResult,
  AuditLog,
  EntriesOptions,
  LogHead,
  OpenAuditLogOptions,
  Reanchored,
  RotateResult,
  WriterIo,
} from './log-types.js';
import { noteVerifierKey } from './note.js';
import { type LogFiles, logBytes, logFiles } from './segments.js';
import { tailLog } from './tail.js';

/** The name the log's key signs tree checkpoints under, unless `tree.keyName` says otherwise. */
const DEFAULT_KEY_NAME = 'forge-audit';

/** The default of `OpenAuditLogOptions.fullVerifyBytes`: 16 MiB, read and hashed in well under 100 ms. */
const FULL_VERIFY_BYTES = 16 * 1024 * 1024;

interface Pending {
  type: string;
  dataJson: string;
  bytes: number;
  resolve(r: AppendResult): void;
  reject(e: unknown): void;
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
  private readonly segment: ActiveSegment;
  private readonly anchors: LogAnchors;
  private readonly maxEntryBytes: number;
  private readonly maxBatchBytes: number;
  private readonly maxSegmentBytes: number;
  private readonly key: KeyObject | undefined;
  private readonly checkCheckpoint: boolean;
  private readonly fullVerifyBytes: number;
  private readonly tree: LiveTree | undefined;
  private readonly signing: TreeSigning;
  private queue: Pending[] = [];
  private scheduled = false;
  private chain: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(path: string, o: OpenAuditLogOptions) {
    this.path = path;
    this.files = logFiles(path);
    this.lock = new DirLock(this.files.lock, o.lock);
    const io: WriterIo = { ...defaultIo, ...o.io };
    const clock = o.clock ?? (() => new Date());
    const fileMode = o.fileMode ?? 0o600;
    this.maxEntryBytes = o.maxEntryBytes ?? 1 << 20;
    this.maxBatchBytes = Math.max(o.maxBatchBytes ?? 4 << 20, this.maxEntryBytes);
    this.maxSegmentBytes = o.maxSegmentBytes ?? Number.POSITIVE_INFINITY;
    this.key = o.signingKey === undefined ? undefined : toKey(o.signingKey, 'private', 'signingKey');
    this.checkCheckpoint = o.checkCheckpoint ?? true;
    this.fullVerifyBytes = o.fullVerifyBytes ?? FULL_VERIFY_BYTES;
    const keyName = o.tree === false ? DEFAULT_KEY_NAME : (o.tree?.keyName ?? DEFAULT_KEY_NAME);
    this.signing = {
      origin: (o.tree === false ? undefined : o.tree?.origin) ?? `${hostname()}${resolve(path)}`,
      signer: this.key ? { name: keyName, privateKey: this.key } : undefined,
      vkey: this.key ? noteVerifierKey(keyName, this.key) : undefined,
    };
    this.tree = o.tree === false ? undefined : new LiveTree(this.files, fileMode);
    this.segment = new ActiveSegment(path, this.files, { io, clock, fileMode, ...(this.tree ? { observer: this.tree } : {}) });
    this.anchors = new LogAnchors(path, this.files, { key: this.key, anchorFile: o.anchorFile, io, clock, fileMode });
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
          await this.segment.refresh();
        } catch (err) {
          // A damaged last line: name the first damaged entry instead, which may come before it.
          if (err instanceof AuditError && err.code === 'log_corrupt') {
            await this.anchors.assertChainIntact(this.checkCheckpoint ? await this.anchors.newest().catch(() => undefined) : undefined);
          }
          throw err;
        }
        const cp = this.checkCheckpoint ? await this.anchors.assertNotBehind(this.segment) : undefined;
        await this.anchors.assertChainIntact(cp);
        // A log small enough to read whole in a blink is then verified from its first entry: a
        // byte flipped before the newest checkpoint is refused at open too (a checkpoint vouches
        // for the entries as they were when it was written, not for what happened to them since).
        if (cp && cp.entries > 0 && (await logBytes(this.files)) <= this.fullVerifyBytes) await this.anchors.assertChainIntact(undefined);
        // The tree resumes from the checkpoint's tiles when they match what its key signed. One
        // that cannot start does not keep the log from opening: it reads the log at the next batch.
        await this.tree?.start(await this.segment.refresh(), cp, this.signing).catch(() => {});
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
      return this.withLock(async () => {
        // The chain's checkpoint is written even when the tree's cannot be (it is what catches a
        // cut log); the failure is then reported, after it.
        const treeFailed = await this.tree?.publish(await this.segment.refresh(), this.signing).then(
          () => undefined,
          (err: unknown) => err,
        );
        const cp = await this.anchors.checkpoint(this.segment);
        if (treeFailed)
          throw new AuditError(
            'write_failed',
            `checkpoint of ${cp.entries} entries recorded, but the tree checkpoint beside it was not: ${describeCause(treeFailed)}`,
            { cause: treeFailed },
          );
        return cp;
      });
    });
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
        const t = await this.segment.refresh();
        let rejected: string | undefined;
        let known: Checkpoint | undefined;
        try {
          known = await this.anchors.newest();
        } catch (err) {
          // A changed or foreign anchor file: recorded, then replaced by the new checkpoint.
          if (!(err instanceof AuditError) || err.code !== 'log_unanchored') throw err;
          rejected = err.message;
          known = await latestCheckpoint(this.files.checkpoints, createPublicKey(this.key as KeyObject));
        }
        const before = { entries: t.seq, head: t.hash };
        const held = known ? await this.segment.holds(known, t) : true;
        const last = known ? { entries: known.entries, head: known.head, time: known.time, segment: known.segment } : null;
        const data = {
          reason,
          log: before,
          last_signed_checkpoint: last,
          missing_entries: known && !held ? Math.max(0, known.entries - t.seq) : 0,
          held: known ? held : null,
          ...(rejected ? { anchor_rejected: rejected } : {}),
        };
        await this.segment.write([{ type: 'audit.reanchored', dataJson: encodeData(data as JsonValue) }]);
        await this.tree?.publish(await this.segment.refresh(), this.signing);
        const cp = await this.anchors.checkpoint(this.segment);
        return { ...data, checkpoint: cp };
      });
    });
  }

  rotate(): Promise<RotateResult> {
    return this.serial(async () => {
      this.assertOpen();
      await this.commitQueued();
      return this.withLock(async () => {
        await this.segment.refresh();
        return this.segment.rotate();
      });
    });
  }

  head(): Promise<LogHead> {
    return this.serial(async () => {
      this.assertOpen();
      return this.withLock(async () => {
        const t = await this.segment.refresh();
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
      await this.tree?.drain();
      await this.segment.close();
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

  /**
   * Commits the appends queued when it starts, one locked batch (one write, one data sync) at a
   * time. Appends queued meanwhile wait for the operation scheduled for them, after any checkpoint
   * or rotation asked for in between: under a steady stream of appends those still run.
   */
  private async commitQueued(): Promise<void> {
    let left = this.queue.length;
    while (left > 0 && this.queue.length > 0) {
      let n = 0;
      let bytes = 0;
      while (n < this.queue.length && (n === 0 || bytes + (this.queue[n] as Pending).bytes <= this.maxBatchBytes)) {
        bytes += (this.queue[n] as Pending).bytes;
        n++;
      }
      n = Math.min(n, left);
      left -= n;
      const batch = this.queue.splice(0, n);
      let durable = false;
      try {
        await this.withLock(async () => {
          const t = await this.segment.refresh();
          // A tree that cannot follow the log does not hold its appends back: it reads the log again later.
          await this.tree?.catchUp(t).catch(() => {});
          const r = await this.segment.write(batch.map((p) => ({ type: p.type, dataJson: p.dataJson })));
          if (this.segment.size > this.maxSegmentBytes) {
            // The batch is durable whatever happens here: a failed rotation must not reject it.
            // The next batch re-reads the tail and tries again.
            await this.segment.rotate().catch(() => this.segment.forget());
          }
          // Acknowledged once durable: the callers go on while the lock is released (the next
          // operation of this writer still waits for that).
          durable = true;
          for (const [i, p] of batch.entries()) p.resolve(r[i] as AppendResult);
          // The tiles the batch completed, written in the background.
          this.tree?.settle();
        });
      } catch (err) {
        if (!durable) for (const p of batch) p.reject(err);
      }
    }
  }
}

/**
 * Re-anchors a signed log an operator has inspected and decided to keep as it is: opens it without
 * the checkpoint check, appends `audit.reanchored` recording what is missing and `reason`, and
 * signs a checkpoint over it (copied to `anchorFile`). The only way past `log_unanchored`.
 */
export async function reanchorAuditLog(
  path: string,
  o: { signingKey: KeyInput; reason: string; anchorFile?: string; clock?: () => Date; tree?: OpenAuditLogOptions['tree'] },
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
    ...(o.tree !== undefined ? { tree: o.tree } : {}),
  });
  await writer.open();
  try {
    return await writer.reanchor(o.reason);
  } finally {
    await writer.close();
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
