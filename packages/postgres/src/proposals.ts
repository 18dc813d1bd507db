import {
  applyTransition,
  checkTransition,
  filterProposals,
  isProposalId,
  lineageOf,
  MAX_PROPOSAL_FILE_BYTES,
  newProposal,
  newProposalId,
  type Proposal,
  type ProposalStore,
  proposalProblem,
  type UpdateResult,
  unknownProposal,
} from '@forge/toolsmith';
import type pg from 'pg';
import { poolLocator } from './registry-record.js';
import { redactText, redactUrl } from './url.js';

/** Options of {@link postgresProposalStore}. */
export interface PostgresProposalStoreOptions {
  /** Tells apart the projects sharing one database (default `''`): each is a store of its own. */
  project?: string;
  /** The clock for `created_at`, `updated_at` and history stamps. */
  now?: () => Date;
  /** Hears of every stored proposal that was skipped (where, and why). */
  onProblem?: (where: string, reason: string) => void;
  /** Longest wait for a proposal's row lock held by another transaction, then `lock_timeout` (default 30 000 ms). */
  lockWaitMs?: number;
  /** What messages call the database instead of the pool's connection (a URL: its password is masked anyway). */
  where?: string;
}

/** The server's word for a table that is not there: the database is not migrated. */
const UNDEFINED_TABLE = '42P01';
/** The row lock could not be taken within `lock_timeout`. */
const LOCK_NOT_AVAILABLE = '55P03';

/** Carries an error of the caller's own (`change` threw) out of the transaction unwrapped. */
class Passthrough {
  constructor(readonly error: unknown) {}
}

function codedError(code: string, message: string, cause?: unknown): Error {
  return Object.assign(new Error(message, cause === undefined ? undefined : { cause }), { code });
}

/**
 * The PostgreSQL implementation of `ProposalStore` (@forge/toolsmith): the proposals of one
 * project in `forge_toolsmith_proposals`, the approval claims in `forge_toolsmith_claims`
 * (migration 41, `TOOLSMITH_MIGRATIONS`).
 * - `create` inserts a row under a fresh id (`ON CONFLICT DO NOTHING`: never overwrites).
 * - `transition` is one transaction: `SELECT … FOR UPDATE` of the row, the file store's own step
 *   (`applyTransition`) on what it holds, an UPDATE (`row_version` + 1), COMMIT: racing callers
 *   queue on the row lock and each sees the one before it, so exactly one moves a proposal out
 *   of a state; a caller killed mid-way holds nothing once its connection is gone.
 * - `claim` inserts the claim row (`ON CONFLICT DO NOTHING`): the primary key lets one caller,
 *   ever, make it; `release` deletes it.
 * - what a row holds is checked as the file store checks a file (`proposalProblem`): a damaged
 *   row is skipped and reported, never returned.
 *
 * `pool` is the caller's and stays open. A database problem is an Error with a `code`
 * (`store_unusable`, `lock_timeout`), its message naming the database (password masked) and what to do.
 */
export function postgresProposalStore(pool: pg.Pool, options: PostgresProposalStoreOptions = {}): ProposalStore {
  const project = options.project ?? '';
  const lockWaitMs = options.lockWaitMs ?? 30_000;
  if (!Number.isInteger(lockWaitMs) || lockWaitMs < 1)
    throw new RangeError(`postgresProposalStore: lockWaitMs must be a positive integer (got ${lockWaitMs})`);
  const base = options.where !== undefined ? redactUrl(options.where) : poolLocator(pool.options);
  const t: ProposalTable = {
    pool,
    project,
    where: `${base}#forge_toolsmith_proposals${project ? `/${encodeURIComponent(project)}` : ''}`,
    now: options.now ?? (() => new Date()),
    onProblem: options.onProblem ?? (() => {}),
    lockWaitMs,
  };
  const { now, where } = t;
  const get = async (id: string): Promise<Proposal | undefined> => {
    if (!isProposalId(id)) return undefined;
    const rows = await query<{ proposal: string }>(
      t,
      'reading proposal',
      'SELECT proposal FROM forge_toolsmith_proposals WHERE project = $1 AND id = $2',
      [project, id],
    );
    const row = rows[0];
    return row ? parse(t, id, row.proposal) : undefined;
  };

  const store: ProposalStore = {
    async create(input) {
      const at = now().toISOString();
      newProposal(input, newProposalId(), at); // a malformed proposal is refused before anything is written
      for (let attempt = 0; attempt < 5; attempt++) {
        const p = newProposal(input, newProposalId(), at);
        const rows = await query<{ id: string }>(
          t,
          'creating proposal',
          `INSERT INTO forge_toolsmith_proposals (project, id, name, state, created_at, proposal) VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT DO NOTHING RETURNING id`,
          [project, p.id, p.name, p.state, p.created_at, serialize(p)],
        );
        if (rows.length === 1) return p;
      }
      throw new Error(`create: 5 fresh ids in a row already existed in ${where}; something else writes there`);
    },

    get,

    async list(filter = {}) {
      const states = filter.state === undefined ? undefined : Array.isArray(filter.state) ? filter.state : [filter.state];
      const rows = await query<{ id: string; proposal: string }>(
        t,
        'listing proposals',
        `SELECT id, proposal FROM forge_toolsmith_proposals WHERE project = $1
           AND ($2::text[] IS NULL OR state = ANY($2::text[])) AND ($3::text IS NULL OR name = $3)`,
        [project, states ?? null, filter.name ?? null],
      );
      const all: Proposal[] = [];
      for (const row of rows) {
        const p = parse(t, row.id, row.proposal);
        if (p) all.push(p);
      }
      return filterProposals(all, filter);
    },

    transition: (id, from, to, opts) => transition(t, id, from, to, opts),

    async claim(id, by) {
      if (!isProposalId(id)) return false;
      if (typeof by !== 'string' || by === '') throw new TypeError('claim: "by" must be a non-empty string (who approves)');
      if ((await get(id)) === undefined) return false;
      const rows = await query<{ id: string }>(
        t,
        `claiming proposal ${id}`,
        `INSERT INTO forge_toolsmith_claims (project, id, claimed_by, claimed_at)
         SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM forge_toolsmith_proposals WHERE project = $1 AND id = $2)
         ON CONFLICT DO NOTHING RETURNING id`,
        [project, id, by, now().toISOString()],
      );
      return rows.length === 1;
    },

    async release(id) {
      if (!isProposalId(id)) return;
      await query(t, `releasing the claim on proposal ${id}`, 'DELETE FROM forge_toolsmith_claims WHERE project = $1 AND id = $2', [
        project,
        id,
      ]);
    },

    async lineage(name) {
      const all = await store.list({ name, state: ['active', 'retired'] });
      return lineageOf(all, name, (p, reason) => t.onProblem(whereOf(t, p.id), reason));
    },
  };
  return store;
}

