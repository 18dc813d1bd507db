import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { GapRecord, GapStore } from '../../toolsmith/src/index.js';
import type { ChildOpen } from './registry.js';
import { tempDir } from './temp.js';
import { killSettled, type Settles } from './until.js';

/** How the suite opens a gap store: the bound and the clock (the implementation's defaults otherwise). */
export interface GapStoreOpenOptions {
  maxRecords?: number;
  now?: () => number;
  onError?: (err: Error) => void;
}

/** One test's storage, fresh and empty, as an implementation gives it to {@link describeGapStore}. */
export interface GapStoreHarness extends Settles {
  /** A new store object over this storage (each call a separate writer; every one sees the same records). */
  open(options?: GapStoreOpenOptions): Promise<GapStore>;
  /**
   * How a child process opens the same storage: `await (await import(module))[export](...args, options)`
   * with `options` = `{maxRecords}` (JSON).
   */
  child: ChildOpen;
  /** Damages the storage as a crash or a hand edit would (a torn record, one that is not a record, one not JSON). */
  corrupt(): Promise<void>;
  /** Releases what `open` opened and removes the storage. */
  cleanup(): Promise<void>;
}

const CHILD = new URL('./toolsmith-child.mjs', import.meta.url).pathname;

/** What a child printed and how it ended. */
export interface ChildEnd {
  code: number | null;
  signal: NodeJS.Signals | null;
  out: unknown[];
  err: string;
}

/** A running child of the toolsmith suites (src/toolsmith-child.mjs), killed when the test ends. */
export interface ToolsmithChild {
  process: ChildProcess;
  /** Resolves when the child has printed `line` (JSON), rejects when it exits first. */
  printed(line: unknown): Promise<void>;
  exit: Promise<ChildEnd>;
}

/** Starts the child of the toolsmith suites with `args` (see src/toolsmith-child.mjs). */
export function spawnToolsmithChild(args: Record<string, unknown>): ToolsmithChild {
  const child = spawn(process.execPath, [CHILD, JSON.stringify(args)], { stdio: ['ignore', 'pipe', 'pipe'] });
  const out: unknown[] = [];
  let err = '';
  const waiters: { line: string; resolve: () => void; reject: (e: Error) => void }[] = [];
  child.stderr?.setEncoding('utf8').on('data', (s: string) => (err += s));
  createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
    if (line.trim() === '') return;
    out.push(JSON.parse(line));
    for (const w of waiters.filter((w) => w.line === line.trim())) w.resolve();
  });
  const exit = new Promise<ChildEnd>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      for (const w of waiters) w.reject(new Error(`child exited (${code ?? signal}) before printing ${w.line}: ${err}`));
      resolve({ code, signal, out, err });
    });
  });
  onTestFinished(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return {
    process: child,
    exit,
    printed: (line) =>
      new Promise<void>((resolve, reject) => {
        const text = JSON.stringify(line);
        if (out.some((o) => JSON.stringify(o) === text)) resolve();
        else waiters.push({ line: text, resolve, reject });
      }),
  };
}

/** Runs a child to completion: its last JSON line, or an error with its stderr. */
export async function toolsmithChildResult(args: Record<string, unknown>): Promise<unknown> {
  const r = await spawnToolsmithChild(args).exit;
  if (r.code !== 0) throw new Error(`child exited with ${r.code ?? r.signal}: ${r.err}`);
  return r.out.at(-1);
}

/** A start barrier (a path in a temp dir removed when the test ends) and how to release `n` children waiting at it. */
export function startBarrier(): { go: string; release(n: number): Promise<void> } {
  const dir = tempDir('forge-conf-barrier-');
  onTestFinished(() => dir.remove());
  const go = join(dir.path, 'go');
  return {
    go,
    async release(n) {
      const prefix = `${basename(go)}.ready.`;
      for (let i = 0; ; i++) {
        const ready = (await readdir(dirname(go))).filter((f) => f.startsWith(prefix)).length;
        if (ready >= n) break;
        if (i > 6000) throw new Error(`only ${ready} of ${n} children reached the start barrier in 60 s`);
        await new Promise((r) => setTimeout(r, 10));
      }
      writeFileSync(go, '');
    },
  };
}

/** The error `f` throws or rejects with (undefined when it does neither). */
async function failure(f: () => unknown): Promise<(Error & { code?: string; field?: string }) | undefined> {
  try {
    await f();
  } catch (err) {
    return err as Error;
  }
  return undefined;
}

