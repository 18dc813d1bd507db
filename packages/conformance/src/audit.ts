import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { AuditEntry, AuditLog, JsonValue, VerifyResult } from '@forge/audit-chain';
import { GENESIS_HASH } from '@forge/audit-chain';
import { describe, expect, it, onTestFinished } from 'vitest';

/**
 * How a child process opens the same store: it runs `(await import(module))[export](...args)`.
 * `module` is an absolute path or file URL (or a bare specifier that @forge/conformance itself
 * resolves, such as "@forge/audit-chain"); `args` must be JSON.
 */
export interface ChildOpenSpec {
  module: string;
  export: string;
  args: JsonValue[];
}

/** One fresh, empty store for one test, made by the factory given to {@link describeAuditStore}. */
export interface AuditStoreFixture {
  /** Opens a new handle on the store (each call a separate writer). */
  open(): Promise<AuditLog>;
  /** How a child process opens this same store. */
  child: ChildOpenSpec;
  /** Verifies the whole store with the file verifier (a Postgres store: export it, then verifyLog on the file). */
  verify(): Promise<VerifyResult>;
  /** The largest entry line the store accepts, in bytes (the file log's default is 1 MiB). */
  maxEntryBytes: number;
  /** Removes the store. Called after every handle the suite opened is closed. */
  cleanup(): Promise<void>;
}

/** A writer child process of the suite (see src/audit-child.mjs). */
interface Child {
  id: string;
  process: ChildProcess;
  /** Acknowledged appends so far: index, seq, hash. */
  acks: { i: number; seq: number; hash: string }[];
  ready: Promise<void>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  go(): void;
  stderr(): string;
}

const CHILD = new URL('./audit-child.mjs', import.meta.url).pathname;
const HEX64 = /^[0-9a-f]{64}$/;

/** What the topics of the suite share. */
interface AuditSuite {
  /** A fresh store for the current test, with every handle closed and the store removed after it. */
  fresh(): Promise<AuditStoreFixture & { open(): Promise<AuditLog> }>;
}

/**
 * Declares the conformance suite of an audit store: behaviour, concurrency (8 processes),
 * crash safety (kill -9 mid-stream) and bad input. `factory` makes a fresh, empty store for each
 * test; the suite closes every handle it opened and then calls `cleanup()`.
 */
export function describeAuditStore(label: string, factory: () => Promise<AuditStoreFixture>): void {
  const suite: AuditSuite = {
    async fresh() {
      const store = await factory();
      const logs: AuditLog[] = [];
      onTestFinished(async () => {
        await Promise.allSettled(logs.map((l) => l.close()));
        await store.cleanup();
      });
      return {
        ...store,
        async open() {
          const log = await store.open();
          logs.push(log);
          return log;
        },
      };
    },
  };
  describe(`audit store conformance: ${label}`, () => {
    describe('behaviour', () => auditStoreBehaviour(suite));
    describe('concurrency', () => auditStoreConcurrency(suite));
    describe('crash safety', () => auditStoreCrashSafety(suite));
    describe('bad input', () => auditStoreBadInput(suite));
  });
}

