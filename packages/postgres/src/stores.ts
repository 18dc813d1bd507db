import { createHash } from 'node:crypto';
import type { AuditLog, KeyInput } from '@forge/audit-chain';
import type { JobQueue, PresenceStore } from '@forge/queue';
import type { Scope, ToolStore } from '@forge/registry';
import type { GapStore, ProposalStore } from '@forge/toolsmith';
import type pg from 'pg';
import { openPostgresAuditLog } from './audit.js';
import { type PostgresCacheStore, postgresCacheStore } from './cache.js';
import { describeError, PostgresStoreError } from './errors.js';
import { postgresGapStore } from './gaps.js';
import { migrate, migrationStatus } from './migrate.js';
import { checkConnection, poolFor } from './pool.js';
import { postgresPresence } from './presence.js';
import { postgresProposalStore } from './proposals.js';
import { openPostgresQueue } from './queue.js';
import { postgresToolStore } from './registry.js';
import { stopWatching } from './registry-watch.js';
import { type PostgresRunStore, postgresRunStore } from './runs.js';
import { redactUrl } from './url.js';

/** Everything forge keeps, in one PostgreSQL database: what front-ends and workers on many hosts share. */
export interface PostgresStores {
  /** The database, for messages: the connection string without its password. */
  readonly where: string;
  readonly pool: pg.Pool;
  readonly audit: AuditLog;
  readonly queue: JobQueue;
  readonly presence: PresenceStore;
  /** The result cache every front-end shares (for `createForge({ cacheStore })`). */
  readonly cacheStore: PostgresCacheStore;
  /** Run manifests, hit records and artifacts, this host's runs named as its (for `createForge({ runStore })`). */
  readonly runStore: PostgresRunStore;
  /** The toolsmith's gaps and proposals (for `createToolsmith({ gapStore, proposalStore })`). */
  readonly gapStore: GapStore;
  readonly proposalStore: ProposalStore;
  /** The store of a scope's tools (for `createForge({ toolStores })`); session and task scopes per id. */
  toolStore(scope: Scope, ids?: { session?: string; task?: string }): ToolStore;
  /** What `forge doctor` checks: reachable, migrated, clock skew, queue depth. */
  check(): Promise<StoreCheck>;
  /** Closes the queue and the audit log, then ends the pool. */
  close(): Promise<void>;
}

/** The state of the database as `forge doctor` reports it. */
export interface StoreCheck {
  where: string;
  reachable: boolean;
  /** The server's version (`15.18`). */
  server?: string;
  /** Applied and known versions; `unknown` are versions of a newer forge (this one refuses them). */
  migrations?: { current: number; latest: number; pending: string[]; unknown: string[] };
  /** This host's clock minus the server's (ms): entries are stamped here, leases judged there. */
  clockSkewMs?: number;
  queue?: { pending: number; claimed: number; done: number; failed: number; oldestPendingMs?: number };
  problem?: string;
}

export interface OpenStoresOptions {
  /** Ed25519 key that signs the audit log's checkpoints. */
  signingKey?: KeyInput;
  /** Built-in tool names (forge's meta-tools): records under them are never loaded. */
  builtins?: Iterable<string>;
  /** Tells apart several projects sharing one database (the project and user scopes' id, the toolsmith's project; default none). */
  projectId?: string;
  /** Connections in the pool (default 10). */
  maxConnections?: number;
  /** How long a query waits for a free connection of the pool before it fails (ms, default 20000). */
  connectionWaitMs?: number;
  /** Lease and retries of the job queue. */
  queue?: { leaseMs?: number; maxAttempts?: number };
}

/**
 * Opens forge's stores in the database at `url`: connects (a clear, password-free error when it
 * cannot), applies the versioned migrations (refusing a database migrated by a newer forge),
 * then opens the audit log and the job queue over one pool. Tool stores are made on demand.
 */
export async function openPostgresStores(url: string, o: OpenStoresOptions = {}): Promise<PostgresStores> {
  const h = poolFor(url, o.maxConnections ?? 10, o.connectionWaitMs);
  const where = redactUrl(url);
  const opened: { close(): Promise<void> }[] = [];
  try {
    await checkConnection(h);
    await migrate(h.pool);
    // forge's tree checkpoints are signed under the name forge's tools know (runner AUDIT_KEY_NAME).
    const audit = await openPostgresAuditLog(h.pool, {
      migrate: false,
      tree: { keyName: 'forge-operator' },
      ...(o.signingKey ? { signingKey: o.signingKey } : {}),
    });
    opened.push(audit);
    // The queue installs its engine's schema (forge's migrations are applied already: a no-op there).
    const queue = await openPostgresQueue(h.pool, { ...o.queue, where: url });
    opened.push(queue);
    const builtins = [...(o.builtins ?? [])];
    const presence = postgresPresence(h.pool);
    const project = o.projectId ?? '';
    const gapStore = postgresGapStore(h.pool, { project, where: url });
    let closed = false;
    return {
      where,
      pool: h.pool,
      audit,
      queue,
      presence,
      cacheStore: postgresCacheStore(h.pool, { where: url }),
      runStore: postgresRunStore(h.pool, { where: url }),
      gapStore,
      proposalStore: postgresProposalStore(h.pool, { project, where: url }),
      toolStore(scope, ids = {}) {
        // A task's id is unique within its session only: the pair, hashed (no separator is safe in both).
        const scopeId =
          scope === 'session'
            ? ids.session
            : scope === 'task'
              ? `t-${createHash('sha256')
                  .update(`${ids.session ?? ''}\0${ids.task ?? ''}`)
                  .digest('hex')
                  .slice(0, 40)}`
              : o.projectId;
        return postgresToolStore(h.pool, { scope, ...(scopeId ? { scopeId } : {}), builtins, where });
      },
      check: () => checkStores(h.pool, where, queue),
      async close() {
        if (closed) return;
        closed = true;
        try {
          await gapStore.close();
          await queue.close();
          await audit.close();
        } finally {
          // Tool stores' watchers still open (a caller that did not close its registries) give
          // their connection back, or the pool would wait for it forever.
          stopWatching(h.pool);
          await h.pool.end();
        }
      },
    };
  } catch (err) {
    for (const s of opened.reverse()) await s.close().catch(() => {});
    await h.pool.end().catch(() => {});
    if (err instanceof PostgresStoreError) throw err;
    throw new PostgresStoreError('connect_failed', `cannot open forge's stores in ${where}: ${describeError(err, h.secrets)}`, {
      cause: err,
      secrets: h.secrets,
    });
  }
}

async function checkStores(pool: pg.Pool, where: string, queue: JobQueue): Promise<StoreCheck> {
  const out: StoreCheck = { where, reachable: false };
  try {
    const before = Date.now();
    const r = await pool.query<{ now: string; v: string }>(
      "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint::text AS now, current_setting('server_version') AS v",
    );
    const after = Date.now();
    out.reachable = true;
    out.server = r.rows[0]?.v ?? '';
    out.clockSkewMs = Math.round((before + after) / 2 - Number(r.rows[0]?.now));
    const m = await migrationStatus(pool);
    out.migrations = {
      current: m.current,
      latest: m.latest,
      pending: m.pending.map((p) => `${p.version} ${p.name}`),
      unknown: m.unknown.map((p) => `${p.version} ${p.name}`),
    };
    out.queue = await queue.stats();
  } catch (err) {
    out.problem = (err as Error).message;
  }
  return out;
}
