import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { AuditEntry } from '@forge/audit-chain';
import { type CallView, callRow as callView } from '@forge/console/calls';
import type { PostgresAuditLog } from '@forge/postgres';
import { EnvironmentError } from './args.js';
import type { Style } from './output.js';
import { openStore, storeUrl } from './store.js';
import type { Where } from './where.js';

/**
 * A tool's calls, read from the audit log (never from a copy of it): the file log is verified
 * whole before anything is shown and every entry read is checked against the one before it; a
 * database's log is read from the database, each entry checked against the one before it there.
 * The rows carry what the entries carry, which the engine redacted when it wrote them.
 */

/** How many entries, from the end, a log is searched for a tool's calls. */
export const CALL_WINDOW = 10_000;

/** One call of a tool, as its audit entry records it (the console's runs page lists the same rows). */
export type CallRow = CallView;

/** The row of a call entry, or undefined for any other entry. */
export function callRow(e: AuditEntry): CallRow | undefined {
  return callView(e.seq, e.ts, e.type, e.data);
}

/** One row as a line: `seq  time  persona  outcome  duration  run id`. */
export function formatRow(r: CallRow, s?: Style): string {
  const outcome = r.ok ? (s ? s.green(r.outcome) : r.outcome) : s ? s.red(r.outcome) : r.outcome;
  const parts = [
    String(r.seq).padStart(6),
    r.ts,
    r.persona,
    outcome,
    r.duration_ms !== undefined ? `${r.duration_ms} ms` : '-',
    r.cache === 'hit' ? `${r.run_id ?? '-'} (cache hit)` : (r.run_id ?? '-'),
  ];
  return parts.join('  ');
}

/** The audit log of `w`: the file log (its path) or the database's. */
export type LogSource =
  | { kind: 'file'; path: string /** Entries the log held when it was verified (0: no log yet). */; entries: number }
  | { kind: 'database'; audit: PostgresAuditLog; close(): Promise<void> };

/** Opens the log `w` names; a file log that is missing or does not verify is an environment error naming the fix. */
export async function openCallLog(w: Where): Promise<LogSource> {
  if (storeUrl(w.env)) {
    const store = await openStore(w);
    const { audit } = store.forgeOptions([]) as { audit: PostgresAuditLog };
    return { kind: 'database', audit, close: () => store.close() };
  }
  const path = join(w.home, 'audit', 'forge.log');
  if (!existsSync(path)) return { kind: 'file', path, entries: 0 };
  const { verifyLog } = await import('@forge/audit-chain');
  const v = await verifyLog(path);
  if (!v.ok) {
    const b = v.first_bad;
    throw new EnvironmentError(
      `the audit log ${path} does not verify${b ? ` (entry ${b.seq}: ${b.reason}: ${b.message})` : ''}: no call is shown from it; forge audit verify says more`,
    );
  }
  return { kind: 'file', path, entries: v.entries };
}

/**
 * The calls of the tools `names` (all tools when undefined) among the last {@link CALL_WINDOW}
 * entries, at most `perTool` each, oldest first; with `follow`, then each new one as it is
 * appended (to the file, or committed to the database by any host), until `signal` aborts.
 */
export async function* readCalls(
  src: LogSource,
  o: { names?: ReadonlySet<string>; perTool: number; follow?: boolean; signal?: AbortSignal; onLive?: () => void },
): AsyncGenerator<CallRow> {
  const wanted = (r: CallRow | undefined): r is CallRow => r !== undefined && (!o.names || o.names.has(r.name));
  const byTool = new Map<string, CallRow[]>();
  const keep = (r: CallRow) => {
    const list = byTool.get(r.name) ?? [];
    list.push(r);
    if (list.length > o.perTool) list.shift();
    byTool.set(r.name, list);
  };
  const history = () => [...byTool.values()].flat().sort((a, b) => a.seq - b.seq);
  if (src.kind === 'database') {
    // What the database held at its head when asked is history; what is committed after, live.
    const head = (await src.audit.head()).seq;
    let live = false;
    const caughtUp = function* () {
      live = true;
      yield* history();
      o.onLive?.();
    };
    if (head === 0) yield* caughtUp();
    const from = live ? 1 : Math.max(1, head - CALL_WINDOW + 1);
    const follow = o.follow === true;
    for await (const e of src.audit.entries({ from, follow, ...(o.signal ? { signal: o.signal } : {}) })) {
      const r = callRow(e);
      if (live) {
        if (wanted(r)) yield r;
        continue;
      }
      if (wanted(r)) keep(r);
      if (e.seq >= head) {
        yield* caughtUp();
        if (!follow) return;
      }
    }
    if (!live) yield* caughtUp();
    return;
  }
  if (!existsSync(src.path)) {
    o.onLive?.();
    return;
  }
  const { tailLog } = await import('@forge/audit-chain');
  // What the log held when it was verified is history; what comes after, in a follow, is live.
  const end = src.entries;
  // A log that held nothing has no history: everything it gets is live (a follow of an empty
  // log would otherwise wait for its first entry to say so).
  let live = end === 0;
  if (live) o.onLive?.();
  for await (const e of tailLog(src.path, { last: CALL_WINDOW, follow: o.follow === true, ...(o.signal ? { signal: o.signal } : {}) })) {
    const r = callRow(e);
    if (!live) {
      if (wanted(r)) keep(r);
      if (e.seq >= end) {
        live = true;
        yield* history();
        o.onLive?.();
      }
    } else if (wanted(r)) yield r;
  }
  if (!live) {
    yield* history();
    o.onLive?.();
  }
}

/** The latest calls of each tool, by name (what `<name>.d/log` and `status` show). */
export class CallBook {
  private readonly rows = new Map<string, CallRow[]>();
  constructor(readonly perTool: number) {}
  add(r: CallRow): void {
    const list = this.rows.get(r.name) ?? [];
    list.push(r);
    if (list.length > this.perTool) list.shift();
    this.rows.set(r.name, list);
  }
  of(name: string): readonly CallRow[] {
    return this.rows.get(name) ?? [];
  }
}

/** The calls in `src` of every tool (the history: no follow). */
export async function callBook(src: LogSource, perTool: number): Promise<CallBook> {
  const book = new CallBook(perTool);
  for await (const r of readCalls(src, { perTool })) book.add(r);
  return book;
}
