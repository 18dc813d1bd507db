import { describeProposalStore } from '@forge/conformance/proposals';
import { postgresProposalStore } from '../src/proposals.js';
import { usePostgres } from './helpers.js';
import { childOf, PROJECT, TOOLSMITH_OPENER, toolsmithDatabase } from './toolsmith-harness.js';

const pg = usePostgres();

// The Postgres proposal store over a fresh database per test.
describeProposalStore('postgres (postgresProposalStore)', async () => {
  const db = await toolsmithDatabase(pg.server());
  // The child's sessions are named, so the suite can see them end once it is killed.
  const child = childOf(db, 'forge-proposals-child');
  return {
    open: async (options = {}) => postgresProposalStore(db.pool, { project: PROJECT, ...options }),
    child: { module: TOOLSMITH_OPENER, export: 'openPgProposalStore', args: [child.url, PROJECT] },
    settled: child.settled,
    // Half the JSON text, as a torn write would leave it.
    corrupt: async (id) => {
      const r = await db.pool.query(
        'UPDATE forge_toolsmith_proposals SET proposal = left(proposal, length(proposal) / 2) WHERE project = $1 AND id = $2',
        [PROJECT, id],
      );
      if (r.rowCount !== 1) throw new Error(`no proposal ${id} to corrupt`);
    },
    cleanup: () => db.cleanup(),
  };
});
