import type { Migration } from './migration.js';

/**
 * The toolsmith's tables (migration versions 40–49 belong to the toolsmith's gap and proposal
 * stores, `postgresGapStore` and `postgresProposalStore`).
 */

/** The table of gap observations (migration 40). */
export const GAPS_TABLE = 'forge_toolsmith_gaps';

/**
 * The toolsmith's migrations, for the package's migration list `MIGRATIONS` (versions 40–49 are
 * the toolsmith's). A released migration is never edited: a change is a new one.
 *
 * Version 40: `forge_toolsmith_gaps`, one row per gap observation of a project, `seq` in commit
 * order (writers of a project hold its advisory lock from their first insert to their commit),
 * `record` the sanitised record's JSON text exactly as the file store writes a line of
 * gaps.jsonl (without the line feed); `kind` and `signature` are copies of its fields for look-ups.
 *
 * Version 41: `forge_toolsmith_proposals`, one row per proposal (`proposal` its JSON text; `state`,
 * `name`, `created_at` copies for filtering; `row_version` counts its writes), and
 * `forge_toolsmith_claims`, the one-shot approval claims: one row per claimed proposal, so the
 * primary key makes a second claim impossible.
 */
export const TOOLSMITH_MIGRATIONS: readonly Migration[] = [
  {
    version: 40,
    name: 'toolsmith gaps',
    sql: `
      CREATE TABLE forge_toolsmith_gaps (
        project text COLLATE "C" NOT NULL,
        seq bigint GENERATED ALWAYS AS IDENTITY,
        kind text COLLATE "C" NOT NULL,
        signature text COLLATE "C" NOT NULL,
        record text NOT NULL,
        PRIMARY KEY (project, seq)
      );
      CREATE INDEX forge_toolsmith_gaps_key ON forge_toolsmith_gaps (project, kind, signature, seq);
    `,
  },
  {
    version: 41,
    name: 'toolsmith proposals',
    sql: `
      CREATE TABLE forge_toolsmith_proposals (
        project text COLLATE "C" NOT NULL,
        id text COLLATE "C" NOT NULL CHECK (id ~ '^p-[0-9a-f]{16}$'),
        name text COLLATE "C" NOT NULL,
        state text COLLATE "C" NOT NULL,
        created_at text COLLATE "C" NOT NULL,
        row_version integer NOT NULL DEFAULT 1,
        proposal text NOT NULL,
        PRIMARY KEY (project, id)
      );
      CREATE INDEX forge_toolsmith_proposals_name ON forge_toolsmith_proposals (project, name);
      CREATE TABLE forge_toolsmith_claims (
        project text COLLATE "C" NOT NULL,
        id text COLLATE "C" NOT NULL,
        claimed_by text NOT NULL,
        claimed_at text NOT NULL,
        PRIMARY KEY (project, id)
      );
    `,
  },
];
