import { createHash } from 'node:crypto';
import {
  type Collisions,
  type Decide,
  type ReadResult,
  RegistryError,
  SCOPES,
  type Scope,
  type StoredTool,
  scopeIdProblem,
  type ToolStore,
  type ToolVersion,
  toolNameProblem,
  wireKey,
  wireLockKey,
} from '@forge/registry';
import type pg from 'pg';
import { parseRow, poolLocator, sameWire, type ToolRow } from './registry-record.js';
import { TOOLS_CHANNEL } from './registry-schema.js';
import { watchTools } from './registry-watch.js';
import { redactText, redactUrl } from './url.js';

export { REGISTRY_MIGRATIONS, TOOLS_CHANNEL, TOOLS_TABLE } from './registry-schema.js';

/** Options of {@link postgresToolStore}. */
export interface PostgresToolStoreOptions {
  /** The scope whose tools this store keeps. */
  scope: Scope;
  /**
   * Which session or task (required for those scopes; the file store's directory per id). For
   * `project` and `user` it is optional and tells apart several projects or users sharing one
   * database. Any id `scopeIdProblem` accepts.
   */
  scopeId?: string;
  /** Built-in tool names: a record under one is `bad` (a store cannot shadow a built-in). */
  builtins?: Iterable<string>;
  /** Longest wait for a name's lock held by another live writer, then `lock_timeout` (default 20 000 ms). */
  lockTimeoutMs?: number;
  /**
   * How often a watcher also sweeps the table for changes whose notification never came (a writer
   * killed between its commit and its NOTIFY). Default 2000 ms.
   */
  sweepMs?: number;
  /** What `where` shows instead of the pool's connection (a URL: its password is masked anyway). */
  where?: string;
}

/** Errors of the server that mean the registry table is not there (the database is not migrated). */
const UNDEFINED_TABLE = '42P01';
/** The lock could not be taken within `lock_timeout`. */
const LOCK_NOT_AVAILABLE = '55P03';

const LIVE_ROW = 'SELECT name, version, tool FROM forge_tools WHERE scope = $1 AND scope_id = $2 AND name = $3 AND live';

/**
 * The PostgreSQL implementation of `ToolStore` (@forge/registry): the tools of one scope (and
 * scope id) in the table `forge_tools` (migration 10, {@link REGISTRY_MIGRATIONS}), one row per
 * version, the live one flagged. Keeps the whole contract:
 * - a put or remove is one transaction that first takes `pg_advisory_xact_lock` on a key derived
 *   from (scope, scope id, `wireLockKey(name)`), so every name that could collide is serialised
 *   across every process using the database; `decide` and its `collisions()` run inside it, on
 *   the transaction's own connection. A writer that dies loses its connection, and the server
 *   rolls back and releases the lock at once: the name is writable again immediately.
 * - version numbers are one more than the highest row of the name ever written (rows are never
 *   deleted: removed and replaced ones stay, `live = false`), so never reused.
 * - a row that does not hold a valid stored tool of its name and version is `bad`, never a throw.
 * - after each commit (never inside the transaction: a pending NOTIFY takes a global lock at
 *   commit) the writer sends `pg_notify('forge_tools', {scope, id, names})`; `watch` listens on a
 *   dedicated connection, sweeps for changes whose notification was lost, and after a reconnect
 *   reports every name the scope holds or has held.
 *
 * `pool` is the caller's and stays open (end it after the store's watchers are closed). The
 * database must be migrated; until it is, reads find nothing and writes throw `root_unusable`
 * saying so. Throws `invalid_option` for a bad scope or scope id. Touches the database only when
 * a method is called.
 */