/** One or two handles in this process: head, append, entries, flush, checkpoint and close. */
function auditStoreBehaviour({ fresh }: AuditSuite): void {
  it('an empty store has head seq 0 with the genesis hash and no entries', async () => {
    const store = await fresh();
    const log = await store.open();
    expect(await log.head()).toEqual({ seq: 0, hash: GENESIS_HASH });
    expect(await all(log)).toEqual([]);
  });

  it('append returns increasing seqs; entries() gives exactly what was appended, in order, chained', async () => {
    const store = await fresh();
    const log = await store.open();
    const data: JsonValue[] = [
      { tool: 'wc', args: ['-l'], ok: true },
      null,
      'text with "quotes", \\ and ünïcødé ✓',
      [1, 2.5, -3, { nested: { deep: [null, false] } }],
      { b: 1, a: 2 },
      0,
    ];
    const results = [];
    for (const [k, d] of data.entries()) results.push(await log.append(`t.kind${k}`, d));
    expect(results.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5, 6]);
    for (const r of results) {
      expect(r.hash).toMatch(HEX64);
      expect(new Date(r.ts).toISOString()).toBe(r.ts);
    }
    const got = await all(log);
    expect(got.map((e) => ({ seq: e.seq, type: e.type, data: e.data, hash: e.hash, ts: e.ts }))).toEqual(
      results.map((r, k) => ({ seq: r.seq, type: `t.kind${k}`, data: data[k], hash: r.hash, ts: r.ts })),
    );
    expect(got.map((e) => e.prev)).toEqual([GENESIS_HASH, ...results.slice(0, -1).map((r) => r.hash)]);
    const tail = results.at(-1);
    expect(await log.head()).toEqual({ seq: 6, hash: tail?.hash });
    // A missing data argument is null.
    const r7 = await log.append('t.nodata');
    expect((await all(log, 7)).map((e) => [e.seq, e.type, e.data])).toEqual([[r7.seq, 't.nodata', null]]);
  });

  it('entries({from}) starts at that seq', async () => {
    const store = await fresh();
    const log = await store.open();
    for (let i = 0; i < 10; i++) await log.append('t.n', { i });
    expect((await all(log, 7)).map((e) => e.seq)).toEqual([7, 8, 9, 10]);
    expect((await all(log, 1)).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(await all(log, 11)).toEqual([]);
  });

  it('appends issued without waiting get seqs in call order, each acknowledged once durable', async () => {
    const store = await fresh();
    const log = await store.open();
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => log.append('t.burst', { i })));
    expect(results.map((r) => r.seq)).toEqual(Array.from({ length: 200 }, (_, i) => i + 1));
    const got = await all(log);
    expect(got.map((e) => (e.data as { i: number }).i)).toEqual(Array.from({ length: 200 }, (_, i) => i));
  });

  it('head() and entries() see what another handle appended, and a second writer continues the chain', async () => {
    const store = await fresh();
    const a = await store.open();
    const b = await store.open();
    const r1 = await a.append('t.from', { by: 'a' });
    expect(await b.head()).toEqual({ seq: r1.seq, hash: r1.hash });
    const r2 = await b.append('t.from', { by: 'b' });
    expect(r2.seq).toBe(r1.seq + 1);
    expect(await a.head()).toEqual({ seq: r2.seq, hash: r2.hash });
    const got = await all(a);
    expect(got.map((e) => e.data)).toEqual([{ by: 'a' }, { by: 'b' }]);
    expect(got[1]?.prev).toBe(r1.hash);
  });

  it('flush() resolves once every append made before it is durable and visible to other handles', async () => {
    const store = await fresh();
    const log = await store.open();
    const pending = Array.from({ length: 50 }, (_, i) => log.append('t.flush', { i }));
    await log.flush();
    const other = await store.open();
    expect((await other.head()).seq).toBe(50);
    expect(await all(other)).toHaveLength(50);
    expect((await Promise.all(pending)).at(-1)?.seq).toBe(50);
  });

  it('checkpoint() covers everything appended before it, and the store verifies with it', async () => {
    const store = await fresh();
    const log = await store.open();
    for (let i = 0; i < 5; i++) void log.append('t.cp', { i });
    const cp = await log.checkpoint();
    const head = await log.head();
    expect(head.seq).toBe(5);
    expect(cp).toMatchObject({ entries: 5, head: head.hash });
    expect(new Date(cp.time).toISOString()).toBe(cp.time);
    await log.append('t.after', null);
    const v = await store.verify();
    expect(v).toMatchObject({ ok: true, entries: 6, checkpoint: { entries: 5, head: head.hash }, uncheckpointed: 1 });
  });

  it('close() flushes; then append and checkpoint reject `closed`, and the store is unchanged', async () => {
    const store = await fresh();
    const log = await store.open();
    const last = log.append('t.before-close', { n: 1 });
    await log.close();
    expect((await last).seq).toBe(1);
    await expect(log.append('t.late', null)).rejects.toMatchObject({ code: 'closed' });
    await expect(log.checkpoint()).rejects.toMatchObject({ code: 'closed' });
    await log.close(); // closing twice is fine
    const other = await store.open();
    expect((await all(other)).map((e) => e.type)).toEqual(['t.before-close']);
  });
}

/** Writer processes appending at the same time. */
function auditStoreConcurrency({ fresh }: AuditSuite): void {
  it('8 processes × 500 concurrent appends: nothing lost, nothing forked', async () => {
    const store = await fresh();
    const children = Array.from({ length: 8 }, (_, k) => spawnChild(store.child, `w${k}`, 500, 10));
    await Promise.all(children.map((c) => c.ready));
    for (const c of children) c.go();
    await Promise.all(children.map(expectCleanExit));

    const log = await store.open();
    const entries = await all(log);
    expect(entries.map((e) => e.seq)).toEqual(Array.from({ length: 4000 }, (_, i) => i + 1));
    expectChained(entries);
    expect(await log.head()).toEqual({ seq: 4000, hash: entries.at(-1)?.hash });
    for (const c of children) {
      expect(c.acks, `acks of ${c.id}`).toHaveLength(500);
      expect(checkAcks(entries, c)).toEqual([]);
      // Each writer's entries are in the order it appended them.
      const mine = entries.filter((e) => (e.data as { writer?: string }).writer === c.id).map((e) => (e.data as { i: number }).i);
      expect(mine).toEqual(Array.from({ length: 500 }, (_, i) => i));
    }
    // The writers took turns: they really did write at the same time.
    const writers = entries.map((e) => (e.data as { writer: string }).writer);
    const switches = writers.filter((w, k) => k > 0 && w !== writers[k - 1]).length;
    expect(switches).toBeGreaterThan(7);
    const v = await store.verify();
    expect(v).toMatchObject({ ok: true, entries: 4000, head: entries.at(-1)?.hash });
  });
}

