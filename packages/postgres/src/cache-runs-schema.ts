import type { Migration } from './migration.js';

/** The result cache's table (migration 30). */
export const CACHE_TABLE = 'forge_cache';
/** The run records' tables (migration 31). */
export const RUNS_TABLE = 'forge_runs';
export const RUN_ARTIFACTS_TABLE = 'forge_run_artifacts';

/**
 * The result cache's and the run records' migrations (versions 30–39 of the package's list
 * `MIGRATIONS`). A released migration is never edited: a change is a new one.
 *
 * Version 30, `forge_cache`: one row per cache key; `entry` is the entry's JSON text exactly as
 * the file store's `<key>.json` holds it (`bytes` its length in UTF-8, what `maxBytes` counts),
 * `created_at` the writer's clock (ms), `used` a number from one sequence taken at every write and
 * every hit, so least recently used is smallest `used` whichever host's clock says what.
 *
 * Version 31, `forge_runs` and `forge_run_artifacts`: a row per run (`kind` run: its manifest;
 * hit: a cache hit's record), as JSON text exactly as written, with the host that wrote it and
 * where its artifacts directory was there; a row per artifact, in the order of the directory walk
 * (`ord`), with its bytes (`content`) when the writer copied them (`kept` = store), or none when
 * they stayed on the worker's disk (`kept` = worker; over the copy caps).
 */
export const CACHE_RUNS_MIGRATIONS: readonly Migration[] = [
  {
    version: 30,
    name: 'result cache',
    sql: `
      CREATE SEQUENCE forge_cache_use;
      CREATE TABLE forge_cache (
        key text COLLATE "C" PRIMARY KEY CHECK (key ~ '^[0-9a-f]{64}$'),
        entry text NOT NULL,
        bytes integer NOT NULL CHECK (bytes >= 0),
        created_at bigint NOT NULL,
        used bigint NOT NULL DEFAULT nextval('forge_cache_use')
      );
      CREATE INDEX forge_cache_used ON forge_cache (used);
    `,
  },
  {
    version: 31,
    name: 'run records',
    sql: `
      CREATE TABLE forge_runs (
        run_id text COLLATE "C" PRIMARY KEY,
        kind text NOT NULL CHECK (kind IN ('run', 'hit')),
        record text NOT NULL,
        host text NOT NULL,
        artifacts_dir text,
        written_at timestamptz NOT NULL DEFAULT now()
      );
      CREATE TABLE forge_run_artifacts (
        run_id text COLLATE "C" NOT NULL REFERENCES forge_runs (run_id) ON DELETE CASCADE,
        path text COLLATE "C" NOT NULL,
        ord integer NOT NULL,
        kind text NOT NULL CHECK (kind IN ('file', 'directory', 'symlink', 'other')),
        bytes bigint NOT NULL CHECK (bytes >= 0),
        sha256 text,
        mime_type text,
        kept text CHECK (kept IN ('store', 'worker')),
        content bytea,
        PRIMARY KEY (run_id, path)
      );
    `,
  },
];