export function postgresToolStore(pool: pg.Pool, options: PostgresToolStoreOptions): ToolStore {
  const { scope } = options;
  if (!SCOPES.includes(scope))
    throw new RegistryError('invalid_option', `scope ${JSON.stringify(scope)} is not one of ${SCOPES.join(', ')}`);
  const scopeId = options.scopeId ?? '';
  if (options.scopeId !== undefined) {
    const problem = scopeIdProblem(options.scopeId);
    if (problem) throw new RegistryError('invalid_option', `${scope} id ${JSON.stringify(options.scopeId)} ${problem}`);
  } else if (scope === 'session' || scope === 'task') {
    throw new RegistryError('invalid_option', `a postgres tool store of the ${scope} scope needs its ${scope} id: pass scopeId`);
  }
  const lockTimeoutMs = options.lockTimeoutMs ?? 20_000;
  if (!Number.isInteger(lockTimeoutMs) || lockTimeoutMs < 1)
    throw new RegistryError('invalid_option', `lockTimeoutMs must be a positive integer (got ${lockTimeoutMs})`);
  const base = options.where !== undefined ? redactUrl(options.where) : poolLocator(pool.options);
  const where = `${base}#${scope}${scopeId ? `/${encodeURIComponent(scopeId)}` : ''}`;
  const store = new PgToolStore(pool, scope, scopeId, where, new Set(options.builtins ?? []), lockTimeoutMs, options.sweepMs ?? 2000);
  return {
    scope,
    where,
    loadAll: (onTool, onFailure) => store.loadAll(onTool, onFailure),
    read: (name) => store.read(name),
    collisions: async (name) => store.collisionsOf(checked(name)),
    put: async (name, decide) => store.put(checked(name), decide),
    remove: async (name, check) => store.remove(checked(name), check),
    versions: async (name) => (toolNameProblem(name) ? [] : store.versions(name)),
    watch: (onChange, watchOptions = {}) =>
      watchTools(
        { pool, scope, scopeId, where, sweepMs: store.sweepMs, unusable: (what, err) => store.unusable(what, err) },
        onChange,
        watchOptions,
      ),
  };
}

function checked(name: string): string {
  const problem = toolNameProblem(name);
  if (problem) throw new RegistryError('invalid_option', `${JSON.stringify(name)} is not a tool name: it ${problem}`);
  return name;
}

/** The advisory lock key of one lock key of one scope: 64 bits of sha256, as a bigint string. */
function advisoryKey(scope: Scope, scopeId: string, lockKey: string): string {
  const digest = createHash('sha256').update(`forge_tools\0${scope}\0${scopeId}\0${lockKey}`).digest();
  return digest.readBigInt64BE(0).toString();
}

/** A write's outcome inside its transaction: what to return, and whether a row changed. */
interface Written<R> {
  value: R;
  changed: boolean;
}

/** Thrown inside a transaction to carry a caller's own error (decide, check) out unwrapped. */
class Passthrough {
  constructor(readonly error: unknown) {}
}

class PgToolStore {
  constructor(
    private readonly pool: pg.Pool,
    private readonly scope: Scope,
    private readonly scopeId: string,
    private readonly where: string,
    private readonly builtins: ReadonlySet<string>,
    private readonly lockTimeoutMs: number,
    readonly sweepMs: number,
  ) {}

  private pathOf(name: string, version?: number): string {
    return `${this.where}/${name}${version === undefined ? '' : `@${version}`}`;
  }

  /** A `RegistryError` for a database that cannot be used: what failed, where, and what to do. */
  unusable(what: string, err: unknown): RegistryError {
    const code = (err as { code?: unknown } | undefined)?.code;
    const detail = redactText(err instanceof Error ? err.message || String(code ?? err.name) : String(err));
    if (code === LOCK_NOT_AVAILABLE) {
      return new RegistryError(
        'lock_timeout',
        `${what} in ${this.where}: another process has held the name's lock for over ${this.lockTimeoutMs} ms; retry`,
        {
          cause: err,
        },
      );
    }
    const todo =
      code === UNDEFINED_TABLE
        ? 'the database is not migrated: run the @forge/postgres migrations (registry migration 10) on it'
        : 'check that the server runs, the connection string is right and this role may read and write forge_tools';
    return new RegistryError('root_unusable', `${what} in ${this.where} failed: ${detail}; ${todo}`, { cause: err });
  }

  /** Runs a read; a database without the table reads as empty (`empty`), like a directory not yet created. */
  private async query<T extends pg.QueryResultRow>(what: string, sql: string, params: unknown[], empty?: T[]): Promise<T[]> {
    try {
      return (await this.pool.query<T>(sql, params)).rows;
    } catch (err) {
      if (empty && (err as { code?: unknown }).code === UNDEFINED_TABLE) return empty;
      throw this.unusable(what, err);
    }
  }