/** Writer processes killed -9 mid-stream. */
function auditStoreCrashSafety({ fresh }: AuditSuite): void {
  it('kill -9 of a writer mid-stream, three times: every acknowledged entry stays, the chain verifies, a new writer continues it', async () => {
    const store = await fresh();
    const killed: Child[] = [];
    for (const [round, after] of [40, 150, 300].entries()) {
      const c = spawnChild(store.child, `k${round}`, 0, 8);
      await c.ready;
      c.go();
      await waitFor(`${c.id} to acknowledge ${after} appends`, () => (c.acks.length >= after ? true : undefined), c);
      c.process.kill('SIGKILL');
      expect((await c.exited).signal).toBe('SIGKILL');
      killed.push(c);

      const log = await store.open();
      const entries = await all(log);
      expect(entries.map((e) => e.seq)).toEqual(Array.from({ length: entries.length }, (_, i) => i + 1));
      expectChained(entries);
      for (const k of killed) expect(checkAcks(entries, k), `acks of ${k.id}`).toEqual([]);
      const v = await store.verify();
      expect(v).toMatchObject({ ok: true, entries: entries.length });
    }

    const log = await store.open();
    const before = await log.head();
    const r = await log.append('t.after-crash', { ok: true });
    expect(r.seq).toBe(before.seq + 1);
    const entries = await all(log, before.seq);
    expect(entries.map((e) => e.seq)).toEqual([before.seq, r.seq]);
    expect(entries[1]?.prev).toBe(before.hash);
    expect(await store.verify()).toMatchObject({ ok: true, entries: r.seq, head: r.hash });
  });
}

/** Types, data and sizes the store must refuse, and the largest entry it must keep. */
function auditStoreBadInput({ fresh }: AuditSuite): void {
  it('an invalid type, data that is not JSON and an entry over the size limit are refused with their codes; nothing is stored; the log goes on', async () => {
    const store = await fresh();
    const log = await store.open();
    const first = await log.append('t.ok', { n: 0 });

    for (const type of ['', 'has space', 'audit.sealed', 'x'.repeat(200), 'naïve', 42 as unknown as string]) {
      await expect(log.append(type, null), `type ${JSON.stringify(type)}`).rejects.toMatchObject({ code: 'invalid_type' });
    }
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    const sparse: unknown[] = [];
    sparse[2] = 1; // holes at 0 and 1
    const notJson: unknown[] = [
      Number.NaN,
      Number.POSITIVE_INFINITY,
      { a: undefined },
      10n,
      'lone \ud800 surrogate',
      cycle,
      new Map([['a', 1]]),
      new Date(0),
      () => 1,
      sparse,
      2 ** 60,
    ];
    for (const data of notJson) {
      await expect(log.append('t.bad', data as JsonValue), `data ${String(data)}`).rejects.toMatchObject({ code: 'invalid_data' });
    }
    await expect(log.append('t.big', 'x'.repeat(store.maxEntryBytes))).rejects.toMatchObject({ code: 'entry_too_large' });
    await expect(log.append('t.big', { blob: 'é'.repeat(store.maxEntryBytes / 2) })).rejects.toMatchObject({
      code: 'entry_too_large',
    });

    // Refusals among good appends in flight do not disturb them.
    const mixed = await Promise.allSettled([
      log.append('t.ok', { n: 1 }),
      log.append('bad type', null),
      log.append('t.ok', { n: 2 }),
      log.append('t.ok', Number.NaN),
      log.append('t.ok', { n: 3 }),
    ]);
    expect(mixed.map((m) => m.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'rejected', 'fulfilled']);
    expect(mixed.flatMap((m) => (m.status === 'fulfilled' ? [m.value.seq] : []))).toEqual([2, 3, 4]);

    const entries = await all(log);
    expect(entries.map((e) => [e.seq, e.type, e.data])).toEqual([
      [1, 't.ok', { n: 0 }],
      [2, 't.ok', { n: 1 }],
      [3, 't.ok', { n: 2 }],
      [4, 't.ok', { n: 3 }],
    ]);
    expect(entries[0]?.hash).toBe(first.hash);
    expectChained(entries);
    expect(await store.verify()).toMatchObject({ ok: true, entries: 4 });
  });

  it('an entry just under the size limit is stored whole', async () => {
    const store = await fresh();
    const log = await store.open();
    // The line is the data plus about 250 bytes of seq, ts, type, prev and hash.
    const blob = 'y'.repeat(store.maxEntryBytes - 400);
    const r = await log.append('t.big', { blob });
    const [e] = await all(log);
    expect(e).toMatchObject({ seq: r.seq, hash: r.hash, data: { blob } });
    expect(await store.verify()).toMatchObject({ ok: true, entries: 1 });
  });
}