function obs(signature: string, at: number, extra: Partial<GapRecord> = {}): Omit<GapRecord, 'at'> & { at?: number } {
  return { kind: 'missing_tool', signature, source: 'forge_request', persona: 'agent', session: 's-1', at, ...extra };
}

/** What the topics of the suite share. */
interface GapSuite {
  /** Fresh storage for the current test; every store opened on it is closed, and it is removed, after the test. */
  fresh(): Promise<GapStoreHarness>;
}

/**
 * Declares the conformance suite of a gap store (`GapStore` of @forge/toolsmith): behaviour
 * (sanitising, summary, history, the ring's bound, close), many processes writing at once,
 * kill -9 of a writer mid-write, damaged storage and bad input. `factory` makes fresh, empty
 * storage for each test; the suite closes every store it opened, then calls `cleanup()`.
 * Child processes run src/toolsmith-child.mjs against `child` (built code: plain node).
 */
export function describeGapStore(label: string, factory: () => Promise<GapStoreHarness>): void {
  const suite: GapSuite = {
    async fresh() {
      const h = await factory();
      const stores: GapStore[] = [];
      onTestFinished(async () => {
        await Promise.allSettled(stores.map((s) => s.close()));
        await h.cleanup();
      });
      return {
        ...h,
        async open(options) {
          const s = await h.open(options);
          stores.push(s);
          return s;
        },
      };
    },
  };
  describe(`gap store conformance: ${label}`, () => {
    describe('behaviour', () => gapStoreBehaviour(suite));
    describe('bad input', () => gapStoreBadInput(suite));
    describe('many processes', () => gapStoreManyProcesses(suite));
    describe('crash safety', () => gapStoreCrashSafety(suite));
  });
}

