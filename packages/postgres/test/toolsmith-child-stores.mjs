// How a child process of the toolsmith store suites opens the Postgres stores of gaps-pg.test.ts
// and proposals-pg.test.ts: the built package (tests run after `pnpm --filter @forge/postgres build`).
// The pool is the child's own; it ends when the child exits.
import pg from 'pg';
import { postgresGapStore, postgresProposalStore } from '../dist/index.js';

function pool(url) {
  const p = new pg.Pool({ connectionString: url, max: 4 });
  p.on('error', () => {});
  return p;
}

/** The gap store of `project` in the database at `url`, with the suite's `options` ({maxRecords}). */
export function openPgGapStore(url, project, options = {}) {
  return postgresGapStore(pool(url), { project, ...options });
}

/** The proposal store of `project` in the database at `url`. */
export function openPgProposalStore(url, project) {
  return postgresProposalStore(pool(url), { project });
}
