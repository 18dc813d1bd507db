import { constants, type FileHandle, open, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { CallView, EntryView, Page, StatsView, ToolStatsView } from './views.js';
import { sealedNumbers } from './web/verify.js';

/**
 * The audit log as the console pages it: one small row per entry (where its line is, its seq,
 * time and type, and for a call what the runs page lists), read once and then only as the log
 * grows, so a page of 100,000 entries is a slice and a chart a pass over the last hour's rows.
 * It reads lines, it does not vouch for them: the page verifies the log's bytes itself.
 */

interface FileRead {
  name: string;
  ino: number;
  /** Bytes read (whole lines). */
  size: number;
  /** Lines read. */
  lines: number;
}

interface Row {
  seq: number;
  ts: string;
  ms: number;
  type: string;
  file: number;
  line: number;
  offset: number;
  length: number;
  call?: CallView;
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

/** The call row of an entry's fields, or undefined when it is not a call. */
function callOf(seq: number, ts: string, type: string, data: unknown): CallView | undefined {
  if (!type.endsWith('.called') || !data || typeof data !== 'object') return undefined;
  const d = data as Record<string, unknown>;
  if (typeof d.name !== 'string') return undefined;
  const ok = d.ok === true;
  return {
    seq,
    ts,
    type,
    name: d.name,
    persona: typeof d.persona === 'string' ? d.persona : '',
    ok,
    outcome: ok ? 'ok' : typeof d.kind === 'string' ? d.kind : 'failed',
    ...(typeof d.duration_ms === 'number' ? { duration_ms: d.duration_ms } : {}),
    ...(typeof d.run_id === 'string' ? { run_id: d.run_id } : {}),
    ...(typeof d.cache === 'string' ? { cache: d.cache } : {}),
  };
}

/** The p-th percentile (0–1) of sorted values. */
function percentile(sorted: number[], p: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] as number;
}

export class AuditIndex {
  readonly dir: string;
  readonly base: string;
  #files: FileRead[] = [];
  /** Entry `seq` is row `seq - 1`: the position in the log, whatever the line says. */
  #rows: Row[] = [];
  #refreshing: Promise<Row[]> | undefined;
  /** Why the index stopped short of the log's end at its last read (a file that is not a regular file), if it did. */
  problem: string | undefined;
  #again = false;

  readonly #readable: boolean;

  /** `readable: false`: a log this process cannot read as files (every read finds nothing). */
  constructor(dir: string, base: string, options: { readable?: boolean } = {}) {
    this.dir = dir;
    this.base = base;
    this.#readable = options.readable ?? true;
  }

  /** Entries indexed. */
  get size(): number {
    return this.#rows.length;
  }

  /** Reads what the log gained since the last read (or everything again when it was not only appended to); resolves to the new rows. */
  refresh(): Promise<Row[]> {
    if (this.#refreshing) {
      this.#again = true;
      return this.#refreshing;
    }
    this.#refreshing = (async () => {
      const added: Row[] = [];
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

  async #read(): Promise<Row[]> {
    this.problem = undefined;
    if (!this.#readable) return [];
    const names = await readdir(this.dir).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return [] as string[];
      throw err;
    });
    const order = [...sealedNumbers(this.base, names).map((n) => `${this.base}.${String(n).padStart(6, '0')}`), this.base];
    const handles: (FileHandle | undefined)[] = [];
    try {
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
        handles.push(fh);
        if (!fh) continue;
        const st = await fh.stat();
        now.push({ name, ino: st.ino, size: st.size });
      }
      // Only appended to (the active segment perhaps sealed under a new name since): continue; else read again.
      const continues = this.#files.every((f, i) => now[i]?.ino === f.ino && (now[i]?.size ?? 0) >= f.size);
      if (!continues) {
        this.#files = [];
        this.#rows = [];
      }
      const added: Row[] = [];
      for (let i = 0; i < now.length; i++) {
        const cur = now[i] as { name: string; ino: number; size: number };
        const known = this.#files[i];
        const from = known?.size ?? 0;
        if (known) known.name = cur.name;
        if (cur.size <= from && known) continue;
        const fh = handles[order.indexOf(cur.name)] as FileHandle;
        const buf = Buffer.alloc(cur.size - from);
        const { bytesRead } = await fh.read(buf, 0, buf.length, from);
        const end = buf.lastIndexOf(10, bytesRead - 1) + 1; // whole lines only
        const file = known ?? { name: cur.name, ino: cur.ino, size: 0, lines: 0 };
        if (!known) this.#files.push(file);
        let at = 0;
        while (at < end) {
          const nl = buf.indexOf(10, at);
          file.lines++;
          added.push(this.#row(buf.subarray(at, nl), this.#rows.length + added.length + 1, i, file.lines, from + at));
          at = nl + 1;
        }
        file.size = from + end;
      }
      this.#rows.push(...added);
      return added;
    } finally {
      await Promise.all(handles.map((h) => h?.close()));
    }
  }

  #row(bytes: Buffer, seq: number, file: number, line: number, offset: number): Row {
    let ts = '';
    let type = '(unreadable)';
    let call: CallView | undefined;
    try {
      const e = JSON.parse(bytes.toString('utf8')) as { seq?: unknown; ts?: unknown; type?: unknown; data?: unknown };
      if (typeof e.ts === 'string') ts = e.ts;
      if (typeof e.type === 'string') type = e.type;
      call = callOf(typeof e.seq === 'number' ? e.seq : seq, ts, type, e.data);
    } catch {
      // Shown as it is; the page's verifier names what is wrong with it.
    }
    const row: Row = { seq, ts, ms: Date.parse(ts) || 0, type, file, line, offset, length: bytes.length };
    if (call) row.call = call;
    return row;
  }

  /** A page of entries, newest first, before seq `before` (exclusive). */
  async entries(q: { before?: number; limit?: number; type?: string }): Promise<Page<EntryView>> {
    await this.refresh();
    const limit = Math.min(Math.max(1, q.limit ?? 100), MAX_LIMIT);
    const match = (r: Row) => q.type === undefined || r.type === q.type || (q.type.endsWith('.') && r.type.startsWith(q.type));
    const total = q.type === undefined ? this.#rows.length : this.#rows.filter(match).length;
    const picked: Row[] = [];
    let i = Math.min(this.#rows.length, (q.before ?? this.#rows.length + 1) - 1) - 1;
    for (; i >= 0 && picked.length < limit; i--) if (match(this.#rows[i] as Row)) picked.push(this.#rows[i] as Row);
    const rows = await this.#texts(picked);
    const last = picked[picked.length - 1];
    return { rows, total, ...(i >= 0 && last ? { next: last.seq } : {}) };
  }

  /** The lines of `rows`, read from their files. */
  async #texts(rows: Row[]): Promise<EntryView[]> {
    const out: EntryView[] = [];
    const handles = new Map<number, FileHandle | undefined>();
    try {
      for (const r of rows) {
        if (!handles.has(r.file))
          handles.set(
            r.file,
            await openLogFile(join(this.dir, this.#files[r.file]?.name ?? this.base)).catch((err: Error) => {
              if (err instanceof NotRegularFile) return undefined; // replaced since it was read: shown empty, the verifier names it
              throw err;
            }),
          );
        const fh = handles.get(r.file);
        const buf = Buffer.alloc(r.length);
        if (fh) await fh.read(buf, 0, r.length, r.offset);
        out.push({
          seq: r.seq,
          ts: r.ts,
          type: r.type,
          file: this.#files[r.file]?.name ?? this.base,
          line: r.line,
          text: buf.toString('utf8'),
        });
      }
    } finally {
      await Promise.all([...handles.values()].map((h) => h?.close()));
    }
    return out;
  }

  /** Rows as the SSE tail sends them. */
  views(rows: Row[]): Promise<EntryView[]> {
    return this.#texts(rows);
  }

  /** A page of calls, newest first, matching `q`. */
  async calls(q: CallQuery): Promise<Page<CallView>> {
    await this.refresh();
    const limit = Math.min(Math.max(1, q.limit ?? 100), MAX_LIMIT);
    const match = (r: Row): boolean => {
      const c = r.call;
      if (!c) return false;
      if (q.tool !== undefined && c.name !== q.tool) return false;
      if (q.persona !== undefined && c.persona !== q.persona) return false;
      if (q.outcome !== undefined && !(q.outcome === 'error' ? !c.ok : c.outcome === q.outcome)) return false;
      if (q.since !== undefined && r.ms < q.since) return false;
      if (q.until !== undefined && r.ms >= q.until) return false;
      return true;
    };
    let total = 0;
    const rows: CallView[] = [];
    let next: number | undefined;
    for (let i = this.#rows.length - 1; i >= 0; i--) {
      const r = this.#rows[i] as Row;
      if (!match(r)) continue;
      total++;
      if (q.before !== undefined && r.seq >= q.before) continue;
      if (rows.length < limit) rows.push(r.call as CallView);
      else next ??= (rows[rows.length - 1] as CallView).seq;
    }
    return { rows, total, ...(next !== undefined ? { next } : {}) };
  }

  /** Calls per bucket, latency percentiles, errors by kind and per-tool figures over the last hour or day (of one tool's calls only, when named). */
  async stats(window: 'hour' | 'day', now = Date.now(), tool?: string): Promise<StatsView> {
    await this.refresh();
    const span = window === 'hour' ? 3_600_000 : 86_400_000;
    const bucket = window === 'hour' ? 60_000 : 900_000;
    const n = span / bucket;
    const start = Math.floor((now - span) / bucket + 1) * bucket;
    const durations: number[][] = Array.from({ length: n }, () => []);
    const calls = new Array<number>(n).fill(0);
    const errors: Record<string, number[]> = {};
    const tools = new Map<string, { calls: number; errors: number; ms: number[] }>();
    for (let i = this.#rows.length - 1; i >= 0; i--) {
      const r = this.#rows[i] as Row;
      // Entries are appended in time order, give or take writers racing: stop a minute past the window.
      if (r.ms < start - 60_000) break;
      const c = r.call;
      if (!c || r.ms < start || r.ms >= start + span || (tool !== undefined && c.name !== tool)) continue;
      const b = Math.floor((r.ms - start) / bucket);
      calls[b] = (calls[b] as number) + 1;
      if (c.duration_ms !== undefined) (durations[b] as number[]).push(c.duration_ms);
      if (!c.ok) {
        errors[c.outcome] ??= new Array<number>(n).fill(0);
        (errors[c.outcome] as number[])[b] = ((errors[c.outcome] as number[])[b] as number) + 1;
      }
      const t = tools.get(c.name) ?? { calls: 0, errors: 0, ms: [] };
      t.calls++;
      if (!c.ok) t.errors++;
      if (c.duration_ms !== undefined) t.ms.push(c.duration_ms);
      tools.set(c.name, t);
    }
    const sorted = durations.map((d) => d.sort((a, b) => a - b));
    const toolRows: ToolStatsView[] = [...tools].map(([name, t]) => {
      const ms = t.ms.sort((a, b) => a - b);
      const p50 = percentile(ms, 0.5);
      const p99 = percentile(ms, 0.99);
      return { name, calls: t.calls, errors: t.errors, ...(p50 !== null ? { p50_ms: p50 } : {}), ...(p99 !== null ? { p99_ms: p99 } : {}) };
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
