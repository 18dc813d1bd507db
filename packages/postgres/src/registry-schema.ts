import type { Migration } from './migration.js';

/**
 * The registry's tables (migration versions 10–19 belong to the registry) and the names the tool
 * store shares with them.
 */

/** The table of tool records: every version of every name of every scope, one row each. */
export const TOOLS_TABLE = 'forge_tools';

/** The LISTEN/NOTIFY channel writers notify after each commit (see `postgresToolStore`). */
export const TOOLS_CHANNEL = 'forge_tools';

/**
 * The registry's migrations, for the package's migration list `MIGRATIONS` (versions 10–19 are
 * the registry's; `migrate` applies them in version order with the others). A released migration is never edited: a change is a new one.
 *
 * Version 10: `forge_tools`, one row per stored version of a tool. `tool` is the stored tool's
 * JSON text exactly as written; `live` marks the one live version of a name (at most one, by a
 * partial unique index), the others are its history (replaced or removed). `lock_key` is the
 * registry's `wireLockKey(name)` computed by the server (generated, so no writer can get it
 * wrong): every name that could collide with another shares it, so collisions are one indexed
 * look-up. `changed_xid` is the transaction that last wrote the row (insert, or the update that
 * took it out of the live set): watchers sweep by it for changes whose notification was lost.
 */
export const REGISTRY_MIGRATIONS: readonly Migration[] = [
  {
    version: 10,
    name: 'registry tools',
    sql: `
      CREATE TABLE forge_tools (
        scope text NOT NULL CHECK (scope IN ('task', 'session', 'project', 'user')),
        -- The session or task id ('' for the project and user scopes unless one is given).
        scope_id text NOT NULL DEFAULT '',
        -- Compared byte by byte whatever the database collation (names are ASCII; pages of loadAll are by name).
        name text COLLATE "C" NOT NULL,
        version integer NOT NULL CHECK (version >= 1),
        live boolean NOT NULL,
        -- The stored tool's JSON text, byte for byte as the store wrote it.
        tool text NOT NULL,
        lock_key text GENERATED ALWAYS AS (
          left(translate(replace(name, '.', '__'), 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'), 55)
        ) STORED,
        written_at timestamptz NOT NULL DEFAULT now(),
        changed_xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
        PRIMARY KEY (scope, scope_id, name, version)
      );
      CREATE UNIQUE INDEX forge_tools_one_live ON forge_tools (scope, scope_id, name) WHERE live;
      CREATE INDEX forge_tools_live_lock_key ON forge_tools (scope, scope_id, lock_key) WHERE live;
      CREATE INDEX forge_tools_changed ON forge_tools (scope, scope_id, changed_xid);
    `,
  },
];