/** Every entry of the log with seq >= from, read through its own `entries()`. */
async function all(log: AuditLog, from?: number): Promise<AuditEntry[]> {
  const out: AuditEntry[] = [];
  for await (const e of log.entries(from === undefined ? undefined : { from })) out.push(e);
  return out;
}

/** Each entry's prev is the previous entry's hash (genesis for seq 1). */
function expectChained(entries: AuditEntry[]): void {
  for (const [k, e] of entries.entries()) {
    const prev = k === 0 ? (e.seq === 1 ? GENESIS_HASH : e.prev) : entries[k - 1]?.hash;
    expect(e.prev, `prev of seq ${e.seq}`).toBe(prev);
    expect(e.hash).toMatch(HEX64);
  }
}

/** Problems with a child's acknowledged appends: each must be in the log once, with its seq and hash. */
function checkAcks(entries: AuditEntry[], c: Child): string[] {
  const bySeq = new Map(entries.map((e) => [e.seq, e]));
  const counts = new Map<number, number>();
  for (const e of entries) {
    const d = e.data as { writer?: string; i?: number } | null;
    if (e.type === 't.write' && d?.writer === c.id && typeof d.i === 'number') counts.set(d.i, (counts.get(d.i) ?? 0) + 1);
  }
  const problems: string[] = [];
  for (const a of c.acks) {
    const e = bySeq.get(a.seq);
    if (!e) problems.push(`${c.id}:${a.i} acknowledged as seq ${a.seq}, which is not in the log`);
    else if (e.hash !== a.hash || e.type !== 't.write' || !sameWrite(e.data, c.id, a.i)) {
      problems.push(`${c.id}:${a.i} acknowledged as seq ${a.seq}, but the log holds ${e.type} ${JSON.stringify(e.data)} there`);
    }
    if (counts.get(a.i) !== 1) problems.push(`${c.id}:${a.i} is in the log ${counts.get(a.i) ?? 0} times`);
  }
  // Unacknowledged entries a killed writer left (durable, ack not yet printed) are allowed, once each.
  for (const [i, n] of counts) if (n > 1) problems.push(`${c.id}:${i} is in the log ${n} times`);
  return [...new Set(problems)];
}

function sameWrite(data: JsonValue, writer: string, i: number): boolean {
  const d = data as { writer?: unknown; i?: unknown } | null;
  return d !== null && typeof d === 'object' && d.writer === writer && d.i === i && Object.keys(d).length === 2;
}

/** Starts a writer process; it is SIGKILLed when the test finishes if still running. */
function spawnChild(spec: ChildOpenSpec, id: string, count: number, window: number): Child {
  const child = spawn(process.execPath, [CHILD, id, String(count), String(window)], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, FORGE_AUDIT_CHILD_OPEN: JSON.stringify(spec) },
  });
  let err = '';
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (s: string) => {
    err += s;
  });
  const acks: Child['acks'] = [];
  let onReady: () => void = () => {};
  const ready = new Promise<void>((resolve) => {
    onReady = resolve;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal }));
  });
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  lines.on('line', (line) => {
    const [word, i, seq, hash] = line.split(' ');
    if (word === 'ready') onReady();
    else if (word === 'ack') acks.push({ i: Number(i), seq: Number(seq), hash: hash as string });
  });
  // A child that dies before it is ready fails the wait with its stderr instead of hanging it.
  const readyOrDead = Promise.race([
    ready,
    exited.then(({ code, signal }) => {
      throw new Error(`writer ${id} exited (code ${code}, signal ${signal}) before it was ready: ${err}`);
    }),
  ]);
  readyOrDead.catch(() => {});
  child.stdin?.on('error', () => {});
  onTestFinished(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  return {
    id,
    process: child,
    acks,
    ready: readyOrDead,
    exited,
    go: () => child.stdin?.end('go\n'),
    stderr: () => err,
  };
}

async function expectCleanExit(c: Child): Promise<void> {
  const { code, signal } = await c.exited;
  if (code !== 0) throw new Error(`writer ${c.id} exited with code ${code} signal ${signal}: ${c.stderr()}`);
}

/** Polls `check` until it gives a value; fails early when the child exits (the timeout only prevents hangs). */
async function waitFor<T>(what: string, check: () => T | undefined, c: Child, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = check();
    if (v !== undefined) return v;
    if (c.process.exitCode !== null) throw new Error(`writer ${c.id} exited while waiting for ${what}: ${c.stderr()}`);
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
