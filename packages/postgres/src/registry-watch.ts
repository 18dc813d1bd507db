import type { Scope, StoreWatcher, StoreWatchOptions } from '@forge/registry';
import type pg from 'pg';
import { TOOLS_CHANNEL } from './registry-schema.js';

/** What a watcher of one scope needs from its store. */
export interface WatchContext {
  pool: pg.Pool;
  scope: Scope;
  scopeId: string;
  where: string;
  /** How often to sweep for changes whose notification was lost (ms). */
  sweepMs: number;
  /** The store's error for a database that cannot be used. */
  unusable(what: string, err: unknown): Error;
}

const UNDEFINED_TABLE = '42P01';
const RECONNECT_MIN_MS = 100;
const RECONNECT_MAX_MS = 5000;

/** One watcher as its pool's hub sees it. */
interface Watch {
  scope: Scope;
  scopeId: string;
  sweepMs: number;
  /** Transactions from this xid on may have committed after the last sweep looked (undefined: not started). */
  cursor: bigint | undefined;
  /** Names of the scope that changed. */
  add(names: Iterable<string>): void;
  /** A problem, worded by the watcher's store (`what` says what was being done). */
  problem(what: string, err: unknown): void;
}

/**
 * The watchers of one pool: one connection listening on `forge_tools` for all of them, and one
 * sweep for all of them. The connection budget of watching is one per pool, however many scopes
 * (sessions, tasks) are watched; it is taken with the first watcher and given back with the
 * last. After a lost connection every watcher that was listening is told every name its scope
 * holds or has held.
 */
class ToolsHub {
  private readonly watches = new Set<Watch>();
  private client: pg.PoolClient | undefined;
  private connecting: Promise<void> | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private sweepTimer: NodeJS.Timeout | undefined;
  private sweeping: Promise<void> | undefined;
  private backoff = RECONNECT_MIN_MS;
  /** Watchers that were listening when the connection was lost: owed every name once it is back. */
  private readonly gap = new Set<Watch>();
  private dispose: (() => void) | undefined;

  constructor(private readonly pool: pg.Pool) {}

  /** Adds `w` and resolves once it listens and its cursor is set; rejects when the connection cannot be made. */
  async add(w: Watch): Promise<void> {
    this.watches.add(w);
    try {
      await this.ensure();
      w.cursor = await this.xmin();
    } catch (err) {
      this.remove(w);
      throw err;
    }
    this.armSweep();
  }

  /** Takes `w` out; the last one out gives the connection back. */
  remove(w: Watch): void {
    this.watches.delete(w);
    this.gap.delete(w);
    if (this.watches.size > 0) return;
    for (const t of [this.reconnectTimer, this.sweepTimer]) if (t) clearTimeout(t);
    this.reconnectTimer = this.sweepTimer = undefined;
    this.dispose?.();
  }

  /** Lets every watcher go and gives the connection back (the pool is about to end). */
  shutdown(): void {
    for (const w of [...this.watches]) this.remove(w);
  }

  /** Waits for a sweep in progress (a closing watcher then knows none reports to it later). */
  async settled(): Promise<void> {
    await this.sweeping;
  }

  private ensure(): Promise<void> {
    if (this.client) return Promise.resolve();
    this.connecting ??= this.connect().finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }

  /** Takes a connection and listens on it; then the watchers owed a gap are told every name. */
  private async connect(): Promise<void> {
    const c = await this.pool.connect();
    let done = false;
    const end = (err?: unknown): boolean => {
      if (done) return false;
      done = true;
      c.off('notification', this.onNotification);
      if (this.client === c) this.client = undefined;
      if (this.dispose === dispose) this.dispose = undefined;
      // Destroyed, not returned to the pool: a pooled connection must not keep listening.
      c.release(err instanceof Error ? err : new Error('the watchers let go of this connection'));
      return true;
    };
    const dispose = () => end();
    const onLost = (err?: unknown) => {
      if (!end(err) || this.watches.size === 0) return;
      for (const w of this.watches) {
        this.gap.add(w);
        w.problem('watching the tools (reconnecting)', err ?? new Error('the connection ended'));
      }
      this.scheduleReconnect();
    };
    c.on('error', onLost);
    c.on('end', () => onLost());
    c.on('notification', this.onNotification);
    try {
      await c.query(`LISTEN ${TOOLS_CHANNEL}`);
    } catch (err) {
      onLost(err);
      throw err;
    }
    if (this.watches.size === 0) {
      end();
      return;
    }
    this.client = c;
    this.dispose = dispose;
    this.backoff = RECONNECT_MIN_MS;
    if (this.gap.size > 0) void this.fillGap();
  }

