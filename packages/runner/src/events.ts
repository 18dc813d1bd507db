import { redactText, redactValue, type SecretList } from './redact.js';

/**
 * Tool events: what a running tool writes to descriptor 3 (`FORGE_EVENTS_FD`), one JSON object
 * per line, read while it runs. Progress lines `{"progress": n, "total"?: m, "message"?: s}` and
 * log lines `{"log": level, "message"?: s, "data"?: any}` are validated, redacted by the run's
 * secret values and handed to the caller's `onEvent` as they arrive; everything else is counted
 * and dropped, never fatal. Every bound is per run, so a tool that floods the descriptor costs
 * the host a bounded amount of memory (one line) and of parsing.
 */

/** The log levels of MCP (`notifications/message`), which are syslog's (RFC 5424), least severe first. */
export const LOG_LEVELS = Object.freeze(['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'] as const);
export type LogLevel = (typeof LOG_LEVELS)[number];

/** One event of a running tool, as `CallContext.onEvent` gets it: validated and redacted. */
export type ToolEvent =
  | { type: 'progress'; progress: number; total?: number; message?: string }
  | { type: 'log'; level: LogLevel; message?: string; data?: unknown };

/** The bounds of one run's events. */
export interface EventLimits {
  /** Longest line, in bytes without its newline; a longer one is dropped whole (`too_long`). */
  lineBytes: number;
  /** Events delivered per run, progress and log together; past it they are dropped (`over_limit`). */
  events: number;
  /** Bytes of lines parsed per run; past it every line is dropped unread (`over_bytes`). */
  bytes: number;
  /**
   * Progress is delivered at most once per this many milliseconds: one that comes sooner waits,
   * and is replaced by a later one if that comes before it was delivered (`coalesced`). A log
   * event delivers the waiting progress first, and so does the end of the run, so the order of
   * what is delivered is the order the tool wrote it and the last progress is never held back.
   */
  progressIntervalMs: number;
}

export const DEFAULT_EVENT_LIMITS: Readonly<EventLimits> = Object.freeze({
  lineBytes: 8 * 1024,
  events: 1000,
  bytes: 16 << 20,
  progressIntervalMs: 100,
});

/** What became of a run's events: the `events` field of its run manifest. */
export interface EventSummary {
  /** Events handed to the caller (or, without an `onEvent`, accepted for it). */
  delivered: { progress: number; log: number };
  /** Progress events replaced by a later one before they were delivered. */
  coalesced: number;
  /** Valid lines not delivered, by why. */
  dropped: { too_long: number; over_limit: number; over_bytes: number; not_increasing: number };
  /** Lines that are not one JSON object of either kind (blank lines are not counted). */
  malformed: number;
  /** Bytes the tool wrote to the descriptor. */
  bytes: number;
  /** The last progress the tool reported that was valid and larger than the one before. */
  last_progress?: { progress: number; total?: number };
}

const LEVELS = new Set<string>(LOG_LEVELS);
const NL = 0x0a;

/**
 * Reads one run's event lines from the chunks of its descriptor 3 ({@link push}), hands on each
 * valid one at once, and sums them up at the end ({@link end}). Not reusable across runs.
 */
