import { AUDIT_TREE_MIGRATION } from './audit-tree.js';
import { CACHE_RUNS_MIGRATIONS } from './cache-runs-schema.js';
import type { Migration } from './migration.js';
import { PRESENCE_MIGRATIONS } from './presence.js';
import { QUEUE_MIGRATIONS } from './queue-schema.js';
import { REGISTRY_MIGRATIONS } from './registry-schema.js';
import { TOOLSMITH_MIGRATIONS } from './toolsmith-schema.js';

export type { Migration } from './migration.js';

/** The audit log's migrations (versions 1–9). */
export const AUDIT_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'audit log',
    sql: `
      -- The audit log's head: the one row that appends lock (FOR UPDATE) to serialise.
      CREATE TABLE forge_audit_head (
        id integer PRIMARY KEY CHECK (id = 1),
        seq bigint NOT NULL,
        hash text NOT NULL,
        bytes bigint NOT NULL
      );
      INSERT INTO forge_audit_head (id, seq, hash, bytes) VALUES (1, 0, repeat('0', 64), 0);

      -- One row per entry; line is the exact entry line of the audit-chain format (with its
      -- line feed), the other columns are copies of its fields for queries.
      CREATE TABLE forge_audit_entries (
        seq bigint PRIMARY KEY,
        ts timestamptz NOT NULL,
        type text NOT NULL,
        hash text NOT NULL,
        end_offset bigint NOT NULL,
        line text NOT NULL
      );

      -- Checkpoint records, each with its exact line of the format's checkpoint file.
      CREATE TABLE forge_audit_checkpoints (
        id bigserial PRIMARY KEY,
        entries bigint NOT NULL,
        head text NOT NULL,
        "offset" bigint NOT NULL,
        time timestamptz NOT NULL,
        key_id text,
        line text NOT NULL
      );

      -- Entries and checkpoints are append-only: an UPDATE, DELETE or TRUNCATE is refused (a
      -- superuser can still disable this, which is what verification is for).
      CREATE FUNCTION forge_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        RAISE EXCEPTION 'the forge audit log is append-only: % on % refused', TG_OP, TG_TABLE_NAME;
      END $$;
      CREATE TRIGGER forge_audit_entries_append_only BEFORE UPDATE OR DELETE ON forge_audit_entries
        FOR EACH ROW EXECUTE FUNCTION forge_audit_append_only();
      CREATE TRIGGER forge_audit_entries_no_truncate BEFORE TRUNCATE ON forge_audit_entries
        FOR EACH STATEMENT EXECUTE FUNCTION forge_audit_append_only();
      CREATE TRIGGER forge_audit_checkpoints_append_only BEFORE UPDATE OR DELETE ON forge_audit_checkpoints
        FOR EACH ROW EXECUTE FUNCTION forge_audit_append_only();
      CREATE TRIGGER forge_audit_checkpoints_no_truncate BEFORE TRUNCATE ON forge_audit_checkpoints
        FOR EACH STATEMENT EXECUTE FUNCTION forge_audit_append_only();
    `,
  },
  AUDIT_TREE_MIGRATION,
];

/**
 * Every migration this version of the package knows, in version order: the audit log's (1–9), the
 * registry's (10–19), the job queue's (20–29), the result cache's and run records' (30–39) and the deployment's (50–59: presence). Every store opens the database with this whole
 * list, so that no store mistakes another's migration for one of a newer forge. A released
 * migration is never edited: a change is a new migration.
 */
export const MIGRATIONS: readonly Migration[] = [
  ...AUDIT_MIGRATIONS,
  ...REGISTRY_MIGRATIONS,
  ...QUEUE_MIGRATIONS,
  ...CACHE_RUNS_MIGRATIONS,
  ...TOOLSMITH_MIGRATIONS,
  ...PRESENCE_MIGRATIONS,
].sort((a, b) => a.version - b.version);
