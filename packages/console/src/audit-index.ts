import { constants, type FileHandle, open, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { type CallView, callRow } from './calls.js';
import type { EntryView, Page, StatsView, ToolStatsView } from './views.js';
import { sealedNumbers } from './web/verify.js';

/**
 * The audit log as the console pages it: a few numbers per entry (where its line is, its time,
 * its type, and for a call its tool, persona, outcome and duration), in typed columns with the
 * strings interned (about 50 bytes an entry), read once and then only as the log grows. A page
 * is a walk over the columns and a read of its 100 lines from the files; a chart is a pass over
 * the last hour's or day's entries. It reads lines, it does not vouch for them: the page verifies
 * the log's bytes itself.
 */

interface FileRead {
  name: string;
  ino: number;
  /** Bytes read (whole lines). */
  size: number;
  /** Lines read. */
  lines: number;
}

/** An entry the index holds: its seq (what the live tail sends on). */
export interface IndexedEntry {
  seq: number;
}

/** What the runs page may filter calls by. */
export interface CallQuery {
  tool?: string;
  persona?: string;
  /** `ok`, `error` (any failure) or one error kind. */
  outcome?: string;
  /** Times as ms since the epoch. */
  since?: number;
  until?: number;
  before?: number;
  limit?: number;
}

const MAX_LIMIT = 500;
/** Bytes read from a file at once while indexing. */
const READ_BYTES = 8 << 20;
/** No string: a column's value for "absent". */
const NONE = 0xffffffff;

/** A file of the log that is there but is not a regular file (a link, a FIFO, a device, a directory). */
export class NotRegularFile extends Error {
  override readonly name = 'NotRegularFile';
}

/**
 * Opens a file of the log only as a regular file, never through a link, never waiting on a FIFO;
 * undefined when it does not exist. Throws {@link NotRegularFile} for anything else in its place.
 */
export async function openLogFile(path: string): Promise<FileHandle | undefined> {
  let fh: FileHandle;
  try {
    fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    if (code === 'ELOOP')
      throw new NotRegularFile(`${path} is a symbolic link: the audit log's files are read only as regular files, never through a link`);
    throw err;
  }
  const st = await fh.stat();
  if (!st.isFile()) {
    await fh.close();
    throw new NotRegularFile(`${path} is not a regular file: the audit log's files are read only as regular files`);
  }
  return fh;
}

/** An entry's line parsed for what the index keeps; a line that does not parse keeps its place. */
function parseLine(text: string, seq: number): { ts: string; type: string; call: CallView | undefined } {
  try {
    const e = JSON.parse(text) as { ts?: unknown; type?: unknown; data?: unknown };
    const ts = typeof e.ts === 'string' ? e.ts : '';
    const type = typeof e.type === 'string' ? e.type : '(unreadable)';
    return { ts, type, call: callRow(seq, ts, type, e.data) };
  } catch {
    return { ts: '', type: '(unreadable)', call: undefined };
  }
}

/** The p-th percentile (0–1) of sorted values. */
function percentile(sorted: number[], p: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] as number;
}

type Typed = Float64Array | Uint32Array | Uint16Array | Uint8Array;

/** The columns, one value per entry (entry `seq` at `seq - 1`), grown by doubling. */
class Columns {
  length = 0;
  ms = new Float64Array(1024);
  offset = new Float64Array(1024);
  duration = new Float64Array(1024);
  line = new Uint32Array(1024);
  bytes = new Uint32Array(1024);
  type = new Uint32Array(1024);
  /** The tool's name for a call, else {@link NONE}. */
  name = new Uint32Array(1024);
  persona = new Uint32Array(1024);
  outcome = new Uint32Array(1024);
  file = new Uint16Array(1024);
  ok = new Uint8Array(1024);

  push(): number {
    if (this.length === this.ms.length) {
      const grow = <T extends Typed>(a: T): T => {
        const b = new (a.constructor as new (n: number) => T)(a.length * 2);
        b.set(a);
        return b;
      };
      this.ms = grow(this.ms);
      this.offset = grow(this.offset);
      this.duration = grow(this.duration);
      this.line = grow(this.line);
      this.bytes = grow(this.bytes);
      this.type = grow(this.type);
      this.name = grow(this.name);
      this.persona = grow(this.persona);
      this.outcome = grow(this.outcome);
      this.file = grow(this.file);
      this.ok = grow(this.ok);
    }
    return this.length++;
  }
}

