import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { JobQueue, PresenceStore } from '@forge/queue';
import type { ForgeOptions } from '@forge/runner';
import { EnvironmentError, UsageError } from './args.js';
import type { Where } from './where.js';

/**
 * Where forge keeps what it keeps, for one command: files under the home and the project (the
 * default: one host, no server), or one PostgreSQL database (`--store postgres://…` or
 * `FORGE_STORE`) that front-ends and workers on many hosts share.
 */
export interface Store {
  kind: 'files' | 'postgres';
  /** A directory, or the connection string without its password. */
  where: string;
  /** The job queue (the file queue under `<project>/.forge/queue`, or the database's), opened on first use. */
  queue(): Promise<JobQueue>;
  presence(): Promise<PresenceStore>;
  /** The last entry of the audit log (seq 0 when empty), read without writing anything. */
  auditHead(): Promise<{ where: string; seq: number; hash: string }>;
  /** What the engine is given for this store (a database's audit log, tool stores, cache and run records). */
  forgeOptions(builtins: readonly string[]): Partial<ForgeOptions>;
  /** The toolsmith's stores of a database (undefined: its files under the project). */
  toolsmithStores?(): { gapStore: import('@forge/toolsmith').GapStore; proposalStore: import('@forge/toolsmith').ProposalStore };
  /** The database's state for `forge doctor` (undefined for files: doctor checks those itself). */
  check?(): Promise<import('@forge/postgres').StoreCheck>;
  /** Verifies the database's audit log inside it. */
  verifyAudit?(): Promise<import('@forge/postgres').PostgresVerifyResult>;
  /** The database's audit tree (tiles and tree checkpoints), served as the file log's tiles are. */
  auditTree?(): import('@forge/mcp').AuditTreeSource;
  /** Exports the database's audit log to a file `verifyLog` accepts byte for byte. */
  exportAudit?(path: string): Promise<{ entries: number; checkpoints: number; bytes: number }>;
  close(): Promise<void>;
}

/** The store URL of this invocation (`--store`, else `FORGE_STORE`), checked; undefined for files. */
export function storeUrl(env: NodeJS.ProcessEnv): string | undefined {
  const v = env.FORGE_STORE;
  if (v === undefined || v === '' || v === 'files') return undefined;
  if (!/^postgres(ql)?:\/\//.test(v)) {
    const shown = v.replace(/\/\/([^:@/]*):[^@/]*@/, '//$1:***@');
    throw new UsageError(`--store (FORGE_STORE) must be a postgres:// connection string, or "files" (got "${shown}")`);
  }
  return v;
}

/** Opens the store this invocation names; one that cannot be opened is an environment error naming it. */
export async function openStore(w: Where): Promise<Store> {
  const url = storeUrl(w.env);
  return url ? openDatabase(w, url) : fileStore(w);
}

function fileStore(w: Where): Store {
  const queueDir = join(w.project, '.forge', 'queue');
  let queue: Promise<JobQueue> | undefined;
  return {
    kind: 'files',
    where: join(w.project, '.forge'),
    queue() {
      queue ??= (async () => {
        const { openFileQueue } = await import('@forge/queue');
        try {
          return await openFileQueue(queueDir);
        } catch (err) {
          throw new EnvironmentError(`cannot open the job queue at ${queueDir}: ${(err as Error).message}`);
        }
      })();
      return queue;
    },
    async presence() {
      const { filePresence } = await import('@forge/queue');
      return filePresence(join(w.project, '.forge', 'presence'));
    },
    async auditHead() {
      const log = join(w.home, 'audit', 'forge.log');
      if (!existsSync(log)) return { where: log, seq: 0, hash: '' };
      const { tailLog } = await import('@forge/audit-chain');
      let last = { seq: 0, hash: '' };
      for await (const e of tailLog(log, { last: 1 })) last = { seq: e.seq, hash: e.hash };
      return { where: log, ...last };
    },
    forgeOptions: () => ({}),
    async close() {
      if (queue) await (await queue.catch(() => undefined))?.close();
    },
  };
}

async function openDatabase(w: Where, url: string): Promise<Store> {
  const pgs = await import('@forge/postgres');
  let stores: Awaited<ReturnType<typeof pgs.openPostgresStores>>;
  try {
    const { META_TOOLS, readAuditKey } = await import('@forge/runner');
    // The same checks as the engine's own (a regular file, never a link, mode 0600).
    const key = readAuditKey(w.env.FORGE_AUDIT_KEY, 'FORGE_AUDIT_KEY');
    stores = await pgs.openPostgresStores(url, { builtins: META_TOOLS, ...(key ? { signingKey: key } : {}) });
  } catch (err) {
    throw new EnvironmentError(
      `${pgs.redactText((err as Error).message)}; check --store (FORGE_STORE) and that the server is up (forge doctor)`,
    );
  }
  return {
    kind: 'postgres',
    where: stores.where,
    queue: async () => stores.queue,
    presence: async () => stores.presence,
    auditHead: async () => ({ where: stores.where, ...(await stores.audit.head()) }),
    forgeOptions: () => ({
      audit: stores.audit,
      toolStores: (scope, ids) => stores.toolStore(scope, ids),
      cacheStore: stores.cacheStore,
      runStore: stores.runStore,
    }),
    toolsmithStores: () => ({ gapStore: stores.gapStore, proposalStore: stores.proposalStore }),
    check: () => stores.check(),
    verifyAudit: () => pgs.verifyPostgresAuditLog(stores.pool),
    auditTree: () => pgs.postgresTiles(stores.pool),
    exportAudit: async (path) => {
      const r = await pgs.exportAuditLog(stores.pool, path);
      return { entries: r.entries, checkpoints: r.checkpoints, bytes: r.bytes };
    },
    close: () => stores.close(),
  };
}
