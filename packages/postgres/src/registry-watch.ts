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

/**
 * Reports the names of one scope that change, from three sources: the NOTIFY every writer sends
 * on `forge_tools` after its commit (payload `{scope, id, names}`, received on a dedicated
 * connection of `pool`), a sweep every `sweepMs` of the rows written by transactions that were
 * not yet finished at the previous sweep (by `changed_xid` against the snapshot's xmin: a writer
 * killed between its commit and its NOTIFY is not missed), and after a lost connection every
 * name the scope holds or has held. Batches are debounced (`debounceMs`, at most `maxWaitMs`),
 * sorted and deduplicated. Resolves once listening (a change committed after that is reported);
 * rejects with `root_unusable` when the first connection fails. Problems after that go to
 * `onError`, and the watcher reconnects with a backoff until closed.
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
  let sweepTimer: NodeJS.Timeout | undefined;
  let reconnectTimer: NodeJS.Timeout | undefined;
  let client: pg.PoolClient | undefined;
  let closed = false;
  let backoff = RECONNECT_MIN_MS;
  /** Transactions from this xid on may have committed after the last sweep looked. */
  let cursor: string | undefined;
  let sweeping: Promise<void> | undefined;

  const report = (err: unknown) => {
    try {
      onError(err);
    } catch {
      // onError itself failed: nothing more to tell
    }
  };

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

  const add = (names: Iterable<string>) => {
    if (closed) return;
    const had = pending.size;
    for (const n of names) if (typeof n === 'string') pending.add(n);
    if (pending.size === had && flushTimer) return;
    if (pending.size === 0) return;
    const now = Date.now();
    if (had === 0 || !flushTimer) firstPending = now;
    if (flushTimer) clearTimeout(flushTimer);
    flushTimer = setTimeout(flush, Math.max(0, Math.min(debounceMs, firstPending + maxWaitMs - now)));
  };

  const onNotification = (msg: pg.Notification) => {
    if (msg.channel !== TOOLS_CHANNEL || !msg.payload) return;
    let note: { scope?: unknown; id?: unknown; names?: unknown };
    try {
      note = JSON.parse(msg.payload);
    } catch {
      return; // not one of ours
    }
    if (note.scope !== ctx.scope || note.id !== ctx.scopeId || !Array.isArray(note.names)) return;
    add(note.names as string[]);
  };

  /** Names written since the cursor, and the cursor moved to the snapshot's xmin (one statement, one snapshot). */
  const sweep = async (c: pg.PoolClient | pg.Pool, all: boolean): Promise<void> => {
    try {
      const r = await c.query<{ xmin: string; names: string[] }>(
        `SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin,
                array(SELECT DISTINCT name FROM forge_tools WHERE scope = $1 AND scope_id = $2 AND ($3::xid8 IS NULL OR changed_xid >= $3::xid8)) AS names`,
        [ctx.scope, ctx.scopeId, all ? null : (cursor ?? null)],
      );
      const row = r.rows[0];
      if (!row) return;
      cursor = row.xmin;
      add(row.names);
    } catch (err) {
      if ((err as { code?: unknown }).code === UNDEFINED_TABLE) {
        // Not migrated yet: nothing to report, and every name is new once it is.
        cursor = '1';
        return;
      }
      throw err;
    }
  };

  /** Ends the current connection's listening for good (closed, or lost). */
  let dispose: (() => void) | undefined;
  let started = false;

  /** Takes a connection, listens, and moves the cursor (first time) or reports everything (after a gap). */
  const connect = async (afterGap: boolean): Promise<void> => {
    const c = await ctx.pool.connect();
    let done = false;
    const end = (err?: unknown): boolean => {
      if (done) return false;
      done = true;
      c.off('notification', onNotification);
      if (client === c) client = undefined;
      // Destroyed, not returned to the pool: a pooled connection must not keep listening.
      c.release(err instanceof Error ? err : new Error('the watcher let go of this connection'));
      return true;
    };
    const onLost = (err?: unknown) => {
      if (!end(err) || closed || !started) return;
      report(ctx.unusable('watching the tools (reconnecting)', err ?? new Error('the connection ended')));
      scheduleReconnect();
    };
    c.on('error', onLost);
    c.on('end', () => onLost());
    c.on('notification', onNotification);
    try {
      await c.query(`LISTEN ${TOOLS_CHANNEL}`);
      if (afterGap) await sweep(c, true);
      else {
        // Only the cursor: what was written before the watch started is not a change.
        const r = await c.query<{ xmin: string }>('SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin');
        cursor = r.rows[0]?.xmin;
      }
    } catch (err) {
      onLost(err);
      throw err;
    }
    if (closed) {
      end();
      return;
    }
    client = c;
    dispose = () => end();
    backoff = RECONNECT_MIN_MS;
  };

  const scheduleReconnect = () => {
    if (closed || reconnectTimer) return;
    const wait = backoff;
    backoff = Math.min(backoff * 2, RECONNECT_MAX_MS);
    reconnectTimer = setTimeout(() => {
      reconnectTimer = undefined;
      if (closed || client) return;
      connect(true).catch((err) => {
        // onLost has reported it and scheduled the next try (unless closed); a connect that
        // failed before its client existed must schedule it here.
        if (!closed && !client && !reconnectTimer) {
          report(ctx.unusable('watching the tools (reconnecting)', err));
          scheduleReconnect();
        }
      });
    }, wait);
    reconnectTimer.unref?.();
  };

  const tick = () => {
    sweepTimer = undefined;
    if (closed) return;
    const c = client;
    sweeping = (c ? sweep(c, false) : Promise.resolve())
      .catch((err) => {
        // A sweep that failed on a connection that is going away: the reconnect reports all.
        if (client === c) report(ctx.unusable('sweeping the tools for changes', err));
      })
      .finally(() => {
        sweeping = undefined;
        if (!closed) {
          sweepTimer = setTimeout(tick, ctx.sweepMs);
          sweepTimer.unref?.();
        }
      });
  };

  try {
    await connect(false);
  } catch (err) {
    closed = true;
    throw ctx.unusable('starting to watch the tools', err);
  }
  started = true;
  sweepTimer = setTimeout(tick, ctx.sweepMs);
  sweepTimer.unref?.();

  let closing: Promise<void> | undefined;
  return {
    close() {
      closing ??= (async () => {
        closed = true;
        for (const t of [flushTimer, sweepTimer, reconnectTimer]) if (t) clearTimeout(t);
        pending.clear();
        await sweeping;
        dispose?.();
      })();
      return closing;
    },
  };
}
