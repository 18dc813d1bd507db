import { describe, expect, it, onTestFinished } from 'vitest';
import type { Proposal, ProposalInput, ProposalState, ProposalStore } from '../../toolsmith/src/index.js';
import { spawnToolsmithChild, startBarrier, toolsmithChildResult } from './gaps.js';
import type { ChildOpen } from './registry.js';
import { killSettled, type Settles } from './until.js';

/** How the suite opens a proposal store: the clock and where skipped data is reported. */
export interface ProposalStoreOpenOptions {
  now?: () => Date;
  onProblem?: (where: string, reason: string) => void;
}

/** One test's storage, fresh and empty, as an implementation gives it to {@link describeProposalStore}. */
export interface ProposalStoreHarness extends Settles {
  /** A new store object over this storage (each call separate; every one sees the same proposals). */
  open(options?: ProposalStoreOpenOptions): Promise<ProposalStore>;
  /** How a child process opens the same storage: `await (await import(module))[export](...args, {})`. */
  child: ChildOpen;
  /** Damages the stored proposal `id` as a torn write or a hand edit would (what `get` must not return). */
  corrupt(id: string): Promise<void>;
  /** Releases what `open` opened and removes the storage. */
  cleanup(): Promise<void>;
}

const STATES: ProposalState[] = ['pending', 'validated', 'failed', 'rejected', 'active', 'retired'];
const ID = /^p-[0-9a-f]{16}$/;

/** A clock that moves one second per reading, from 2030-01-01. */
function ticking(): () => Date {
  let t = Date.parse('2030-01-01T00:00:00.000Z');
  return () => new Date((t += 1000));
}

function input(name = 'text.upper', extra: Partial<ProposalInput> = {}): ProposalInput {
  return {
    state: 'pending',
    name,
    capability: name,
    persona: 'agent',
    session: 's-1',
    gap: { kind: 'missing_tool', signature: name },
    spec: {
      name,
      description: `the tool ${name}`,
      input_schema: { type: 'object' },
      impl: 'print(1)\n',
      runtime: 'python3',
    },
    by: 'agent',
    ...extra,
  };
}

async function failure(f: () => unknown): Promise<(Error & { code?: string }) | undefined> {
  try {
    await f();
  } catch (err) {
    return err as Error;
  }
  return undefined;
}

/** Moves `id` to `to` from any state (for setting tests up). */
async function force(s: ProposalStore, id: string, to: ProposalState, change?: () => Partial<Proposal>): Promise<Proposal> {
  const r = await s.transition(id, STATES, to, { by: 'setup', ...(change ? { change } : {}) });
  if (!r.ok) throw new Error(r.message);
  return r.proposal;
}

/** What the topics of the suite share. */
interface ProposalSuite {
  /** Fresh, empty storage for the current test, removed after it. */
  fresh(): Promise<ProposalStoreHarness>;
}

/**
 * Declares the conformance suite of a proposal store (`ProposalStore` of @forge/toolsmith):
 * behaviour (create, get, list, transition, claim, release, lineage), 8 processes racing on one
 * proposal (one claim wins, one transition wins, no update lost), kill -9 mid-transition,
 * damaged data and bad input. `factory` makes fresh, empty storage for each test; the suite
 * calls `cleanup()` after it. Child processes run src/toolsmith-child.mjs against `child`.
 */
export function describeProposalStore(label: string, factory: () => Promise<ProposalStoreHarness>): void {
  const suite: ProposalSuite = {
    async fresh() {
      const h = await factory();
      onTestFinished(() => h.cleanup());
      return h;
    },
  };
  describe(`proposal store conformance: ${label}`, () => {
    describe('behaviour', () => proposalStoreBehaviour(suite));
    describe('bad input', () => proposalStoreBadInput(suite));
    describe('many processes', () => proposalStoreManyProcesses(suite));
    describe('crash safety', () => proposalStoreCrashSafety(suite));
  });
}