  async loadAll(onTool: (tool: StoredTool) => void, onFailure: (f: { path: string; reason: string }) => void): Promise<void> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw this.unusable('loading the tools', err);
    }
    const ignore = () => {};
    client.on('error', ignore);
    let broken: unknown;
    try {
      // One snapshot for the whole load, read in pages so memory stays bounded.
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      let after = '';
      for (;;) {
        let rows: ToolRow[];
        try {
          rows = (
            await client.query<ToolRow>(
              `SELECT name, version, tool FROM forge_tools WHERE scope = $1 AND scope_id = $2 AND live AND name COLLATE "C" > $3 ORDER BY name COLLATE "C" LIMIT 500`,
              [this.scope, this.scopeId, after],
            )
          ).rows;
        } catch (err) {
          if ((err as { code?: unknown }).code === UNDEFINED_TABLE) return;
          throw err;
        }
        for (const row of rows) {
          if (toolNameProblem(row.name)) {
            onFailure({
              path: this.pathOf(row.name),
              reason: `record name ${JSON.stringify(row.name)} is not a tool name: it ${toolNameProblem(row.name)}`,
            });
            continue;
          }
          const r = parseRow(row, this.pathOf(row.name), this.scope, this.builtins);
          if (r.status === 'ok') onTool(r.tool);
          else if (r.status === 'bad') onFailure(r.failure);
        }
        if (rows.length < 500) break;
        after = (rows.at(-1) as ToolRow).name;
      }
    } catch (err) {
      broken = err;
      throw this.unusable('loading the tools', err);
    } finally {
      await client.query('ROLLBACK').catch((err: unknown) => (broken ??= err));
      client.off('error', ignore);
      client.release(broken instanceof Error ? broken : undefined);
    }
  }

  async read(name: string): Promise<ReadResult> {
    if (typeof name !== 'string' || name.length > 1024) return { status: 'missing' };
    const rows = await this.query<ToolRow>(`reading tool "${name}"`, LIVE_ROW, [this.scope, this.scopeId, name], []);
    const row = rows[0];
    if (!row) return { status: 'missing' };
    const problem = toolNameProblem(name);
    // A record put there by hand under a name outside the grammar: reported, never used.
    if (problem)
      return {
        status: 'bad',
        failure: { path: this.pathOf(name), reason: `record name ${JSON.stringify(name)} is not a tool name: it ${problem}` },
      };
    return parseRow(row, this.pathOf(name), this.scope, this.builtins);
  }

  /** The live names colliding with `name`, read through `q` (the pool, or a write's own client). */
  private async collisionsOn(q: pg.Pool | pg.PoolClient, name: string): Promise<Collisions> {
    const rows = (
      await q.query<{ name: string }>(
        `SELECT name FROM forge_tools WHERE scope = $1 AND scope_id = $2 AND live AND lock_key = $3 AND name <> $4`,
        [this.scope, this.scopeId, wireLockKey(name), name],
      )
    ).rows;
    const lower = name.toLowerCase();
    const key = wireKey(name);
    const cases: string[] = [];
    const wires: string[] = [];
    for (const { name: other } of rows) {
      if (other.toLowerCase() === lower) cases.push(other);
      else if (sameWire(other, key)) wires.push(other);
    }
    return { cases: cases.sort(), wires: wires.sort() };
  }

  async collisionsOf(name: string): Promise<Collisions> {
    try {
      return await this.collisionsOn(this.pool, name);
    } catch (err) {
      if ((err as { code?: unknown }).code === UNDEFINED_TABLE) return { cases: [], wires: [] };
      throw this.unusable(`reading the names colliding with "${name}"`, err);
    }
  }

  /**
   * Runs `fn` in a transaction holding the advisory lock of `name`'s lock key, then (after the
   * commit) notifies watchers when a row changed. A caller's own error (from `decide` or `check`)
   * rolls back and is rethrown as it is; a database error becomes `root_unusable`/`lock_timeout`.
   */
  private async locked<R>(name: string, what: string, fn: (c: pg.PoolClient) => Promise<Written<R>>): Promise<R> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw this.unusable(what, err);
    }
    const ignore = () => {};
    client.on('error', ignore);
    let broken: Error | undefined;
    let out: Written<R>;
    try {
      // One round trip: both values are integers this code made (no caller text in the SQL).
      const key = advisoryKey(this.scope, this.scopeId, wireLockKey(name));
      await client.query(`BEGIN; SET LOCAL lock_timeout = ${this.lockTimeoutMs}; SELECT pg_advisory_xact_lock(${key}::bigint)`);
      out = await fn(client);
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK').catch((e: unknown) => {
        broken = e instanceof Error ? e : new Error(String(e));
      });
      if (err instanceof Passthrough) throw err.error;
      if (err instanceof RegistryError) throw err;
      throw this.unusable(what, err);
    } finally {
      client.off('error', ignore);
      client.release(broken);
    }
    if (out.changed) await this.notify(name);
    return out.value;
  }

  /**
   * Tells watchers `name` changed. Best effort: a notification lost here (or by a writer killed
   * after its commit) is found by the watchers' sweep.
   */
  private async notify(name: string): Promise<void> {
    const payload = JSON.stringify({ scope: this.scope, id: this.scopeId, names: [name] });
    await this.pool.query('SELECT pg_notify($1, $2)', [TOOLS_CHANNEL, payload]).catch(() => {});
  }

  /** The live record of `name` and the next free version, read under the lock. */
  private async current(c: pg.PoolClient, name: string): Promise<{ current: ReadResult; next: number }> {
    const r = await c.query<ToolRow & { max: number }>(
      `SELECT m.max, t.name, t.version, t.tool
         FROM (SELECT coalesce(max(version), 0) AS max FROM forge_tools WHERE scope = $1 AND scope_id = $2 AND name = $3) m
         LEFT JOIN forge_tools t ON t.scope = $1 AND t.scope_id = $2 AND t.name = $3 AND t.live`,
      [this.scope, this.scopeId, name],
    );
    const row = r.rows[0] as ToolRow & { max: number };
    const current: ReadResult =
      row.tool === null || row.tool === undefined ? { status: 'missing' } : parseRow(row, this.pathOf(name), this.scope, this.builtins);
    return { current, next: row.max + 1 };
  }

  /** Takes the live row of `name` out of the live set: it stays as history. */
  private async retire(c: pg.PoolClient, name: string): Promise<void> {
    await c.query(
      'UPDATE forge_tools SET live = false, changed_xid = pg_current_xact_id() WHERE scope = $1 AND scope_id = $2 AND name = $3 AND live',
      [this.scope, this.scopeId, name],
    );
  }

  async put<R>(name: string, decide: Decide<R>): Promise<R> {
    return this.locked(name, `writing tool "${name}"`, async (c) => {
      const { current, next } = await this.current(c, name);
      let d: Awaited<ReturnType<Decide<R>>>;
      try {
        d = await decide(current, next, () => this.collisionsOn(c, name));
      } catch (err) {
        throw new Passthrough(err);
      }
      if (!d.write) return { value: d.value, changed: false };
      const tool = d.write;
      if (tool.name !== name || tool.version !== next) {
        throw new RegistryError(
          'invalid_option',
          `decide wrote ${JSON.stringify(tool.name)} version ${tool.version} into the put of "${name}" at version ${next}: a put writes its own name at nextVersion`,
        );
      }
      // Kept exactly as given; reads set `scope` to the store's.
      const text = JSON.stringify(tool);
      if (current.status !== 'missing') await this.retire(c, name);
      await c.query('INSERT INTO forge_tools (scope, scope_id, name, version, live, tool) VALUES ($1, $2, $3, $4, true, $5)', [
        this.scope,
        this.scopeId,
        name,
        next,
        text,
      ]);
      return { value: d.value, changed: true };
    });
  }

  async remove<F>(name: string, check?: (current: ReadResult) => F | undefined): Promise<ReadResult | { status: 'refused'; failure: F }> {
    return this.locked<ReadResult | { status: 'refused'; failure: F }>(name, `removing tool "${name}"`, async (c) => {
      const { current } = await this.current(c, name);
      if (current.status === 'missing') return { value: current, changed: false };
      let failure: F | undefined;
      try {
        failure = check?.(current);
      } catch (err) {
        throw new Passthrough(err);
      }
      if (failure !== undefined) return { value: { status: 'refused' as const, failure }, changed: false };
      await this.retire(c, name);
      return { value: current, changed: true };
    });
  }

  async versions(name: string): Promise<ToolVersion[]> {
    const rows = await this.query<ToolRow & { live: boolean }>(
      `reading the versions of "${name}"`,
      'SELECT name, version, tool, live FROM forge_tools WHERE scope = $1 AND scope_id = $2 AND name = $3 ORDER BY live, version',
      [this.scope, this.scopeId, name],
      [],
    );
    return rows.map((row) => {
      const path = this.pathOf(name, row.version);
      // History is read without the built-in rule: a kept version stays recoverable evidence.
      const r = parseRow(row, path, this.scope, row.live ? this.builtins : new Set());
      if (r.status === 'ok') return { version: row.version, current: row.live, path, tool: r.tool };
      return { version: row.version, current: row.live, path, reason: r.status === 'bad' ? r.failure.reason : 'missing' };
    });
  }
}