export class AuditIndex {
  readonly dir: string;
  readonly base: string;
  /** Why the index stopped short of the log's end at its last read (a file that is not a regular file), if it did. */
  problem: string | undefined;
  #files: FileRead[] = [];
  #cols = new Columns();
  #strings: string[] = [];
  #ids = new Map<string, number>();
  #refreshing: Promise<IndexedEntry[]> | undefined;
  #again = false;
  readonly #readable: boolean;
  readonly #readBytes: number;

  /**
   * `readable: false`: a log this process cannot read as files (every read finds nothing).
   * `readBytes`: how much of a file is read at once (default 8 MiB; lines longer are carried over).
   */
  constructor(dir: string, base: string, options: { readable?: boolean; readBytes?: number } = {}) {
    this.dir = dir;
    this.base = base;
    this.#readable = options.readable ?? true;
    this.#readBytes = options.readBytes ?? READ_BYTES;
  }

  /** Entries indexed. */
  get size(): number {
    return this.#cols.length;
  }

  #id(s: string): number {
    let id = this.#ids.get(s);
    if (id === undefined) {
      id = this.#strings.length;
      this.#strings.push(s);
      this.#ids.set(s, id);
    }
    return id;
  }

  /** Reads what the log gained since the last read (or everything again when it was not only appended to); resolves to the new entries. */
  refresh(): Promise<IndexedEntry[]> {
    if (this.#refreshing) {
      this.#again = true;
      return this.#refreshing;
    }
    this.#refreshing = (async () => {
      const added: IndexedEntry[] = [];
      try {
        do {
          this.#again = false;
          added.push(...(await this.#read()));
        } while (this.#again);
      } finally {
        this.#refreshing = undefined;
      }
      return added;
    })();
    return this.#refreshing;
  }

  /** The log's segments as they are now, opened, in order (up to one that is not a regular file). */
  async #open(handles: Map<string, FileHandle>): Promise<{ name: string; ino: number; size: number }[]> {
    const names = await readdir(this.dir).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return [] as string[];
      throw err;
    });
    const order = [...sealedNumbers(this.base, names).map((n) => `${this.base}.${String(n).padStart(6, '0')}`), this.base];
    const now: { name: string; ino: number; size: number }[] = [];
    for (const name of order) {
      let fh: FileHandle | undefined;
      try {
        fh = await openLogFile(join(this.dir, name));
      } catch (err) {
        // The page's verifier names it; the index lists what precedes it.
        if (!(err instanceof NotRegularFile)) throw err;
        this.problem = err.message;
        break;
      }
      if (!fh) continue;
      handles.set(name, fh);
      const st = await fh.stat();
      now.push({ name, ino: st.ino, size: st.size });
    }
    return now;
  }

  async #read(): Promise<IndexedEntry[]> {
    this.problem = undefined;
    if (!this.#readable) return [];
    const handles = new Map<string, FileHandle>();
    try {
      const now = await this.#open(handles);
      // Only appended to (the active segment perhaps sealed under a new name since): continue; else read again.
      const continues = this.#files.every((f, i) => now[i]?.ino === f.ino && (now[i]?.size ?? 0) >= f.size);
      if (!continues) {
        this.#files = [];
        this.#cols = new Columns();
      }
      const first = this.#cols.length;
      for (let i = 0; i < now.length; i++) {
        const cur = now[i] as { name: string; ino: number; size: number };
        const file = this.#files[i] ?? { name: cur.name, ino: cur.ino, size: 0, lines: 0 };
        if (!this.#files[i]) this.#files.push(file);
        file.name = cur.name;
        await this.#readFile(handles.get(cur.name) as FileHandle, i, file, cur.size);
      }
      const added: IndexedEntry[] = [];
      for (let i = first; i < this.#cols.length; i++) added.push({ seq: i + 1 });
      return added;
    } finally {
      await Promise.all([...handles.values()].map((h) => h.close()));
    }
  }

  /** Indexes the whole lines of one file from where the last read stopped, a few MiB at a time. */
  async #readFile(fh: FileHandle, index: number, file: FileRead, size: number): Promise<void> {
    let carry = Buffer.alloc(0);
    let at = file.size;
    while (at < size) {
      const chunk = Buffer.alloc(Math.min(this.#readBytes, size - at));
      const { bytesRead } = await fh.read(chunk, 0, chunk.length, at);
      if (bytesRead === 0) break;
      at += bytesRead;
      const buf = carry.length ? Buffer.concat([carry, chunk.subarray(0, bytesRead)]) : chunk.subarray(0, bytesRead);
      let from = 0;
      for (let nl = buf.indexOf(10, from); nl >= 0; nl = buf.indexOf(10, from)) {
        file.lines++;
        this.#add(buf.toString('utf8', from, nl), index, file.lines, file.size, nl - from);
        file.size += nl - from + 1;
        from = nl + 1;
      }
      carry = Buffer.from(buf.subarray(from)); // a line cut by the read, or a torn tail: not a row yet
    }
  }

  #add(text: string, file: number, line: number, offset: number, bytes: number): void {
    const c = this.#cols;
    const i = c.push();
    const { ts, type, call } = parseLine(text, i + 1);
    c.ms[i] = Date.parse(ts) || 0;
    c.offset[i] = offset;
    c.bytes[i] = bytes;
    c.line[i] = line;
    c.file[i] = file;
    c.type[i] = this.#id(type);
    c.name[i] = call ? this.#id(call.name) : NONE;
    c.persona[i] = call ? this.#id(call.persona) : NONE;
    c.outcome[i] = call ? this.#id(call.outcome) : NONE;
    c.ok[i] = call?.ok ? 1 : 0;
    c.duration[i] = call?.duration_ms ?? Number.NaN;
  }

  /** The lines of entries `seqs`, read from their files. */
  async #lines(seqs: number[]): Promise<{ seq: number; file: string; line: number; text: string }[]> {
    const out: { seq: number; file: string; line: number; text: string }[] = [];
    const handles = new Map<number, FileHandle | undefined>();
    const c = this.#cols;
    try {
      for (const seq of seqs) {
        const i = seq - 1;
        const f = c.file[i] as number;
        const name = this.#files[f]?.name ?? this.base;
        if (!handles.has(f))
          handles.set(
            f,
            await openLogFile(join(this.dir, name)).catch((err: Error) => {
              if (err instanceof NotRegularFile) return undefined; // replaced since it was read: shown empty, the verifier names it
              throw err;
            }),
          );
        const buf = Buffer.alloc(c.bytes[i] as number);
        await handles.get(f)?.read(buf, 0, buf.length, c.offset[i] as number);
        out.push({ seq, file: name, line: c.line[i] as number, text: buf.toString('utf8') });
      }
    } finally {
      await Promise.all([...handles.values()].map((h) => h?.close()));
    }
    return out;
  }

  /** Entries as the audit page shows them. */
  async views(entries: readonly IndexedEntry[]): Promise<EntryView[]> {
    return (await this.#lines(entries.map((e) => e.seq))).map((l) => {
      const p = parseLine(l.text, l.seq);
      return { seq: l.seq, ts: p.ts, type: p.type, file: l.file, line: l.line, text: l.text };
    });
  }

  /** The interned ids of the types `type` names: one type, or every type under a prefix ending in a dot. */
  #typeIds(type: string): Set<number> {
    const ids = new Set<number>();
    this.#strings.forEach((s, id) => {
      if (s === type || (type.endsWith('.') && s.startsWith(type))) ids.add(id);
    });
    return ids;
  }

  /** A page of entries, newest first, before seq `before` (exclusive). */
  async entries(q: { before?: number; limit?: number; type?: string }): Promise<Page<EntryView>> {
    await this.refresh();
    const c = this.#cols;
    const limit = Math.min(Math.max(1, q.limit ?? 100), MAX_LIMIT);
    const ids = q.type === undefined ? undefined : this.#typeIds(q.type);
    const match = (i: number) => ids === undefined || ids.has(c.type[i] as number);
    let total = c.length;
    if (ids) {
      total = 0;
      for (let i = 0; i < c.length; i++) if (match(i)) total++;
    }
    const picked: number[] = [];
    let i = Math.min(c.length, (q.before ?? c.length + 1) - 1) - 1;
    for (; i >= 0 && picked.length < limit; i--) if (match(i)) picked.push(i + 1);
    let more = false;
    for (let j = i; j >= 0 && !more; j--) if (match(j)) more = true;
    const rows = await this.views(picked.map((seq) => ({ seq })));
    const last = picked[picked.length - 1];
    return { rows, total, ...(more && last !== undefined ? { next: last } : {}) };
  }

  /** A page of calls, newest first, matching `q`. */
  async calls(q: CallQuery): Promise<Page<CallView>> {
    await this.refresh();
    const c = this.#cols;
    const limit = Math.min(Math.max(1, q.limit ?? 100), MAX_LIMIT);
    const id = (s: string | undefined) => (s === undefined ? undefined : (this.#ids.get(s) ?? -1));
    const tool = id(q.tool);
    const persona = id(q.persona);
    const outcome = q.outcome === 'error' ? undefined : id(q.outcome);
    const match = (i: number): boolean => {
      if (c.name[i] === NONE) return false;
      if (tool !== undefined && c.name[i] !== tool) return false;
      if (persona !== undefined && c.persona[i] !== persona) return false;
      if (q.outcome === 'error' && c.ok[i] === 1) return false;
      if (outcome !== undefined && c.outcome[i] !== outcome) return false;
      const ms = c.ms[i] as number;
      if (q.since !== undefined && ms < q.since) return false;
      if (q.until !== undefined && ms >= q.until) return false;
      return true;
    };
    let total = 0;
    const picked: number[] = [];
    let next: number | undefined;
    for (let i = c.length - 1; i >= 0; i--) {
      if (!match(i)) continue;
      total++;
      if (q.before !== undefined && i + 1 >= q.before) continue;
      if (picked.length < limit) picked.push(i + 1);
      else next ??= picked[picked.length - 1];
    }
    const rows: CallView[] = [];
    for (const l of await this.#lines(picked)) {
      const call = parseLine(l.text, l.seq).call;
      if (call) rows.push({ ...call, seq: l.seq });
    }
    return { rows, total, ...(next !== undefined ? { next } : {}) };
  }

  /** Calls per bucket, latency percentiles, errors by kind and per-tool figures over the last hour or day (of one tool's calls only, when named). */
  async stats(window: 'hour' | 'day', now = Date.now(), tool?: string): Promise<StatsView> {
    await this.refresh();
    const c = this.#cols;
    const span = window === 'hour' ? 3_600_000 : 86_400_000;
    const bucket = window === 'hour' ? 60_000 : 900_000;
    const n = span / bucket;
    const start = Math.floor((now - span) / bucket + 1) * bucket;
    const only = tool === undefined ? undefined : (this.#ids.get(tool) ?? -1);
    const durations: number[][] = Array.from({ length: n }, () => []);
    const calls = new Array<number>(n).fill(0);
    const errors: Record<string, number[]> = {};
    const tools = new Map<number, { calls: number; errors: number; ms: number[] }>();
    for (let i = c.length - 1; i >= 0; i--) {
      const ms = c.ms[i] as number;
      // Entries are appended in time order, give or take writers racing: stop a minute past the window.
      if (ms < start - 60_000) break;
      const name = c.name[i] as number;
      if (name === NONE || ms < start || ms >= start + span || (only !== undefined && name !== only)) continue;
      const b = Math.floor((ms - start) / bucket);
      calls[b] = (calls[b] as number) + 1;
      const d = c.duration[i] as number;
      if (!Number.isNaN(d)) (durations[b] as number[]).push(d);
      const t = tools.get(name) ?? { calls: 0, errors: 0, ms: [] };
      t.calls++;
      if (!Number.isNaN(d)) t.ms.push(d);
      if (c.ok[i] !== 1) {
        t.errors++;
        const kind = this.#strings[c.outcome[i] as number] as string;
        errors[kind] ??= new Array<number>(n).fill(0);
        (errors[kind] as number[])[b] = ((errors[kind] as number[])[b] as number) + 1;
      }
      tools.set(name, t);
    }
    const sorted = durations.map((d) => d.sort((a, b) => a - b));
    const toolRows: ToolStatsView[] = [...tools].map(([id, t]) => {
      const ms = t.ms.sort((a, b) => a - b);
      const p50 = percentile(ms, 0.5);
      const p99 = percentile(ms, 0.99);
      return {
        name: this.#strings[id] as string,
        calls: t.calls,
        errors: t.errors,
        ...(p50 !== null ? { p50_ms: p50 } : {}),
        ...(p99 !== null ? { p99_ms: p99 } : {}),
      };
    });
    toolRows.sort((a, b) => b.calls - a.calls || a.name.localeCompare(b.name));
    return {
      window,
      bucket_ms: bucket,
      t: Array.from({ length: n }, (_, i) => start + i * bucket),
      calls,
      p50: sorted.map((d) => percentile(d, 0.5)),
      p99: sorted.map((d) => percentile(d, 0.99)),
      errors,
      tools: toolRows,
    };
  }
}
