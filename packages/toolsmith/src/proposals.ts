import { randomBytes } from 'node:crypto';
import { closeSync, constants, fstatSync, mkdirSync, openSync, readdirSync, readSync, rmSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { linkNew, replaceWith, syncDir, writeTemp } from '@forge/registry';
import { codedError, errno } from './fsErrors.js';
import { LOCK_STALE_MS, LOCK_WAIT_MS, withProposalLock } from './proposalLock.js';
import type { ProposalFilter, ProposalInput, ProposalStore as ProposalStoreContract, UpdateResult } from './stores.js';
import type { Proposal, ProposalEvent, ProposalState } from './types.js';

/** Where a store lives and its clock. */
export interface ProposalStoreOptions {
  /** The toolsmith directory of one project (`<project>/.forge/toolsmith`); files go to `<dir>/proposals/`. */
  dir: string;
  /** The clock for `created_at`, `updated_at` and history stamps (tests pass a fixed one). */
  now?: () => Date;
}

export type { UpdateResult } from './stores.js';

/**
 * The file implementation of the {@link ProposalStoreContract | ProposalStore} interface: the
 * durable proposals of one project, one JSON file each (`<dir>/proposals/<id>.json`, mode
 * 0600, directories 0700 created by the first `create`). The store records state; it decides
 * nothing: whether a tool is live is what the registry holds, so a file hand-edited to `active`
 * makes nothing callable.
 * - `create` writes atomically and exclusively (link(2): it never overwrites); an Error with
 *   `code: 'dir_unusable'` when the directory is unusable.
 * - `get` touches no path for a malformed id; an unusable file reads as absent (reported).
 * - `transition` is a compare-and-set under a cross-process lock on that proposal (threads or
 *   processes); an Error with `code: 'lock_timeout'` when the lock stays held longer than
 *   `lockWaitMs`.
 * - `claim` creates `<dir>/proposals/<id>.claim` exclusively, holding {by, at}: false for every
 *   later caller ever (even after a crash: the file stays) until `release` removes it.
 * - `lineage` leaves out (and reports) a proposal in state active/retired without an `activated`
 *   record: it was never activated through the store (a hand edit?).
 */
export interface FileProposalStore extends ProposalStoreContract {
  /** The toolsmith directory given (the files are under `<dir>/proposals/`). */
  readonly dir: string;
}

/** The file store's type under its earlier name (as `./proposals.js` exported it); the package exports the interface as `ProposalStore`. */
export type ProposalStore = FileProposalStore;

/** Proposal files larger than this are refused when read (and never written). */
export const MAX_PROPOSAL_FILE_BYTES = 4 * 1024 * 1024;
const ID = /^p-[0-9a-f]{16}$/;
const FILE = /^(p-[0-9a-f]{16})\.json$/;
const STATES: ReadonlySet<string> = new Set(['pending', 'validated', 'failed', 'rejected', 'active', 'retired']);
const REQUIRED_STRINGS = ['id', 'state', 'name', 'capability', 'persona', 'session', 'created_at', 'updated_at'] as const;
const FROZEN = ['id', 'created_at', 'updated_at', 'history', 'state'] as const;
/** Whether `id` is a proposal id: `p-` and 16 lower-case hex digits. */
export function isProposalId(id: unknown): id is string {
  return typeof id === 'string' && ID.test(id);
}

/**
 * Why `value` is not a usable stored proposal (stored under the id `fileId`, when given), in
 * words, or undefined when it is one. Every proposal store checks what it reads with this.
 */
export function proposalProblem(value: unknown, fileId?: string): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'not a JSON object';
  const p = value as Record<string, unknown>;
  for (const k of REQUIRED_STRINGS) {
    if (typeof p[k] !== 'string' || p[k] === '') return `"${k}" must be a non-empty string`;
  }
  if (!ID.test(p.id as string)) return `"id" ${JSON.stringify(p.id)} is not p- and 16 hex digits`;
  if (fileId !== undefined && p.id !== fileId) return `"id" ${JSON.stringify(p.id)} does not match the file name ${fileId}.json`;
  if (!STATES.has(p.state as string)) return `"state" ${JSON.stringify(p.state)} is not one of ${[...STATES].join(', ')}`;
  if (typeof p.spec !== 'object' || p.spec === null || Array.isArray(p.spec)) return '"spec" must be an object';
  if (!Array.isArray(p.history) || p.history.length === 0) return '"history" must be a non-empty array';
  for (const [i, e] of p.history.entries()) {
    const ev = e as Partial<ProposalEvent> | null;
    if (
      typeof ev !== 'object' ||
      ev === null ||
      !STATES.has(ev.state as string) ||
      typeof ev.at !== 'string' ||
      typeof ev.by !== 'string'
    ) {
      return `"history" entry ${i} must be {state, at, by} with a known state`;
    }
  }
  const last = p.history[p.history.length - 1] as ProposalEvent;
  if (last.state !== p.state) return `"state" is ${p.state} but the last history entry says ${last.state}`;
  if (p.activated !== undefined) {
    const a = p.activated as Record<string, unknown> | null;
    if (
      typeof a !== 'object' ||
      a === null ||
      typeof a.version !== 'number' ||
      typeof a.digest !== 'string' ||
      typeof a.at !== 'string' ||
      typeof a.by !== 'string'
    ) {
      return '"activated" must be {version, digest, at, by}';
    }
  }
  return undefined;
}

