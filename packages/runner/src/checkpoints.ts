import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs';
import type { AuditLog } from '@forge/audit-chain';

/** When forge checkpoints its audit log: after this many of its appends… */
export const CHECKPOINT_EVERY = 4096;
/** …or this long after the first append no checkpoint covers, whichever comes first; and at close. */
export const CHECKPOINT_AFTER_MS = 5_000;

/**
 * Writes checkpoints of an audit log on a cadence, so truncating or rolling back the log is caught
 * by verification: after {@link CHECKPOINT_EVERY} appends, {@link CHECKPOINT_AFTER_MS} after the
 * first append no checkpoint covers yet, and at {@link CheckpointSchedule.close}. A checkpoint
 * runs in the background (a call never waits for it), so the fsync it costs is paid once per
 * batch of appends, not per call. A failed checkpoint is reported through `onError`.
 */
export class CheckpointSchedule {
  readonly #log: AuditLog;
  readonly #onError: (err: Error) => void;
  readonly #track: (p: Promise<void>) => void;
  #since = 0;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  readonly #after: (() => Promise<void>) | undefined;

  /** `track` is handed each background checkpoint, so the owner can wait for it. */
  /** `after` runs after each scheduled checkpoint (not the last, at close): the witnesses' round. */
  constructor(log: AuditLog, o: { onError: (err: Error) => void; track: (p: Promise<void>) => void; after?: () => Promise<void> }) {
    this.#log = log;
    this.#onError = o.onError;
    this.#track = o.track;
    this.#after = o.after;
  }

  /** One entry was queued for the log. */
  appended(): void {
    if (this.#closed) return;
    if (++this.#since >= CHECKPOINT_EVERY) this.#now();
    else if (!this.#timer) this.#timer = setTimeout(() => this.#now(), CHECKPOINT_AFTER_MS).unref();
  }

  /** Writes the last checkpoint when entries were appended since the previous one; no more after. */
  async close(): Promise<void> {
    if (this.#closed) return;
    const pending = this.#since > 0;
    this.#closed = true;
    clearTimeout(this.#timer);
    if (pending) await this.#log.checkpoint();
  }

  #now(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#since = 0;
    const after = this.#after;
    this.#track(this.#log.checkpoint().then(() => after?.().catch(this.#onError), this.#onError));
  }
}

/**
 * The Ed25519 private key (PEM) that signs forge's checkpoints: the file named by `path`
 * (`ForgeOptions.auditKey`, else `FORGE_AUDIT_KEY`), or undefined when none is configured. The
 * file must be a regular file readable by its owner alone; anything else throws, naming the
 * file and the fix (fail closed: a configured key that cannot be used never means "unsigned").
 */
export function readAuditKey(path: string | undefined, source: string): string | undefined {
  if (!path) return undefined;
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new Error(
      `the audit signing key ${path} (${source}) cannot be opened (${code}); create one with "forge-audit keygen <prefix>", or unset ${source}`,
    );
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error(`the audit signing key ${path} (${source}) is not a regular file`);
    if ((st.mode & 0o077) !== 0)
      throw new Error(
        `the audit signing key ${path} (${source}) has mode ${(st.mode & 0o777).toString(8).padStart(4, '0')}; run: chmod 600 ${path}`,
      );
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}