/** One process: record, note, summary, history, the ring's bound and close. */
function gapStoreBehaviour({ fresh }: GapSuite): void {
  it('an empty store summarises to nothing and has no history', async () => {
    const h = await fresh();
    const s = await h.open();
    expect(await s.summary({ threshold: 1, windowMs: 1000, now: 5000 })).toEqual([]);
    expect(await s.history('missing_tool', 'a.b')).toEqual([]);
    await s.flush();
  });

  it('record keeps the sanitised record: fields in a fixed order, unknown dropped, signature trimmed, text cut; at from the clock', async () => {
    const h = await fresh();
    const s = await h.open({ now: () => 4242 });
    await s.record({
      asked: 'x'.repeat(300),
      session: 's-9',
      persona: 'agent',
      source: 'unknown_tool',
      signature: '  text.upper  ',
      kind: 'missing_tool',
      description: 'y'.repeat(1200),
      example_inputs: [{ a: 1 }, 'b', { big: 'z'.repeat(5000) }, 3, 4, 5, 6],
      extra: 'dropped',
    } as never);
    const [r] = await s.history('missing_tool', 'text.upper');
    expect(JSON.stringify(r)).toBe(
      JSON.stringify({
        kind: 'missing_tool',
        signature: 'text.upper',
        source: 'unknown_tool',
        at: 4242,
        persona: 'agent',
        session: 's-9',
        description: 'y'.repeat(1000),
        example_inputs: [{ a: 1 }, 'b', 3, 4, 5],
        asked: 'x'.repeat(256),
      }),
    );
  });

  it('summary counts inside the window, keeps totals over every record, and orders qualifying, count, latest, name', async () => {
    const h = await fresh();
    const s = await h.open();
    await s.record(obs('a.one', 100, { persona: 'p2', description: 'old' }));
    await s.record(obs('a.one', 900, { persona: 'p1', source: 'unknown_tool' }));
    await s.record(obs('a.one', 950, { description: 'new' }));
    await s.record(obs('b.two', 960));
    await s.record(obs('c.three', 970));
    await s.record(obs('c.three', 980));
    await s.record({ ...obs('ghost', 990), kind: 'service_absent', source: 'gateway' });
    const rows = await s.summary({ threshold: 2, windowMs: 200, now: 1000 });
    expect(rows.map((r) => [r.kind, r.signature, r.count, r.total, r.qualifies])).toEqual([
      ['missing_tool', 'c.three', 2, 2, true],
      ['missing_tool', 'a.one', 2, 3, true],
      ['service_absent', 'ghost', 1, 1, false],
      ['missing_tool', 'b.two', 1, 1, false],
    ]);
    expect(rows[1]).toEqual({
      kind: 'missing_tool',
      signature: 'a.one',
      count: 2,
      total: 3,
      first_at: 100,
      last_at: 950,
      personas: ['agent', 'p1', 'p2'],
      sources: ['forge_request', 'unknown_tool'],
      description: 'new',
      qualifies: true,
    });
    expect(await s.summary({ threshold: 1, windowMs: 0, now: 1000, only: { kind: 'missing_tool', signature: 'b.two' } })).toEqual([
      expect.objectContaining({ signature: 'b.two', count: 0, total: 1, qualifies: false }),
    ]);
    expect(await s.summary({ threshold: 1, windowMs: 10, only: { kind: 'service_absent', signature: 'a.one' } })).toEqual([]);
  });

  it('records are durable: a store opened afterwards (and one open at the same time) sees them, in order', async () => {
    const h = await fresh();
    const a = await h.open();
    const b = await h.open();
    for (let i = 0; i < 5; i++) await a.record(obs('d.dur', i, { session: `s-${i}` }));
    await a.close();
    const c = await h.open();
    for (const s of [b, c])
      expect((await s.history('missing_tool', 'd.dur')).map((r) => r.session)).toEqual(['s-0', 's-1', 's-2', 's-3', 's-4']);
  });

  it('concurrent records of one process all land (one batch or many)', async () => {
    const h = await fresh();
    const s = await h.open();
    await Promise.all(Array.from({ length: 100 }, (_, i) => s.record(obs('e.many', i, { session: `s-${i}` }))));
    const held = await s.history('missing_tool', 'e.many');
    expect(held.map((r) => r.session).sort()).toEqual(Array.from({ length: 100 }, (_, i) => `s-${i}`).sort());
  });

  it('note records without waiting; flush waits for it; a bad note goes to onError and throws nothing', async () => {
    const h = await fresh();
    const errors: Error[] = [];
    const s = await h.open({ onError: (e) => errors.push(e) });
    expect(s.note(obs('f.note', 1))).toBeUndefined();
    expect(() => s.note({ ...obs('f.note', 2), kind: 'nope' as never })).not.toThrow();
    await s.flush();
    expect(await s.history('missing_tool', 'f.note')).toHaveLength(1);
    expect(errors.map((e) => (e as { code?: string }).code)).toEqual(['invalid_record']);
  });

  it('holds at most maxRecords, dropping the oldest first', async () => {
    const h = await fresh();
    const s = await h.open({ maxRecords: 5 });
    for (let i = 0; i < 12; i++) await s.record(obs('g.ring', i, { session: `s-${i}` }));
    expect((await s.history('missing_tool', 'g.ring')).map((r) => r.session)).toEqual(['s-7', 's-8', 's-9', 's-10', 's-11']);
    const again = await h.open({ maxRecords: 5 });
    expect((await again.summary({ threshold: 1, windowMs: 100, now: 11 }))[0]).toMatchObject({ total: 5, first_at: 7 });
  });

  it('after close, record rejects with closed', async () => {
    const h = await fresh();
    const s = await h.open();
    await s.record(obs('h.closed', 1));
    await s.close();
    expect((await failure(() => s.record(obs('h.closed', 2))))?.code).toBe('closed');
  });
}

/** Malformed observations and summary options, and damaged storage. */
function gapStoreBadInput({ fresh }: GapSuite): void {
  it('refuses a malformed observation with invalid_record naming the field, and stores nothing', async () => {
    const h = await fresh();
    const s = await h.open();
    // Not an object at all (a caller outside the types): refused, whichever way.
    for (const input of [null, [], 'text', 7]) expect(await failure(() => s.record(input as never))).toBeInstanceOf(Error);
    const cases: [unknown, string][] = [
      [{ ...obs('x.y', 1), kind: 'other' }, 'kind'],
      [{ ...obs('x.y', 1), source: 'elsewhere' }, 'source'],
      [{ ...obs('x.y', 1), signature: '   ' }, 'signature'],
      [{ ...obs('x.y', 1), signature: 'z'.repeat(129) }, 'signature'],
      [{ ...obs('x.y', 1), at: -1 }, 'at'],
      [{ ...obs('x.y', 1), at: Number.NaN }, 'at'],
      [{ ...obs('x.y', 1), persona: 'p'.repeat(65) }, 'persona'],
      [{ ...obs('x.y', 1), session: 7 }, 'session'],
      [{ ...obs('x.y', 1), description: 5 }, 'description'],
      [{ ...obs('x.y', 1), example_inputs: 'no' }, 'example_inputs'],
      [{ ...obs('x.y', 1), asked: {} }, 'asked'],
    ];
    for (const [input, field] of cases) {
      const err = await failure(() => s.record(input as never));
      expect([err?.code, err?.field]).toEqual(['invalid_record', field]);
    }
    await s.flush();
    expect(await s.summary({ threshold: 1, windowMs: 10 })).toEqual([]);
  });

  it('summary refuses a threshold below 1 or a negative window with a RangeError', async () => {
    const h = await fresh();
    const s = await h.open();
    expect(await failure(() => s.summary({ threshold: 0, windowMs: 10 }))).toBeInstanceOf(RangeError);
    expect(await failure(() => s.summary({ threshold: 1, windowMs: -1 }))).toBeInstanceOf(RangeError);
  });

  it('damaged storage is skipped, never returned; later records land and read whole', async () => {
    const h = await fresh();
    const s = await h.open();
    await s.record(obs('i.before', 1));
    await h.corrupt();
    await s.record(obs('i.after', 2));
    const other = await h.open();
    for (const store of [s, other]) {
      const rows = await store.summary({ threshold: 1, windowMs: 10, now: 5 });
      expect(rows.map((r) => r.signature).sort()).toEqual(['i.after', 'i.before']);
    }
  });
}

