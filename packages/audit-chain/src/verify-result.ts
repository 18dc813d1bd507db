import type { Checkpoint, KeyInput } from './checkpoint.js';
import { GENESIS_HASH, type VerifyReason } from './format.js';

/* What a verification is asked and what it answers, shared by the walk, its start and verifyLog. */

export interface VerifyOptions {
  /**
   * Ed25519 public key (PEM or KeyObject). When given, only checkpoints signed by this key are
   * trusted, each must verify, and at least one must exist.
   */
  publicKey?: KeyInput;
  /**
   * Threads to verify with: 1, or 2 to hash and scan on a helper thread as well (about 1.5× the
   * throughput on a machine with two free cores, for ~15 MiB more memory). Default 1.
   */
  threads?: 1 | 2;
  /**
   * Verify only the entries after the newest checkpoint (signed by `publicKey`, when given): that
   * checkpoint vouches for the entries before it, which are not read. This is what a writer checks
   * when it opens the log, and its cost is bounded by how often checkpoints are written. The log
   * must hold the checkpoint's entry where the checkpoint says (`truncated`, `segment_missing` or
   * `rollback` otherwise, or the reason that entry is damaged). Damage before the checkpoint is
   * found only without this option. Default false.
   */
  fromCheckpoint?: boolean;
}

/** Where verification first failed. */
export interface FirstBad {
  /** The entry (sequence number) that is bad or missing. */
  seq: number;
  /** 1-based line in `file` (one past the end when an entry is missing; 0 for a missing file). */
  line: number;
  reason: VerifyReason;
  /** Base name of the file the line is in. */
  file: string;
  /** What was found, for people: `hash mismatch — stored 9f2c…, computed 41aa…`. */
  message: string;
}

export interface VerifyResult {
  ok: boolean;
  /** Entries that verified (all of them when `ok`). */
  entries: number;
  /** Hash of the last entry that verified (genesis for none). */
  head: string;
  /** Present only when `ok` is false. */
  first_bad?: FirstBad;
  /** Segment files walked (sealed ones plus the active one). */
  segments: number;
  /** The latest checkpoint used, when there is one. */
  checkpoint?: { entries: number; head: string; time: string; signed: boolean; key_id?: string };
  /** Entries after the latest checkpoint: not yet vouched for by any checkpoint. */
  uncheckpointed: number;
  /** Checkpoints set aside because they are not signed by the given public key. */
  checkpoints_ignored: number;
  /** Threads that verified: 2 only when asked for and the log is large enough (32 MiB) to gain. */
  threads: 1 | 2;
}

/** A checkpoint taken for the walk, with its line in the checkpoint file. */
export interface UsedCheckpoint extends Checkpoint {
  line: number;
}

/** A result of nothing verified yet. */
export function newResult(): VerifyResult {
  return { ok: true, entries: 0, head: GENESIS_HASH, segments: 0, uncheckpointed: 0, checkpoints_ignored: 0, threads: 1 };
}

/** Marks `result` failed at `bad`. */
export function failed(result: VerifyResult, bad: FirstBad): VerifyResult {
  result.ok = false;
  result.first_bad = bad;
  return result;
}