/** One process: create, get, list, transition, claim, release and lineage. */
function proposalStoreBehaviour({ fresh }: ProposalSuite): void {
  it('create stores a fresh id, the state, the history and the stamps; get and another store read it back equal', async () => {
    const h = await fresh();
    const s = await h.open({ now: ticking() });
    const p = await s.create(input());
    expect(p.id).toMatch(ID);
    expect(p).toMatchObject({ state: 'pending', name: 'text.upper', created_at: '2030-01-01T00:00:01.000Z' });
    expect(p.updated_at).toBe(p.created_at);
    expect(p.history).toEqual([{ state: 'pending', at: p.created_at, by: 'agent' }]);
    expect('by' in p).toBe(false);
    expect(await s.get(p.id)).toEqual(p);
    expect(await (await h.open()).get(p.id)).toEqual(p);
    const q = await s.create(input());
    expect(q.id).not.toBe(p.id);
  });

  it('list: newest first, by state (one or several) and by name', async () => {
    const h = await fresh();
    const s = await h.open({ now: ticking() });
    const a = await s.create(input('text.a'));
    const b = await s.create(input('text.b'));
    const c = await s.create(input('text.a'));
    await force(s, b.id, 'validated');
    expect((await s.list()).map((p) => p.id)).toEqual([c.id, b.id, a.id]);
    expect((await s.list({ state: 'validated' })).map((p) => p.id)).toEqual([b.id]);
    expect((await s.list({ state: ['pending', 'validated'], name: 'text.a' })).map((p) => p.id)).toEqual([c.id, a.id]);
    expect(await s.list({ name: 'text.none' })).toEqual([]);
    expect(await (await h.open()).list({ state: [] })).toEqual([]);
  });

  it('transition is a compare-and-set: applied from a listed state, a state_conflict (with the current proposal) otherwise', async () => {
    const h = await fresh();
    const s = await h.open({ now: ticking() });
    const p = await s.create(input());
    const moved = await s.transition(p.id, ['pending'], 'validated', {
      by: 'forge',
      reason: 'passed',
      change: (cur) => ({ validation: { ok: true, summary: `of ${cur.id}` } as never }),
    });
    if (!moved.ok) throw new Error(moved.message);
    expect(moved.proposal).toMatchObject({ state: 'validated', validation: { ok: true, summary: `of ${p.id}` } });
    expect(moved.proposal.updated_at > p.updated_at).toBe(true);
    expect(moved.proposal.history.at(-1)).toEqual({ state: 'validated', at: moved.proposal.updated_at, by: 'forge', reason: 'passed' });
    expect(await s.get(p.id)).toEqual(moved.proposal);
    const again = await s.transition(p.id, ['pending'], 'failed', { by: 'forge' });
    expect(again).toMatchObject({ ok: false, kind: 'state_conflict', current: moved.proposal });
    expect(again.ok ? '' : again.message).toMatch(/is validated .*by forge/);
    expect(await s.get(p.id)).toEqual(moved.proposal);
  });

  it('claim is one-shot across store objects until release; false for a proposal that does not exist', async () => {
    const h = await fresh();
    const s = await h.open();
    const p = await s.create(input());
    expect(await s.claim(p.id, 'alice')).toBe(true);
    expect(await s.claim(p.id, 'bob')).toBe(false);
    expect(await (await h.open()).claim(p.id, 'carol')).toBe(false);
    await s.release(p.id);
    expect(await (await h.open()).claim(p.id, 'dave')).toBe(true);
    expect(await s.claim('p-0000000000000000', 'alice')).toBe(false);
    await s.release('p-0000000000000000'); // nothing to release: no error
  });

  it('lineage: active and retired proposals of a name with an activation record, newest activation first', async () => {
    const h = await fresh();
    const s = await h.open({ now: ticking() });
    const act = (v: number, at: string) => () => ({ activated: { version: v, digest: `sha256:${v}`, at, by: 'alice' } });
    const one = await s.create(input('text.l'));
    const two = await s.create(input('text.l'));
    const three = await s.create(input('text.l'));
    const other = await s.create(input('text.m'));
    await force(s, one.id, 'active', act(1, '2030-02-01T00:00:00.000Z'));
    await force(s, one.id, 'retired');
    await force(s, two.id, 'active', act(2, '2030-03-01T00:00:00.000Z'));
    await force(s, three.id, 'retired'); // never activated: left out
    await force(s, other.id, 'active', act(1, '2030-04-01T00:00:00.000Z'));
    expect((await s.lineage('text.l')).map((p) => [p.id, p.state])).toEqual([
      [two.id, 'active'],
      [one.id, 'retired'],
    ]);
    expect(await s.lineage('text.none')).toEqual([]);
  });
}