  private scheduleReconnect(): void {
    if (this.reconnectTimer || this.watches.size === 0) return;
    const wait = this.backoff;
    this.backoff = Math.min(this.backoff * 2, RECONNECT_MAX_MS);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      if (this.client || this.watches.size === 0) return;
      this.ensure().catch((err) => {
        // onLost has reported it and scheduled the next try; a connect that failed before its
        // client existed must do both here.
        if (this.client || this.reconnectTimer || this.watches.size === 0) return;
        for (const w of this.watches) {
          this.gap.add(w);
          w.problem('watching the tools (reconnecting)', err);
        }
        this.scheduleReconnect();
      });
    }, wait);
    this.reconnectTimer.unref?.();
  }

  /** Every name each watcher owed a gap holds or has held, and its cursor moved (one snapshot each). */
  private async fillGap(): Promise<void> {
    for (const w of [...this.gap]) {
      this.gap.delete(w);
      if (!this.watches.has(w)) continue;
      try {
        const r = await this.pool.query<{ xmin: string; names: string[] }>(
          `SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin,
                  array(SELECT DISTINCT name FROM forge_tools WHERE scope = $1 AND scope_id = $2) AS names`,
          [w.scope, w.scopeId],
        );
        const row = r.rows[0];
        if (!row) continue;
        w.cursor = BigInt(row.xmin);
        w.add(row.names);
      } catch (err) {
        if ((err as { code?: unknown }).code === UNDEFINED_TABLE) {
          w.cursor = 1n;
          continue;
        }
        // Still owed: the next sweep on a working connection, or the next reconnect, tries again.
        this.gap.add(w);
        w.problem('reading the tools after a lost connection', err);
      }
    }
  }

  /** The snapshot's xmin: a transaction from it on may not have been visible to this look. */
  private async xmin(): Promise<bigint> {
    const r = await this.pool.query<{ xmin: string }>('SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin');
    return BigInt(r.rows[0]?.xmin ?? '1');
  }

  private readonly onNotification = (msg: pg.Notification): void => {
    if (msg.channel !== TOOLS_CHANNEL || !msg.payload) return;
    let note: { scope?: unknown; id?: unknown; names?: unknown };
    try {
      note = JSON.parse(msg.payload);
    } catch {
      return; // not one of ours
    }
    if (!Array.isArray(note.names)) return;
    for (const w of this.watches) if (note.scope === w.scope && note.id === w.scopeId) w.add(note.names as string[]);
  };

  private armSweep(): void {
    if (this.sweepTimer || this.sweeping || this.watches.size === 0) return;
    const every = Math.min(...[...this.watches].map((w) => w.sweepMs));
    this.sweepTimer = setTimeout(() => this.tick(), every);
    this.sweepTimer.unref?.();
  }

  private tick(): void {
    this.sweepTimer = undefined;
    if (this.watches.size === 0) return;
    this.sweeping = this.sweep()
      .catch((err) => {
        // Without a connection the reconnect reports everything; a failure on a working one is told.
        if (this.client) for (const w of this.watches) w.problem('sweeping the tools for changes', err);
      })
      .finally(() => {
        this.sweeping = undefined;
        this.armSweep();
      });
  }

  /**
   * One statement, one snapshot, for every watcher: the names written by transactions from the
   * oldest cursor on, each handed to the watchers whose scope it is and whose cursor it reaches;
   * every cursor then moves to the snapshot's xmin.
   */
  private async sweep(): Promise<void> {
    if (!this.client) return;
    if (this.gap.size > 0) await this.fillGap();
    const started = [...this.watches].filter((w) => w.cursor !== undefined);
    if (started.length === 0) return;
    const from = started.reduce((m, w) => ((w.cursor as bigint) < m ? (w.cursor as bigint) : m), started[0]?.cursor as bigint);
    let row: { xmin: string; rows: [string, string, string, string][] } | undefined;
    try {
      const r = await this.pool.query<{ xmin: string; rows: [string, string, string, string][] }>(
        `SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin,
                (SELECT coalesce(json_agg(json_build_array(scope, scope_id, name, changed_xid::text)), '[]'::json)
                 FROM (SELECT DISTINCT scope, scope_id, name, changed_xid FROM forge_tools WHERE changed_xid >= $1::xid8) t) AS rows`,
        [from.toString()],
      );
      row = r.rows[0];
    } catch (err) {
      if ((err as { code?: unknown }).code === UNDEFINED_TABLE) {
        // Not migrated yet: nothing to report, and every name is new once it is.
        for (const w of started) w.cursor = 1n;
        return;
      }
      throw err;
    }
    if (!row) return;
    const xmin = BigInt(row.xmin);
    for (const w of started) {
      if (!this.watches.has(w)) continue;
      const cursor = w.cursor as bigint;
      const names = row.rows.filter(([s, id, , xid]) => s === w.scope && id === w.scopeId && BigInt(xid) >= cursor).map((r) => r[2]);
      w.cursor = xmin;
      if (names.length > 0) w.add(names);
    }
  }
}