/** A fresh proposal id: `p-` and 16 hex digits from crypto. */
export function newProposalId(): string {
  return `p-${randomBytes(8).toString('hex')}`;
}

/** The proposal `create` stores for `input` under `id` at `at`; a TypeError for a malformed one. */
export function newProposal(input: ProposalInput, id: string, at: string): Proposal {
  const { by, ...rest } = input as ProposalInput & Partial<Proposal>;
  if (typeof by !== 'string' || by === '') throw new TypeError('create: "by" must be a non-empty string (who proposed it)');
  const p: Proposal = { ...rest, id, state: input.state, created_at: at, updated_at: at, history: [{ state: input.state, at, by }] };
  const problem = proposalProblem(p);
  if (problem) throw new TypeError(`create: not a proposal: ${problem}`);
  return p;
}

/** The TypeErrors of `transition`'s arguments: `to` must be a state and `by` a non-empty string. */
export function checkTransition(to: unknown, by: unknown): void {
  if (typeof to !== 'string' || !STATES.has(to)) throw new TypeError(`transition: ${JSON.stringify(to)} is not a proposal state`);
  if (typeof by !== 'string' || by === '') throw new TypeError('transition: "by" must be a non-empty string');
}

/**
 * The compare-and-set step of every proposal store, on the proposal read under its lock: the
 * `state_conflict` when `current` is not in one of `from`, else the proposal as it becomes (the
 * event appended, `updated_at` = `clock()`). A TypeError when `change` sets a field the store
 * sets or leaves no proposal.
 */
export function applyTransition(
  current: Proposal,
  from: readonly ProposalState[],
  to: ProposalState,
  opts: { by: string; reason?: string; change?: (p: Proposal) => Partial<Proposal> },
  clock: () => string,
): UpdateResult {
  const id = current.id;
  if (!from.includes(current.state)) {
    const last = current.history[current.history.length - 1] as ProposalEvent;
    return {
      ok: false,
      kind: 'state_conflict',
      message: `proposal ${id} is ${current.state} (since ${last.at}, by ${last.by}), not ${from.join(' or ')}; nothing was changed: reload it and decide again`,
      current,
    };
  }
  const changes = opts.change?.(structuredClone(current)) ?? {};
  for (const k of FROZEN) {
    if (k in changes) throw new TypeError(`transition: change may not set "${k}" (the store sets it)`);
  }
  const at = clock();
  const event: ProposalEvent =
    opts.reason === undefined ? { state: to, at, by: opts.by } : { state: to, at, by: opts.by, reason: opts.reason };
  const next: Proposal = { ...current, ...changes, id, state: to, updated_at: at, history: [...current.history, event] };
  const problem = proposalProblem(next, id);
  if (problem) throw new TypeError(`transition: the change leaves no proposal: ${problem}`);
  return { ok: true, proposal: next };
}

/**
 * The answer of `transition` for a proposal that is not there (or not usable): `why` follows the
 * quoted id (` in <where>`, ` (an id is …)`, `: its file … is unusable (…)`).
 */
export function unknownProposal(id: string, why: string): UpdateResult {
  return { ok: false, kind: 'unknown_proposal', message: `no proposal ${JSON.stringify(id)}${why}; see \`forge toolsmith list\`` };
}

/** The proposals of `proposals` that `filter` lets through (`list`'s), newest first ({@link byNewest}). */
export function filterProposals(proposals: Iterable<Proposal>, filter: ProposalFilter = {}): Proposal[] {
  const states = filter.state === undefined ? undefined : new Set(Array.isArray(filter.state) ? filter.state : [filter.state]);
  const out: Proposal[] = [];
  for (const p of proposals) {
    if (states && !states.has(p.state)) continue;
    if (filter.name !== undefined && p.name !== filter.name) continue;
    out.push(p);
  }
  return out.sort(byNewest);
}