/** Malformed ids, proposals and transitions, and damaged stored data. */
function proposalStoreBadInput({ fresh }: ProposalSuite): void {
  it('a malformed id reads as absent and touches nothing', async () => {
    const h = await fresh();
    const s = await h.open();
    for (const id of ['', 'p-1', '../../etc/passwd', 'p-0123456789ABCDEF', "p-0123456789abcdef' OR '1'='1"]) {
      expect(await s.get(id)).toBeUndefined();
      expect(await s.claim(id, 'alice')).toBe(false);
      expect(await s.transition(id, STATES, 'active', { by: 'alice' })).toMatchObject({ ok: false, kind: 'unknown_proposal' });
      await s.release(id);
    }
    expect(await s.transition('p-0123456789abcdef', STATES, 'active', { by: 'alice' })).toMatchObject({
      ok: false,
      kind: 'unknown_proposal',
    });
    expect(await s.list()).toEqual([]);
  });

  it('refuses a malformed proposal or transition with a TypeError, writing nothing', async () => {
    const h = await fresh();
    const s = await h.open();
    expect(await failure(() => s.create({ ...input(), by: '' }))).toBeInstanceOf(TypeError);
    expect(await failure(() => s.create({ ...input(), name: '' }))).toBeInstanceOf(TypeError);
    expect(await failure(() => s.create({ ...input(), state: 'live' as never }))).toBeInstanceOf(TypeError);
    expect(await failure(() => s.create({ ...input(), spec: null as never }))).toBeInstanceOf(TypeError);
    expect(await s.list()).toEqual([]);
    const p = await s.create(input());
    expect(await failure(() => s.transition(p.id, ['pending'], 'live' as never, { by: 'x' }))).toBeInstanceOf(TypeError);
    expect(await failure(() => s.transition(p.id, ['pending'], 'validated', { by: '' }))).toBeInstanceOf(TypeError);
    for (const k of ['id', 'state', 'history', 'created_at', 'updated_at']) {
      const err = await failure(() => s.transition(p.id, ['pending'], 'validated', { by: 'x', change: () => ({ [k]: 'x' }) }));
      expect(err).toBeInstanceOf(TypeError);
    }
    expect(
      await failure(() => s.transition(p.id, ['pending'], 'validated', { by: 'x', change: () => ({ name: 7 as never }) })),
    ).toBeInstanceOf(TypeError);
    expect(await failure(() => s.claim(p.id, ''))).toBeInstanceOf(TypeError);
    expect(await s.get(p.id)).toEqual(p);
  });

  it('damaged stored data is skipped and reported, never returned; the others still list', async () => {
    const h = await fresh();
    const problems: string[] = [];
    const s = await h.open({ onProblem: (where) => problems.push(where) });
    const bad = await s.create(input('text.bad'));
    const good = await s.create(input('text.good'));
    await h.corrupt(bad.id);
    expect(await s.get(bad.id)).toBeUndefined();
    expect((await s.list()).map((p) => p.id)).toEqual([good.id]);
    expect(await s.transition(bad.id, STATES, 'active', { by: 'x' })).toMatchObject({ ok: false, kind: 'unknown_proposal' });
    expect(problems.length).toBeGreaterThan(0);
    expect(problems.some((w) => w.includes(bad.id))).toBe(true);
  });
}

