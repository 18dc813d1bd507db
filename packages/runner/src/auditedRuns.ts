import { type AuditEntry, type AuditLog, tailLog } from '@forge/audit-chain';

/** What a cacheable call's ok `forge.called` entry recorded of its answer. */
export interface RecordedAnswer {
  /** The cache key the answer was computed under (`cacheKey()`). */
  cache_key: string;
  /** `sha256:` over the canonical JSON of the answer (`outputDigest()`). */
  output_digest: string;
}

/** The audit log cached answers are checked against: the engine's. */
export interface AuditSource {
  log: AuditLog;
  /** The log's file when the engine opened it itself: read from its end (`tailLog`); else through `log.entries()`. */
  file: string | undefined;
}

/**
 * Entries of the first window read back from the head; each further window is four times the
 * last (a read parses up to 4 MiB past where it is stopped: fewer, larger windows waste less).
 */
const FIRST_WINDOW = 1024;
const GROWTH = 4;
/**
 * How many entries early a read from the file's end starts, for entries appended between reading
 * the head and the read; widened (×16) when more came meanwhile.
 */
const SLACK = 64;
const MAX_SLACK = SLACK * 16 ** 3;

/** The seqs read so far, each line's hash and link checked: entries `lo` to `hi`. */
interface ReadRange {
  lo: number;
  hi: number;
  /** `prev` of entry `lo`: what the hash of entry `lo - 1` must be. */
  loPrev: string;
  /** The hash of entry `hi`: what the `prev` of entry `hi + 1` must be. */
  hiHash: string;
}

/**
 * What the audit log recorded of cacheable calls' answers, by run id: the `cache_key` and
 * `output_digest` of every ok `forge.called` entry that has them. The result cache serves an entry
 * only when this says its seed run gave that very answer under that key (cache.ts).
 *
 * Read from the log on demand, newest first, since a cache holds recent answers: a run it does not
 * know makes it read the entries appended since its last read, then older ones in growing windows
 * until the run is found or the first entry has been read (after that, only new entries are read).
 * Every entry read is linked to the ones read before, up to the head the log had at the first
 * read, so whoever can edit a cache store but cannot forge a chain cannot make it answer for a run
 * the log does not show. Answers this engine recorded itself are noted as their entries become
 * durable ({@link AuditedRuns.note}).
 */
export class AuditedRuns {
  readonly #source: AuditSource;
  readonly #runs = new Map<string, RecordedAnswer>();
  #read: ReadRange | undefined;
  #window = FIRST_WINDOW;
  #searching: Promise<unknown> = Promise.resolve();

  constructor(source: AuditSource) {
    this.#source = source;
  }

  /** Notes what this engine recorded for `runId` (its entry is durable). */
  note(runId: string, answer: RecordedAnswer): void {
    this.#runs.set(runId, answer);
  }

  /**
   * What the log recorded of `runId`'s answer, or undefined when it records none (no such run, or
   * not a cacheable ok call). Rejects when the log cannot be read, or an entry fails its hash or
   * does not link to the ones read before (`log_corrupt`, `io_error`, or an `Error` saying which).
   */
  find(runId: string): Promise<RecordedAnswer | undefined> {
    const known = this.#runs.get(runId);
    if (known) return Promise.resolve(known);
    // One search at a time: whatever one search read, the next finds in the map.
    const p = this.#searching.then(() => this.#search(runId));
    this.#searching = p.catch(() => {});
    return p;
  }

  async #search(runId: string): Promise<RecordedAnswer | undefined> {
    let found = this.#runs.get(runId);
    if (found) return found;
    const head = await this.#source.log.head();
    const r = (this.#read ??= { lo: head.seq + 1, hi: head.seq, loPrev: head.hash, hiHash: head.hash });
    // A run recorded since the last read (by a worker, another front-end, another process).
    if (head.seq > r.hi) {
      await this.#forward(r, head.seq);
      found = this.#runs.get(runId);
      if (found) return found;
    }
    while (r.lo > 1) {
      await this.#back(r, Math.max(1, r.lo - this.#window));
      this.#window *= GROWTH;
      found = this.#runs.get(runId);
      if (found) return found;
    }
    return undefined;
  }

  /** Reads entries `hi + 1` to `to`, the first linked to entry `hi`. */
  async #forward(r: ReadRange, to: number): Promise<void> {
    for await (const entry of this.#range(r.hi + 1, to)) {
      if (entry.prev !== r.hiHash) throw this.#unlinked(entry.seq);
      const run = recordedRun(entry);
      if (run) this.#runs.set(run[0], run[1]);
      r.hi = entry.seq;
      r.hiHash = entry.hash;
    }
  }

  /** Reads entries `from` to `lo - 1`, the last linked to entry `lo`: what they record is kept only once that holds. */
  async #back(r: ReadRange, from: number): Promise<void> {
    const runs: [string, RecordedAnswer][] = [];
    let first: string | undefined;
    let prev: string | undefined;
    for await (const entry of this.#range(from, r.lo - 1)) {
      if (prev !== undefined && entry.prev !== prev) throw this.#unlinked(entry.seq);
      first ??= entry.prev;
      prev = entry.hash;
      const run = recordedRun(entry);
      if (run) runs.push(run);
    }
    if (first === undefined || prev !== r.loPrev) throw this.#unlinked(r.lo);
    for (const [id, answer] of runs) this.#runs.set(id, answer);
    r.lo = from;
    r.loPrev = first;
  }

  /**
   * Entries `from` to `to`, oldest first, each line's hash and link checked by the reader. The
   * engine's own file is read from its end; a read that started after `from` (more entries were
   * appended meanwhile than it allowed for) is made again from further back.
   */
  async *#range(from: number, to: number): AsyncGenerator<AuditEntry> {
    const { log, file } = this.#source;
    let next = from;
    for (let slack = SLACK; ; slack *= 16) {
      const entries = file ? tailLog(file, { last: (await log.head()).seq - from + 1 + slack }) : log.entries({ from });
      for await (const entry of entries) {
        if (entry.seq < next) continue;
        // Only the first can be out of place: the reader checks the sequence from there on.
        if (entry.seq > next) break;
        yield entry;
        if (++next > to) return;
      }
      if (next > from)
        throw new Error(`the audit log ${log.path} ends at entry ${next - 1} while entry ${to} was read as its head: it was cut meanwhile`);
      if (!file || slack >= MAX_SLACK) throw new Error(`the audit log ${log.path} gave no entry ${from} when read from there`);
    }
  }

  #unlinked(seq: number): Error {
    return new Error(
      `audit entry ${seq} of ${this.#source.log.path} does not link to the entries read before it: the log changed while it was read; run "forge audit verify"`,
    );
  }
}

/** The run id and recorded answer of an ok `forge.called` entry of a cacheable call, or undefined. */
function recordedRun(entry: AuditEntry): [string, RecordedAnswer] | undefined {
  if (entry.type !== 'forge.called') return undefined;
  const d = entry.data as Record<string, unknown> | null;
  if (!d || typeof d !== 'object' || d.ok !== true) return undefined;
  if (typeof d.run_id !== 'string' || typeof d.cache_key !== 'string' || typeof d.output_digest !== 'string') return undefined;
  return [d.run_id, { cache_key: d.cache_key, output_digest: d.output_digest }];
}