/**
 * `lineage`'s answer from the active and retired proposals of `name`: those with an `activated`
 * record, newest activation first ({@link byActivation}); each one without is left out and told
 * to `onLeftOut(proposal, reason)`.
 */
export function lineageOf(proposals: readonly Proposal[], name: string, onLeftOut: (p: Proposal, reason: string) => void): Proposal[] {
  const out: Proposal[] = [];
  for (const p of proposals) {
    if (p.activated) out.push(p);
    else onLeftOut(p, `${p.state} but never activated (no "activated" record): left out of the lineage of ${name}`);
  }
  return out.sort(byActivation);
}

/** `list`'s order: newest `created_at` first, then by id. */
export function byNewest(a: Proposal, b: Proposal): number {
  return a.created_at === b.created_at ? a.id.localeCompare(b.id) : a.created_at < b.created_at ? 1 : -1;
}

/** `lineage`'s order: newest activation first, then newest `created_at`. */
export function byActivation(a: Proposal, b: Proposal): number {
  const x = (a.activated as { at: string }).at;
  const y = (b.activated as { at: string }).at;
  return x === y ? b.created_at.localeCompare(a.created_at) : x < y ? 1 : -1;
}

type Read = { status: 'ok'; proposal: Proposal } | { status: 'missing' } | { status: 'bad'; reason: string };

/** Reads and checks one proposal file, refusing symbolic links, non-files and files over 4 MiB. */
function readProposal(path: string, id: string): Read {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (err) {
    if (errno(err) === 'ENOENT') return { status: 'missing' };
    if (errno(err) === 'ELOOP') return { status: 'bad', reason: 'a symbolic link; a proposal file must be a regular file' };
    return { status: 'bad', reason: `unreadable: ${(err as Error).message}` };
  }
  let text: string;
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return { status: 'bad', reason: 'not a regular file' };
    if (st.size > MAX_PROPOSAL_FILE_BYTES) {
      return { status: 'bad', reason: `the file is ${st.size} bytes; a proposal file is at most ${MAX_PROPOSAL_FILE_BYTES}` };
    }
    const buf = Buffer.allocUnsafe(st.size + 1);
    let n = 0;
    for (;;) {
      if (n === buf.length) return { status: 'bad', reason: 'the file grew while being read' };
      const got = readSync(fd, buf, n, buf.length - n, null);
      if (got === 0) break;
      n += got;
    }
    text = buf.toString('utf8', 0, n);
  } catch (err) {
    return { status: 'bad', reason: `unreadable: ${(err as Error).message}` };
  } finally {
    closeSync(fd);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { status: 'bad', reason: `not valid JSON (a torn or hand-edited file?): ${(err as Error).message}` };
  }
  const problem = proposalProblem(value, id);
  return problem ? { status: 'bad', reason: problem } : { status: 'ok', proposal: value as Proposal };
}

/** The JSON text of `p`, refusing one that could not be read back. */
function serialize(p: Proposal): string {
  const text = `${JSON.stringify(p, null, 2)}\n`;
  const size = Buffer.byteLength(text);
  if (size > MAX_PROPOSAL_FILE_BYTES) {
    throw new RangeError(
      `proposal ${p.id} would be ${size} bytes; a proposal file is at most ${MAX_PROPOSAL_FILE_BYTES} (bound the validation record's outputs)`,
    );
  }
  return text;
}