/** The proposals table of one project, as a store of it sees it. */
interface ProposalTable {
  pool: pg.Pool;
  project: string;
  /** What messages call the table (the database's password masked). */
  where: string;
  now: () => Date;
  onProblem: (where: string, reason: string) => void;
  lockWaitMs: number;
}

function whereOf(t: ProposalTable, id: string): string {
  return `${t.where}/${id}`;
}

/** A database failure of `what` as the coded Error callers see: `lock_timeout`, else `store_unusable` with what to do. */
function unusable(t: ProposalTable, what: string, err: unknown): Error {
  const code = (err as { code?: unknown } | undefined)?.code;
  const detail = redactText(err instanceof Error ? err.message || String(code ?? err.name) : String(err));
  if (code === LOCK_NOT_AVAILABLE)
    return codedError(
      'lock_timeout',
      `${what} in ${t.where}: another process has held the proposal's row for over ${t.lockWaitMs} ms; retry`,
      err,
    );
  const todo =
    code === UNDEFINED_TABLE
      ? 'the database is not migrated: run the migrations of @forge/postgres (forge does on start)'
      : 'check that the server runs and this user may read and write there';
  return codedError('store_unusable', `${what} in ${t.where} failed: ${detail}; ${todo}`, err);
}

async function query<R extends pg.QueryResultRow>(t: ProposalTable, what: string, text: string, values: unknown[]): Promise<R[]> {
  try {
    return (await t.pool.query<R>(text, values)).rows;
  } catch (err) {
    throw unusable(t, what, err);
  }
}

/** The proposal a row holds, or undefined (reported) when it holds none. */
function parse(t: ProposalTable, id: string, text: string): Proposal | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    t.onProblem(whereOf(t, id), `not valid JSON (a damaged row?): ${(err as Error).message}`);
    return undefined;
  }
  const problem = proposalProblem(value, id);
  if (problem) {
    t.onProblem(whereOf(t, id), problem);
    return undefined;
  }
  return value as Proposal;
}

function serialize(p: Proposal): string {
  const text = JSON.stringify(p);
  const size = Buffer.byteLength(text);
  if (size > MAX_PROPOSAL_FILE_BYTES) {
    throw new RangeError(
      `proposal ${p.id} would be ${size} bytes; a proposal is at most ${MAX_PROPOSAL_FILE_BYTES} (bound the validation record's outputs)`,
    );
  }
  return text;
}

/** `ProposalStore.transition`: one transaction holding the row's lock (see {@link postgresProposalStore}). */
async function transition(
  t: ProposalTable,
  id: string,
  from: Parameters<ProposalStore['transition']>[1],
  to: Parameters<ProposalStore['transition']>[2],
  opts: Parameters<ProposalStore['transition']>[3],
): Promise<UpdateResult> {
  checkTransition(to, opts.by);
  const unknown = (why: string) => unknownProposal(id, why);
  if (!isProposalId(id)) return unknown(' (an id is p- and 16 hex digits)');
  let client: pg.PoolClient;
  try {
    client = await t.pool.connect();
  } catch (err) {
    throw unusable(t, `moving proposal ${id}`, err);
  }
  let broken = false;
  try {
    await client.query('BEGIN');
    await client.query(`SET LOCAL lock_timeout = ${t.lockWaitMs}`);
    const r = await client.query<{ proposal: string }>(
      'SELECT proposal FROM forge_toolsmith_proposals WHERE project = $1 AND id = $2 FOR UPDATE',
      [t.project, id],
    );
    const row = r.rows[0];
    if (!row) {
      await client.query('ROLLBACK');
      return unknown(` in ${t.where}`);
    }
    const current = parse(t, id, row.proposal);
    if (!current) {
      await client.query('ROLLBACK');
      return unknown(`: its row in ${t.where} is unusable (see the problems reported)`);
    }
    let step: UpdateResult;
    let text: string;
    try {
      step = applyTransition(current, from, to, opts, () => t.now().toISOString());
      text = step.ok ? serialize(step.proposal) : '';
    } catch (err) {
      throw new Passthrough(err);
    }
    if (!step.ok) {
      await client.query('ROLLBACK');
      return step;
    }
    await client.query(
      `UPDATE forge_toolsmith_proposals SET state = $3, name = $4, proposal = $5, row_version = row_version + 1
       WHERE project = $1 AND id = $2`,
      [t.project, id, step.proposal.state, step.proposal.name, text],
    );
    await client.query('COMMIT');
    return step;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {
      broken = true;
    });
    if (err instanceof Passthrough) throw err.error;
    broken = true;
    throw unusable(t, `moving proposal ${id}`, err);
  } finally {
    client.release(broken);
  }
}