export class EventReader {
  readonly #limits: EventLimits;
  readonly #secrets: SecretList;
  readonly #deliver: ((event: ToolEvent) => void) | undefined;
  readonly #summary: EventSummary = {
    delivered: { progress: 0, log: 0 },
    coalesced: 0,
    dropped: { too_long: 0, over_limit: 0, over_bytes: 0, not_increasing: 0 },
    malformed: 0,
    bytes: 0,
  };
  /** The current line so far (at most `lineBytes`), or `skipping` once it is known too long. */
  #line: Buffer[] = [];
  #lineLength = 0;
  #skipping = false;
  #parsedBytes = 0;
  #lastProgress = Number.NEGATIVE_INFINITY;
  #pending: Extract<ToolEvent, { type: 'progress' }> | undefined;
  #lastProgressAt = Number.NEGATIVE_INFINITY;
  #timer: NodeJS.Timeout | undefined;
  #ended = false;

  constructor(options: { secrets: SecretList; onEvent?: (event: ToolEvent) => void; limits?: Partial<EventLimits> }) {
    this.#limits = { ...DEFAULT_EVENT_LIMITS, ...options.limits };
    this.#secrets = options.secrets;
    this.#deliver = options.onEvent;
  }

  /** Takes the next chunk the tool wrote (chunks split lines anywhere). */
  push(chunk: Buffer): void {
    if (this.#ended) return;
    this.#summary.bytes += chunk.length;
    let from = 0;
    while (from < chunk.length) {
      const nl = chunk.indexOf(NL, from);
      const end = nl < 0 ? chunk.length : nl;
      this.#take(chunk.subarray(from, end));
      if (nl < 0) return;
      this.#endLine();
      from = nl + 1;
    }
  }

  /**
   * The tool is done: a last line without its newline counts as a line, a waiting progress is
   * delivered, and nothing is delivered afterwards. Returns the summary (the same one each time).
   */
  end(): EventSummary {
    if (!this.#ended) {
      if (this.#lineLength > 0 || this.#skipping) this.#endLine();
      clearTimeout(this.#timer);
      this.#flushProgress();
      this.#ended = true;
    }
    const s = this.#summary;
    return {
      ...s,
      delivered: { ...s.delivered },
      dropped: { ...s.dropped },
      ...(s.last_progress ? { last_progress: { ...s.last_progress } } : {}),
    };
  }

  #take(part: Buffer): void {
    if (this.#skipping || part.length === 0) return;
    if (this.#lineLength + part.length > this.#limits.lineBytes) {
      // Too long: forgotten now, not kept until its end comes.
      this.#skipping = true;
      this.#line = [];
      this.#lineLength = 0;
      return;
    }
    this.#line.push(part);
    this.#lineLength += part.length;
  }

  #endLine(): void {
    const skipped = this.#skipping;
    const length = this.#lineLength;
    const parts = this.#line;
    this.#line = [];
    this.#lineLength = 0;
    this.#skipping = false;
    if (skipped) return void this.#summary.dropped.too_long++;
    if (length === 0) return;
    if (this.#parsedBytes + length > this.#limits.bytes) {
      this.#parsedBytes = this.#limits.bytes; // and every later line is past it too
      return void this.#summary.dropped.over_bytes++;
    }
    this.#parsedBytes += length;
    const text = (parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts, length)).toString('utf8');
    if (text.trim() === '') return;
    const event = parseEvent(text);
    if (!event) return void this.#summary.malformed++;
    if (event.type === 'progress') this.#progress(event);
    else {
      this.#flushProgress(); // what came before it goes before it
      this.#emit(event);
    }
  }

  #progress(event: Extract<ToolEvent, { type: 'progress' }>): void {
    // MCP wants progress to grow with each notification.
    if (!(event.progress > this.#lastProgress)) return void this.#summary.dropped.not_increasing++;
    this.#lastProgress = event.progress;
    this.#summary.last_progress = { progress: event.progress, ...(event.total !== undefined ? { total: event.total } : {}) };
    if (this.#pending) this.#summary.coalesced++;
    this.#pending = event;
    const wait = this.#lastProgressAt + this.#limits.progressIntervalMs - performance.now();
    if (wait <= 0) this.#flushProgress();
    else this.#timer ??= setTimeout(() => this.#flushProgress(), wait);
  }

  #flushProgress(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const event = this.#pending;
    if (!event || this.#ended) return;
    this.#pending = undefined;
    this.#lastProgressAt = performance.now();
    this.#emit(event);
  }

  #emit(event: ToolEvent): void {
    const s = this.#summary;
    if (s.delivered.progress + s.delivered.log >= this.#limits.events) return void s.dropped.over_limit++;
    s.delivered[event.type]++;
    if (!this.#deliver) return;
    try {
      this.#deliver(redactEvent(event, this.#secrets));
    } catch {
      // The caller's hook failing is no fault of the tool's: the run goes on.
    }
  }
}

/** The event a line holds, or undefined when it holds none (not JSON, not an object, a bad field). */
export function parseEvent(line: string): ToolEvent | undefined {
  // Not an object, so not an event: known without JSON.parse (a flood of text costs little).
  if (!/^\s*\{/.test(line)) return undefined;
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return undefined;
  const o = v as Record<string, unknown>;
  const isProgress = Object.hasOwn(o, 'progress');
  if (isProgress === Object.hasOwn(o, 'log')) return undefined; // neither, or both
  if (o.message !== undefined && typeof o.message !== 'string') return undefined;
  const message = o.message === undefined ? {} : { message: o.message };
  if (isProgress) {
    if (!isFiniteNumber(o.progress) || (o.total !== undefined && !isFiniteNumber(o.total))) return undefined;
    return { type: 'progress', progress: o.progress, ...(o.total !== undefined ? { total: o.total } : {}), ...message };
  }
  if (typeof o.log !== 'string' || !LEVELS.has(o.log)) return undefined;
  return { type: 'log', level: o.log as LogLevel, ...message, ...(o.data !== undefined ? { data: o.data } : {}) };
}

const isFiniteNumber = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x);

/** `event` with every secret value removed from its message and from every string and key of its data. */
function redactEvent(event: ToolEvent, secrets: SecretList): ToolEvent {
  if (secrets.length === 0) return event;
  const out = { ...event };
  if (out.message !== undefined) out.message = redactText(out.message, secrets);
  if (out.type === 'log' && out.data !== undefined) out.data = redactValue(out.data, secrets);
  return out;
}
