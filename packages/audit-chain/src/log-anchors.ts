import { createPublicKey, type KeyObject } from 'node:crypto';
import { constants as fsc } from 'node:fs';
import { open, rename, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { ActiveSegment } from './active-segment.js';
import { syncDir } from './active-segment.js';
import {
  type Checkpoint,
  checkpointLine,
  latestCheckpoint,
  parseCheckpoint,
  signCheckpoint,
  verifyCheckpointSignature,
} from './checkpoint.js';
import { AuditError, describeCause } from './errors.js';
import { lastLine } from './lines.js';
import type { WriterIo } from './log-types.js';
import { readRegularFile } from './regular-file.js';
import type { LogFiles } from './segments.js';
import { verifyAfterCheckpoint } from './verify.js';
import type { FirstBad } from './verify-result.js';

/** What the log's checkpoints are written and checked with. */
export interface AnchorOptions {
  /** Signs each checkpoint, and makes only checkpoints it signed count. */
  key: KeyObject | undefined;
  /** The copy of the newest signed checkpoint kept outside the log's directory. */
  anchorFile: string | undefined;
  io: WriterIo;
  clock: () => Date;
  fileMode: number;
}

/**
 * What ties a log to its checkpoints: recording one (signed, and copied to the anchor file), the
 * newest one the log must hold, and the checks at open that the log is not behind it and that its
 * chain is intact from it on. Every method runs under the writers' lock.
 */
export class LogAnchors {
  private readonly key: KeyObject | undefined;
  private readonly anchorFile: string | undefined;
  private readonly io: WriterIo;
  private readonly clock: () => Date;
  private readonly fileMode: number;

  constructor(
    private readonly path: string,
    private readonly files: LogFiles,
    o: AnchorOptions,
  ) {
    this.key = o.key;
    this.anchorFile = o.anchorFile;
    this.io = o.io;
    this.clock = o.clock;
    this.fileMode = o.fileMode;
  }

  /** Records a checkpoint of the log as it is now (signed when a key is set, then copied to the anchor file). */
  async checkpoint(segment: ActiveSegment): Promise<Checkpoint> {
    const t = await segment.refresh();
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
   * The newest checkpoint the log must hold: with a signing key, only checkpoints that key signed
   * (in the checkpoint file, or the anchor file's copy, whichever is newer); without one, the
   * checkpoint file's last.
   */
  async newest(): Promise<Checkpoint | undefined> {
    const pub = this.key ? createPublicKey(this.key) : undefined;
    const inFile = await latestCheckpoint(this.files.checkpoints, pub);
    if (!pub || !this.anchorFile) return inFile;
    const copy = await readAnchor(this.anchorFile, pub);
    if (!copy) return inFile;
    if (!inFile) return copy;
    return copy.segment > inFile.segment || (copy.segment === inFile.segment && copy.entries > inFile.entries) ? copy : inFile;
  }

  /**
   * Refuses a log that is shorter than its newest checkpoint (`log_behind_checkpoint`; one that
   * disagrees with it is refused by {@link LogAnchors.assertChainIntact}), and, with a signing key, a log
   * holding entries that no checkpoint signed by that key covers (`log_unanchored`): a log cut
   * with its checkpoints removed is never signed over again without an operator's recorded
   * decision ({@link reanchorAuditLog}). Returns that checkpoint.
   */
  async assertNotBehind(segment: ActiveSegment): Promise<Checkpoint | undefined> {
    const cp = await this.newest();
    const t = await segment.refresh();
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

  /**
   * Refuses a log that does not hold checkpoint `cp`'s entry where `cp` says
   * (`log_behind_checkpoint`: rolled back), or whose entries from `cp`'s on (every entry, without
   * one) do not verify (`log_corrupt`): appending would extend a broken chain, and each later entry
   * would link to damage. `cp` vouches for the entries before it, which are not read again: the
   * cost is bounded by how often checkpoints are written, and damage before `cp` is left to
   * `verifyLog`.
   */
  async assertChainIntact(cp: Checkpoint | undefined): Promise<void> {
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

/** The anchor file's checkpoint when it is one signed by `pub`; a missing file is none; anything else refuses. */
async function readAnchor(path: string, pub: KeyObject): Promise<Checkpoint | undefined> {
  let text: string;
  try {
    text = (await readRegularFile(path)).toString('utf8');
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