/** Processes racing on one proposal: one claim wins, one transition wins, no update lost. */
function proposalStoreManyProcesses({ fresh }: ProposalSuite): void {
  it('8 processes claiming one proposal at once: exactly one wins', async () => {
    const h = await fresh();
    const p = await (await h.open()).create(input());
    const barrier = startBarrier();
    const runs = Array.from({ length: 8 }, (_, i) =>
      toolsmithChildResult({ open: h.child, go: barrier.go, op: 'claim', id: p.id, by: `op${i}` }),
    );
    await barrier.release(8);
    const won = await Promise.all(runs);
    expect(won.filter((w) => w === true)).toHaveLength(1);
    expect(won.filter((w) => w === false)).toHaveLength(7);
    expect(await (await h.open()).claim(p.id, 'late')).toBe(false);
  });

  it('8 processes moving one proposal validated → active at once: exactly one wins, the rest get state_conflict', async () => {
    const h = await fresh();
    const s = await h.open();
    const p = await s.create(input());
    await force(s, p.id, 'validated');
    const barrier = startBarrier();
    const runs = Array.from({ length: 8 }, (_, i) =>
      toolsmithChildResult({
        open: h.child,
        go: barrier.go,
        op: 'transition',
        id: p.id,
        from: ['validated'],
        to: 'active',
        by: `op${i}`,
      }),
    );
    await barrier.release(8);
    const results = (await Promise.all(runs)) as { ok: boolean; kind?: string }[];
    expect(results.filter((r) => r.ok)).toHaveLength(1);
    expect(results.filter((r) => !r.ok).map((r) => r.kind)).toEqual(Array(7).fill('state_conflict'));
    const after = (await s.get(p.id)) as Proposal;
    expect(after.history.filter((e) => e.state === 'active')).toHaveLength(1);
  });

  it('8 processes × 10 transitions of one proposal: no update lost, none applied twice', async () => {
    const h = await fresh();
    const s = await h.open();
    const p = await s.create(input());
    const barrier = startBarrier();
    const runs = Array.from({ length: 8 }, (_, i) =>
      toolsmithChildResult({ open: h.child, go: barrier.go, op: 'appendMany', id: p.id, n: 10, tag: `c${i}` }),
    );
    await barrier.release(8);
    await Promise.all(runs);
    const after = (await s.get(p.id)) as Proposal;
    const reasons = after.history.slice(1).map((e) => e.reason);
    expect(reasons).toHaveLength(80);
    expect(new Set(reasons).size).toBe(80);
    for (let i = 0; i < 8; i++) {
      const mine = reasons.filter((r) => r?.startsWith(`c${i}-`));
      expect(mine).toEqual(Array.from({ length: 10 }, (_, k) => `c${i}-${k}`));
    }
  });
}

/** A process killed -9 mid-transition, and a claim whose maker is gone. */
function proposalStoreCrashSafety({ fresh }: ProposalSuite): void {
  it('a process killed -9 mid-transition leaves the proposal whole; the next transition goes through', async () => {
    const h = await fresh();
    const s = await h.open();
    const p = await s.create(input());
    const child = spawnToolsmithChild({ open: h.child, op: 'spin', id: p.id, tag: 'k' });
    await child.printed('started');
    await new Promise((r) => setTimeout(r, 100));
    await killSettled(h, async () => {
      child.process.kill('SIGKILL');
      expect((await child.exit).signal).toBe('SIGKILL');
    });
    const seen = (await s.get(p.id)) as Proposal;
    expect(seen.history.length).toBeGreaterThanOrEqual(2);
    const reasons = seen.history.slice(1).map((e) => e.reason);
    expect(reasons).toEqual(Array.from({ length: reasons.length }, (_, k) => `k-${k}`));
    const next = await s.transition(p.id, STATES, 'failed', { by: 'after' });
    if (!next.ok) throw new Error(next.message);
    expect(next.proposal.history).toHaveLength(seen.history.length + 1);
    expect(await (await h.open()).get(p.id)).toEqual(next.proposal);
  });

  it('a claim made by another process stays made after it is gone', async () => {
    const h = await fresh();
    const p = await (await h.open()).create(input());
    expect(await toolsmithChildResult({ open: h.child, op: 'claim', id: p.id, by: 'doomed' })).toBe(true);
    expect(await (await h.open()).claim(p.id, 'other')).toBe(false);
  });
}