/** Writer processes recording at once, within the bound and beyond it. */
function gapStoreManyProcesses({ fresh }: GapSuite): void {
  it('6 processes × 40 records at once: every record is held, whole, each writer in its order', async () => {
    const h = await fresh();
    const barrier = startBarrier();
    const runs = Array.from({ length: 6 }, (_, w) =>
      toolsmithChildResult({ open: h.child, options: { maxRecords: 1000 }, go: barrier.go, op: 'gaps', tag: `w${w}`, n: 40 }),
    );
    await barrier.release(6);
    expect(await Promise.all(runs)).toEqual(Array.from({ length: 6 }, () => ({ written: 40 })));
    const s = await h.open({ maxRecords: 1000 });
    for (let w = 0; w < 6; w++) {
      const held = await s.history('missing_tool', `w${w}`);
      expect(held.map((r) => r.session)).toEqual(Array.from({ length: 40 }, (_, i) => `w${w}-${i}`));
      for (const r of held) expect(r.description).toBe(`${r.session?.replace('-', ':')}:${'d'.repeat(200)}`);
    }
  });

  it('beyond the bound: exactly maxRecords held, and each writer keeps a suffix of what it wrote (oldest dropped first)', async () => {
    const h = await fresh();
    const barrier = startBarrier();
    const runs = Array.from({ length: 4 }, (_, w) =>
      toolsmithChildResult({ open: h.child, options: { maxRecords: 50 }, go: barrier.go, op: 'gaps', tag: `b${w}`, n: 30 }),
    );
    await barrier.release(4);
    await Promise.all(runs);
    const s = await h.open({ maxRecords: 50 });
    let total = 0;
    for (let w = 0; w < 4; w++) {
      const held = (await s.history('missing_tool', `b${w}`)).map((r) => Number(r.session.split('-')[1]));
      total += held.length;
      if (held.length > 0) expect(held).toEqual(Array.from({ length: held.length }, (_, k) => 30 - held.length + k));
    }
    expect(total).toBe(50);
  });
}

/** A writer process killed -9 mid-write. */
function gapStoreCrashSafety({ fresh }: GapSuite): void {
  it('a writer killed -9 mid-write leaves no torn record; every record acknowledged before is kept; writing goes on', async () => {
    const h = await fresh();
    const child = spawnToolsmithChild({ open: h.child, options: { maxRecords: 100_000 }, op: 'gapsSpin', tag: 'k9' });
    await child.printed('started');
    await new Promise((r) => setTimeout(r, 150));
    await killSettled(h, async () => {
      child.process.kill('SIGKILL');
      expect((await child.exit).signal).toBe('SIGKILL');
    });
    const s = await h.open({ maxRecords: 100_000 });
    await s.record(obs('k9', 1, { session: 'after' }));
    const held = await s.history('missing_tool', 'k9');
    expect(held.length).toBeGreaterThanOrEqual(2);
    expect(held.map((r) => r.session)).toContain('k9-0');
    expect(held.at(-1)?.session).toBe('after');
    for (const r of held.slice(0, -1)) expect(r.description).toBe(`${r.session.replace('-', ':')}:${'d'.repeat(200)}`);
    const again = await h.open({ maxRecords: 100_000 });
    expect(await again.history('missing_tool', 'k9')).toEqual(held);
  });
}
