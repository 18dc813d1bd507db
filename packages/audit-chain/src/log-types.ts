import type { FileHandle } from 'node:fs/promises';
import type { Checkpoint, KeyInput } from './checkpoint.js';
import type { AuditEntry } from './format.js';
import type { JsonValue } from './ijson.js';
import type { LockOptions } from './lock.js';

/* The log's public contract: what opening takes, what an open log does, and what it returns. */

/** Low-level file operations the writer uses for a batch; replaceable to inject faults in tests. */
export interface WriterIo {
  write(handle: FileHandle, data: Buffer): Promise<void>;
  datasync(handle: FileHandle): Promise<void>;
}

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
  /**
   * The log's Merkle tree (SPEC.md section 9.4): full tiles written as they complete, under
   * `<path>.tlog/`; at each checkpoint the partial tiles and, with `signingKey`, a C2SP tree
   * checkpoint signed as `keyName` (default "forge-audit") naming `origin` (default the host name
   * and the log's absolute path). `false` keeps no tree (each append still reports its leaf hash).
   */
  tree?: false | { origin?: string; keyName?: string };
}

/** What an acknowledged append returns: the entry is durable on disk. */
export interface AppendResult {
  seq: number;
  hash: string;
  ts: string;
  /**
   * The entry's leaf hash in the log's Merkle tree (SPEC.md section 9), 64 hex digits: with `seq`
   * (the leaf's index is `seq - 1`) it is the call's receipt, provable once a checkpoint covers it.
   */
  leaf?: string;
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
