import { dirname } from 'node:path';
import type { AuditLog, JsonValue } from '@forge/audit-chain';

/** The stable error kind of an answer forge withholds because its audit entry cannot be written. */
export const AUDIT_UNAVAILABLE = 'audit_unavailable';

/**
 * The entry forge writes when the log takes appends again after failing: how many entries were
 * lost and when. Not `audit.*`: that prefix is reserved for entries the log writes itself.
 */
export const AUDIT_RECOVERED = 'forge.audit_recovered';

/** Why an entry was not written: the log, the errno and what to do, ready for an envelope. */
export interface AuditFailure {
  kind: typeof AUDIT_UNAVAILABLE;
  message: string;
  /** The errno code (`ENOSPC`, `EIO`, `EDQUOT`, …) or the log's error code. */
  errno: string;
  at: string;
}

/** An entry that could not be written, kept (bounded) for the recovery entry. */
interface LostEntry {
  type: string;
  at: string;
  name?: unknown;
  run_id?: unknown;
}

const MAX_LOST_LISTED = 20;
/** The log's refusals to take appends (a broken chain, a cut log, an unanchored one): not an errno. */
const LOG_REFUSALS = new Set(['log_corrupt', 'log_behind_checkpoint', 'log_unanchored']);
/** What `ready()` gives while the log takes appends: one settled promise, nothing allocated per call. */
const WRITABLE: Promise<undefined> = Promise.resolve(undefined);

/**
 * Fail-closed state of forge's audit log. Every append goes through {@link AuditGate.append};
 * the first that fails turns the gate closed, and then nothing more is appended (each entry is
 * counted as lost) until {@link AuditGate.ready} — called at the start of every call, forge,
 * promote and remove — succeeds in appending the `forge.audit_recovered` entry itself: the
 * probe is a real append, so "writable again" is never a guess.
 */
export class AuditGate {
  private failure: AuditFailure | undefined;
  private firstFailureAt = '';
  private failed = 0;
  private probesFailed = 0;
  private refused = 0;
  private errnos = new Set<string>();
  private lost: LostEntry[] = [];
  private lostByType: Record<string, number> = {};
  private probe: Promise<AuditFailure | undefined> | undefined;

  constructor(
    private readonly log: AuditLog,
    private readonly now: () => number,
    private readonly onFailure: (f: AuditFailure) => void = () => {},
  ) {}

  /** The current failure, while the log is not taking appends. */
  get unavailable(): AuditFailure | undefined {
    return this.failure;
  }

  /**
   * Closes the gate before any append: the log was found unable to take one when it was opened
   * (`err`: a broken chain, auditOpen.ts). Calls are refused from the first, and each probes the
   * log as after a failed append.
   */
  closeWith(err: unknown): void {
    this.fail(err);
  }

  /**
   * Appends one entry; resolves to undefined once it is durable, or to the failure (never
   * rejects). While the gate is closed nothing is attempted: the entry is counted as lost.
   */
  append(
    type: string,
    data: Record<string, unknown>,
    appended?: (seq: number, leaf: string | undefined) => void,
  ): Promise<AuditFailure | undefined> {
    if (this.failure) return this.appendWhileClosed(type, data, appended);
    return this.log.append(type, data as JsonValue).then(
      (r) => {
        appended?.(r.seq, r.leaf);
        return undefined;
      },
      (err) => {
        this.lose(type, data);
        return this.fail(err);
      },
    );
  }

  private async appendWhileClosed(
    type: string,
    data: Record<string, unknown>,
    appended?: (seq: number, leaf: string | undefined) => void,
  ): Promise<AuditFailure | undefined> {
    // An entry that arrives while a probe is under way waits for it: lost now, it would be
    // missing from the recovery entry the probe is writing.
    if (this.probe && !(await this.probe)) return this.append(type, data, appended);
    if (!this.failure) return this.append(type, data, appended);
    this.lose(type, data);
    return this.failure;
  }

  /**
   * Undefined when the log takes appends. When it failed before, first tries to append the
   * recovery entry (one probe at a time; concurrent callers share it): on success the gate opens
   * again, else the failure is returned and the caller refuses (counted in `refused`).
   */
  ready(): Promise<AuditFailure | undefined> {
    if (!this.failure) return WRITABLE;
    this.probe ??= this.recover().finally(() => {
      this.probe = undefined;
    });
    return this.probe.then((f) => {
      if (f) this.refused++;
      return f;
    });
  }

