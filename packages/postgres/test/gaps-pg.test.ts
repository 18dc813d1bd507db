import { describeGapStore } from '@forge/conformance/gaps';
import { postgresGapStore } from '../src/gaps.js';
import { usePostgres } from './helpers.js';
import { childOf, PROJECT, TOOLSMITH_OPENER, toolsmithDatabase } from './toolsmith-harness.js';

const pg = usePostgres();

// The Postgres gap store over a fresh database per test; another project's records share the table.
describeGapStore('postgres (postgresGapStore)', async () => {
  const db = await toolsmithDatabase(pg.server());
  const neighbour = postgresGapStore(db.pool, { project: 'neighbour' });
  await neighbour.record({ kind: 'missing_tool', signature: 'w0', source: 'forge_request', persona: 'p', session: 'n-0', at: 1 });
  // The child's sessions are named, so the suite can see them end once it is killed.
  const child = childOf(db, 'forge-gaps-child');
  return {
    open: async (options = {}) => postgresGapStore(db.pool, { project: PROJECT, ...options }),
    child: { module: TOOLSMITH_OPENER, export: 'openPgGapStore', args: [child.url, PROJECT] },
    settled: child.settled,
    // A row that is not JSON, one that is not a record, and a record cut in half.
    corrupt: async () => {
      await db.pool.query(
        `INSERT INTO forge_toolsmith_gaps (project, kind, signature, record) VALUES
           ($1, 'missing_tool', 'x', 'not json'), ($1, 'missing_tool', 'x', '{"kind":"missing_tool"}'),
           ($1, 'missing_tool', 'x', '{"kind":"missing_tool","signa')`,
        [PROJECT],
      );
    },
    cleanup: () => db.cleanup(),
  };
});