/** Creates the store directory `root` (0700) under the toolsmith directory `dir`; `dir_unusable` when it cannot be. */
function ensureRoot(root: string, dir: string): void {
  try {
    mkdirSync(root, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw codedError(
      'dir_unusable',
      `proposal directory ${root} cannot be created: ${(err as Error).message}; check the permissions of ${dir}`,
      err,
    );
  }
}

/**
 * The ids of the proposal files in `root`, in directory order (none when it does not exist yet);
 * each other `.json` file goes to `onProblem` as the listing reaches it.
 */
function* proposalIds(root: string, onProblem: (file: string, reason: string) => void): Generator<string> {
  let files: string[];
  try {
    files = readdirSync(root);
  } catch (err) {
    if (errno(err) === 'ENOENT') return;
    throw codedError('dir_unusable', `cannot read proposal directory ${root}: ${(err as Error).message}`, err);
  }
  for (const f of files) {
    if (f.startsWith('.') || !f.endsWith('.json')) continue;
    const m = FILE.exec(f);
    if (m) yield m[1] as string;
    else onProblem(join(root, f), 'not a proposal file name (p- and 16 hex digits, .json)');
  }
}

/**
 * Opens the proposal store under `dir` (nothing is created until the first `create`).
 * `onProblem` hears of every file that was skipped (path and why); `lockWaitMs` bounds how long
 * a transition waits for a live holder of a proposal's lock (default 30 s; a holder on this host
 * that died is taken over at once).
 */
export function openProposalStore(
  o: ProposalStoreOptions & { onProblem?: (file: string, reason: string) => void; lockWaitMs?: number },
): FileProposalStore {
  const root = join(o.dir, 'proposals');
  const now = o.now ?? (() => new Date());
  const onProblem = o.onProblem ?? (() => {});
  const lockWaitMs = o.lockWaitMs ?? LOCK_WAIT_MS;
  const pathOf = (id: string) => join(root, `${id}.json`);

  function read(id: string): Read {
    const r = readProposal(pathOf(id), id);
    if (r.status === 'bad') onProblem(pathOf(id), r.reason);
    return r;
  }

  const store: FileProposalStore = {
    dir: o.dir,

    async create(input) {
      const at = now().toISOString();
      newProposal(input, newProposalId(), at); // a malformed proposal is refused before anything is created
      ensureRoot(root, o.dir);
      for (let attempt = 0; attempt < 5; attempt++) {
        const id = newProposalId();
        const p = newProposal(input, id, at);
        let made: boolean;
        try {
          made = await linkNew(await writeTemp(root, serialize(p)), pathOf(id));
        } catch (err) {
          throw codedError('dir_unusable', `cannot write proposal ${id} in ${root}: ${(err as Error).message}`, err);
        }
        if (!made) continue;
        await syncDir(root);
        return p;
      }
      throw new Error(`create: 5 fresh ids in a row already existed in ${root}; something else writes there`);
    },

    async get(id) {
      if (!ID.test(id)) return undefined;
      const r = read(id);
      return r.status === 'ok' ? r.proposal : undefined;
    },

    async list(filter = {}) {
      const all: Proposal[] = [];
      for (const id of proposalIds(root, onProblem)) {
        const r = read(id);
        if (r.status === 'ok') all.push(r.proposal);
      }
      return filterProposals(all, filter);
    },

    async transition(id, from, to, opts) {
      checkTransition(to, opts.by);
      const unknown = (why: string) => unknownProposal(id, why);
      if (!ID.test(id)) return unknown(' (an id is p- and 16 hex digits)');
      // Checked before locking, so that a store nothing was written to stays untouched.
      if (readProposal(pathOf(id), id).status === 'missing') return unknown(` in ${root}`);
      return withProposalLock(root, id, lockWaitMs, async (lost) => {
        const r = read(id);
        if (r.status === 'missing') return unknown(` in ${root}`);
        if (r.status === 'bad') return unknown(`: its file ${pathOf(id)} is unusable (${r.reason})`);
        const step = applyTransition(r.proposal, from, to, opts, () => now().toISOString());
        if (!step.ok) return step;
        const next = step.proposal;
        const tmp = await writeTemp(root, serialize(next));
        if (await lost()) {
          rmSync(tmp, { force: true });
          throw codedError(
            'lock_timeout',
            `the lock on proposal ${id} was lost (another host judged it stale after ${LOCK_STALE_MS} ms); nothing was written: retry`,
          );
        }
        try {
          await replaceWith(tmp, pathOf(id));
        } catch (err) {
          throw codedError('dir_unusable', `cannot write proposal ${id} in ${root}: ${(err as Error).message}`, err);
        }
        await syncDir(root);
        return { ok: true, proposal: next };
      });
    },

    async claim(id, by) {
      if (!ID.test(id)) return false;
      if (typeof by !== 'string' || by === '') throw new TypeError('claim: "by" must be a non-empty string (who approves)');
      if (read(id).status !== 'ok') return false;
      let made: boolean;
      try {
        // link(2) is exclusive like O_EXCL and publishes the claim with its content complete.
        made = await linkNew(await writeTemp(root, `${JSON.stringify({ by, at: now().toISOString() })}\n`), join(root, `${id}.claim`));
      } catch (err) {
        throw codedError('dir_unusable', `cannot claim proposal ${id} in ${root}: ${(err as Error).message}`, err);
      }
      if (!made) return false;
      await syncDir(root);
      return true;
    },

    async release(id) {
      if (!ID.test(id)) return;
      try {
        unlinkSync(join(root, `${id}.claim`));
      } catch (err) {
        if (errno(err) === 'ENOENT') return;
        throw codedError('dir_unusable', `cannot release the claim on proposal ${id} in ${root}: ${(err as Error).message}`, err);
      }
      await syncDir(root);
    },

    async lineage(name) {
      const all = await store.list({ name, state: ['active', 'retired'] });
      return lineageOf(all, name, (p, reason) => onProblem(pathOf(p.id), reason));
    },
  };
  return store;
}