const hubs = new WeakMap<pg.Pool, ToolsHub>();

function hubOf(pool: pg.Pool): ToolsHub {
  let h = hubs.get(pool);
  if (!h) {
    h = new ToolsHub(pool);
    hubs.set(pool, h);
  }
  return h;
}

/**
 * Ends the watching of every tool store on `pool` and gives its listening connection back:
 * for the owner of the pool, right before it ends it (a watcher left open would keep one
 * connection out, and `pool.end()` waiting for it).
 */
export function stopWatching(pool: pg.Pool): void {
  hubs.get(pool)?.shutdown();
}

/**
 * Reports the names of one scope that change, from three sources: the NOTIFY every writer sends
 * on `forge_tools` after its commit (payload `{scope, id, names}`, received on the one connection
 * of `pool` that every watcher of the pool shares), a sweep every `sweepMs` of the rows written by
 * transactions that were not yet finished at the previous sweep (by `changed_xid` against the
 * snapshot's xmin: a writer killed between its commit and its NOTIFY is not missed), and after a
 * lost connection every name the scope holds or has held. Batches are debounced (`debounceMs`, at
 * most `maxWaitMs`), sorted and deduplicated. Resolves once listening (a change committed after
 * that is reported); rejects with `root_unusable` when the first connection fails. Problems after
 * that go to `onError`, and the pool's listener reconnects with a backoff while any watcher is open.
 */
export async function watchTools(
  ctx: WatchContext,
  onChange: (names: string[]) => void,
  options: StoreWatchOptions,
): Promise<StoreWatcher> {
  const debounceMs = options.debounceMs ?? 50;
  const maxWaitMs = options.maxWaitMs ?? 500;
  const onError = options.onError ?? (() => {});
  const pending = new Set<string>();
  let firstPending = 0;
  let flushTimer: NodeJS.Timeout | undefined;
  let closed = false;

  const flush = () => {
    flushTimer = undefined;
    if (closed || pending.size === 0) return;
    const names = [...pending].sort();
    pending.clear();
    try {
      onChange(names);
    } catch (err) {
      report(err);
    }
  };
  const report = (err: unknown) => {
    try {
      onError(err);
    } catch {
      // onError itself failed: nothing more to tell
    }
  };

  const watch: Watch = {
    scope: ctx.scope,
    scopeId: ctx.scopeId,
    sweepMs: ctx.sweepMs,
    cursor: undefined,
    add(names) {
      if (closed) return;
      const had = pending.size;
      for (const n of names) if (typeof n === 'string') pending.add(n);
      if (pending.size === had && flushTimer) return;
      if (pending.size === 0) return;
      const now = Date.now();
      if (had === 0 || !flushTimer) firstPending = now;
      if (flushTimer) clearTimeout(flushTimer);
      flushTimer = setTimeout(flush, Math.max(0, Math.min(debounceMs, firstPending + maxWaitMs - now)));
    },
    problem(what, err) {
      if (!closed) report(ctx.unusable(what, err));
    },
  };
  const hub = hubOf(ctx.pool);
  try {
    await hub.add(watch);
  } catch (err) {
    closed = true;
    throw ctx.unusable('starting to watch the tools', err);
  }

  let closing: Promise<void> | undefined;
  return {
    close() {
      closing ??= (async () => {
        closed = true;
        if (flushTimer) clearTimeout(flushTimer);
        pending.clear();
        hub.remove(watch);
        await hub.settled();
      })();
      return closing;
    },
  };
}
