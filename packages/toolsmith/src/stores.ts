import type { GapKind, GapRecord, GapSummary, Proposal, ProposalState } from './types.js';

/**
 * The two stores the toolsmith keeps, as interfaces: what `createToolsmith` uses of them and
 * nothing more. The files under `<project>/.forge/toolsmith/` (`openGapStore`,
 * `openProposalStore`) are the embedded implementation; `@forge/postgres` has the shared one
 * (`postgresGapStore`, `postgresProposalStore`). Every implementation passes the same conformance
 * suites (`describeGapStore`, `describeProposalStore` in `@forge/conformance`).
 */

/** A value now or later: the file stores answer reads at once, a database store later. Always `await` it. */
export type Awaitable<T> = T | Promise<T>;

/** One observation as given to a gap store: `at` defaults to the store's clock. */
export type GapInput = Omit<GapRecord, 'at'> & { at?: number };

/** What a recurrence summary is asked for. */
export interface GapQuery {
  /** Observations in the window for a gap to qualify; at least 1 (else a RangeError). */
  threshold: number;
  /** The window, ending at `now`, in ms; at least 0 (else a RangeError). */
  windowMs: number;
  /** The end of the window (default: the store's clock). */
  now?: number;
  /** Only this (kind, signature) (none held: `[]`). */
  only?: { kind: GapKind; signature: string };
}

/**
 * A durable, bounded store of gap observations shared by every process of one project.
 *
 * - **Records** are sanitised by `sanitizeGapRecord` before they are kept (fields in a fixed
 *   order, unknown fields dropped, long text cut); what `summary` and `history` return is what
 *   was kept, never the raw input.
 * - **Bound**: the store holds at most its `maxRecords` newest observations (a ring: the oldest
 *   are dropped first, in the order the store committed them). Within the bound nothing accepted
 *   is lost, whatever the number of writing processes.
 * - **Durability**: `record` resolves once the observation is durable; a writer killed at any
 *   point leaves no partial record anyone can read (a torn write is skipped, never half-parsed).
 * - **Readers** see whole records only: every record committed before the read began, and of a
 *   batch committing concurrently either all or none (file: one `write` per batch under the lock;
 *   database: one transaction). Readers never wait for writers.
 */
export interface GapStore {
  /**
   * Records one observation; resolves once it is durable (implementations may batch concurrent
   * calls into one commit). Rejects with a `GapStoreError`: `invalid_record` (naming the field;
   * nothing stored), `unusable` (the storage cannot be written), `closed`.
   */
  record(r: GapInput): Promise<void>;
  /** Best effort: `record()` without waiting; any failure goes to the store's `onError`. Never throws. */
  note(r: GapInput): void;
  /**
   * Recurrence per (kind, signature): `count` of records with `at` inside `[now - windowMs, now]`,
   * `qualifies` when `count >= threshold`; `total`, `first_at`, `last_at`, `personas` and `sources`
   * (both sorted) and `description` (the one of the latest `at` that gave one) over every record
   * held. Qualifying first, then by count (desc), then latest observation (desc), then kind +
   * signature. Throws (or rejects) a RangeError for a threshold below 1 or a negative window.
   */
  summary(q: GapQuery): Awaitable<GapSummary[]>;
  /** One (kind, signature)'s records held, oldest first (in commit order). */
  history(kind: GapKind, signature: string): Awaitable<readonly GapRecord[]>;
  /** Resolves once every record accepted so far (`record` and `note`) is durable or has failed. */
  flush(): Promise<void>;
  /** Flushes, then releases what the store holds; later `record()` calls reject with `closed`. */
  close(): Promise<void>;
}

/** A new proposal as given to `create`: the store sets `id`, the stamps and `history`; `by` is who proposed it. */
export type ProposalInput = Omit<Proposal, 'id' | 'created_at' | 'updated_at' | 'history'> & { by: string };

/** What a transition gave: the proposal as written, or why nothing was written. */
export type UpdateResult =
  | { ok: true; proposal: Proposal }
  | { ok: false; kind: 'unknown_proposal' | 'state_conflict'; message: string; current?: Proposal };

/** Which proposals `list` returns. */
export interface ProposalFilter {
  /** Only proposals in this state, or in one of these. */
  state?: ProposalState | ProposalState[];
  /** Only proposals of this tool name. */
  name?: string;
}

/**
 * The durable proposals of one project, shared by every process of it. The store records state;
 * it decides nothing: whether a tool is live is what the registry holds.
 *
 * - **Compare-and-set**: `transition` is atomic across processes and hosts: of any number of
 *   callers racing to move one proposal out of a state, exactly one succeeds and every other gets
 *   `state_conflict` naming the state it is in now; no update is ever lost or applied twice
 *   (file: a lock per proposal and an atomic rename; database: the row locked, or a row version).
 * - **One-shot claim**: `claim` succeeds for exactly one caller per proposal, ever, across
 *   processes and crashes, until `release` (file: an exclusive link; database: a unique row).
 * - **Readers** (`get`, `list`, `lineage`) see each proposal whole, as of one committed
 *   transition, never a partial write; they never wait for a transition.
 * - **Bad input**: a malformed id reads as absent and touches nothing; damaged stored data is
 *   skipped and reported, never returned.
 */
export interface ProposalStore {
  /**
   * Stores a new proposal: a fresh id (`p-` + 16 lower-case hex digits from crypto), the state as
   * given (normally `pending`), `history` `[{state, at, by}]`, `created_at` = `updated_at` = now.
   * Never overwrites. Throws a TypeError for a malformed proposal (nothing stored), an Error with
   * a `code` when the storage is unusable.
   */
  create(p: ProposalInput): Promise<Proposal>;
  /** The proposal `id`; undefined when there is none, when `id` is malformed or when what is stored is unusable (reported). */
  get(id: string): Promise<Proposal | undefined>;
  /** Proposals, newest first (by `created_at`, then id), filtered; unusable ones are skipped and reported. */
  list(o?: ProposalFilter): Promise<Proposal[]>;
  /**
   * Compare-and-set (see above): applies `change` only when the current state is one of `from`;
   * appends `{state: to, at, by, reason}` to history and sets `updated_at`. `change` may set other
   * fields (validation, activated, …) but not id/created_at/updated_at/history/state (a
   * TypeError, nothing written). `unknown_proposal` for a malformed or absent id.
   */
  transition(
    id: string,
    from: ProposalState[],
    to: ProposalState,
    o: { by: string; reason?: string; change?: (p: Proposal) => Partial<Proposal> },
  ): Promise<UpdateResult>;
  /**
   * The one-shot approval claim (see above), holding `{by, at}`: true for the one caller that
   * made it, false for every other (and for a malformed id or a proposal that does not exist).
   * A TypeError for an empty `by`.
   */
  claim(id: string, by: string): Promise<boolean>;
  /** Removes the claim of `id` (only when the activation that followed it failed, so that it can be decided again). */
  release(id: string): Promise<void>;
  /**
   * The active proposal of `name` and the ones it replaced: proposals of `name` in states
   * active/retired that carry an `activated` record, by activation time, newest first.
   */
  lineage(name: string): Promise<Proposal[]>;
}