  private async recover(): Promise<AuditFailure | undefined> {
    const f = this.failure as AuditFailure;
    const data = {
      failed_appends: this.failed,
      failed_probes: this.probesFailed,
      refused: this.refused,
      first_failure_at: this.firstFailureAt,
      last_failure_at: f.at,
      errno: [...this.errnos],
      lost_by_type: this.lostByType,
      lost: this.lost,
      ...(this.failed > this.lost.length ? { lost_not_listed: this.failed - this.lost.length } : {}),
      log: this.log.path,
    };
    try {
      await this.log.append(AUDIT_RECOVERED, data as unknown as JsonValue);
    } catch (err) {
      this.probesFailed++;
      return this.fail(err);
    }
    this.failure = undefined;
    this.firstFailureAt = '';
    this.failed = this.probesFailed = this.refused = 0;
    this.errnos = new Set();
    this.lost = [];
    this.lostByType = {};
    return undefined;
  }

  private lose(type: string, data: Record<string, unknown>): void {
    this.failed++;
    this.lostByType[type] = (this.lostByType[type] ?? 0) + 1;
    if (this.lost.length < MAX_LOST_LISTED) {
      this.lost.push({
        type,
        at: new Date(this.now()).toISOString(),
        ...(data.name !== undefined ? { name: data.name } : {}),
        ...(data.run_id !== undefined && data.run_id !== null ? { run_id: data.run_id } : {}),
      });
    }
  }

  private fail(err: unknown): AuditFailure {
    const at = new Date(this.now()).toISOString();
    const errno = errnoOf(err);
    const first = !this.failure;
    if (first) this.firstFailureAt = at;
    this.errnos.add(errno);
    const path = this.log.path;
    const f: AuditFailure = {
      kind: AUDIT_UNAVAILABLE,
      errno,
      at,
      message: LOG_REFUSALS.has(errno)
        ? // The log's own message names the log, what is wrong (the entry) and what to do.
          `the audit log ${causeText(err)}; forge answers nothing it cannot audit and refuses calls and forges until the log ` +
          `takes appends again (${fixFor(errno, dirname(path))}); the next call checks the log again`
        : `the audit log ${path} cannot be written (${withErrno(errno, causeText(err))}); forge answers nothing it cannot audit and ` +
          `refuses calls and forges until the log takes appends again — ${fixFor(errno, dirname(path))}, then retry (the next call checks the log with a real append)`,
    };
    this.failure = f;
    if (first) this.onFailure(f);
    return f;
  }
}

/** The errno behind an append failure (the log's error keeps it as `cause`), else its code. */
export function errnoOf(err: unknown): string {
  for (let e: unknown = err, i = 0; e && typeof e === 'object' && i < 4; e = (e as { cause?: unknown }).cause, i++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^E[A-Z0-9]+$/.test(code)) return code;
  }
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' ? code : 'unknown';
}

function withErrno(errno: string, text: string): string {
  return text.startsWith(errno) ? text : `${errno}: ${text}`;
}

function causeText(err: unknown): string {
  const cause = (err as { cause?: unknown })?.cause;
  return ((cause instanceof Error ? cause : err) as Error)?.message ?? String(err);
}

/** What an operator does about `errno` on the filesystem holding `dir`. */
export function fixFor(errno: string, dir: string): string {
  if (errno === 'log_corrupt')
    return `moving ${dir} aside starts a new log; with FORGE_AUDIT_KEY set, anchor that one with "forge audit anchor --reason …"`;
  if (errno === 'log_behind_checkpoint' || errno === 'log_unanchored')
    return `"forge audit anchor --reason …" signs over the log as it is, once checked, recorded in it`;
  if (errno === 'ENOSPC') return `free space on the filesystem holding ${dir}`;
  if (errno === 'EDQUOT') return `raise the disk quota of the user forge runs as, or free space on the filesystem holding ${dir}`;
  if (errno === 'EIO') return `check the disk holding ${dir} (EIO is a device error: see dmesg), then run "forge-audit verify"`;
  if (errno === 'EACCES' || errno === 'EPERM' || errno === 'EROFS')
    return `make ${dir} writable by the user forge runs as (a read-only mount or changed permissions)`;
  return `make ${dir} writable (see "forge doctor")`;
}
