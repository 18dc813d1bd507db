import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { DirLock } from '@forge/audit-chain';
import { killedAfter, scaled, tempDirSync } from '@forge/test-utils';
import { build } from 'tsup';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { openProposalStore } from '../src/proposals.js';
import type { Proposal } from '../src/types.js';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..');

// Child processes are plain node, so they get this module's source built to JS: on its own, not
// the package's dist, which other work in progress (index.ts's other exports) may leave unbuildable.
// Beside node_modules so that `@forge/audit-chain` resolves as it does from dist.
const built = join(pkg, 'node_modules', '.cache', `proposals-test-${process.pid}-${Date.now()}`);
const moduleUrl = pathToFileURL(join(built, 'proposals.js')).href;
beforeAll(async () => {
  await build({
    config: false,
    entry: [join(pkg, 'src', 'proposals.ts')],
    outDir: built,
    format: ['esm'],
    target: 'node20',
    platform: 'node',
    external: ['@forge/audit-chain'],
    dts: false,
    sourcemap: false,
    clean: false,
    silent: true,
  });
}, scaled(120_000));
afterAll(() => {
  rmSync(built, { recursive: true, force: true });
  try {
    rmdirSync(dirname(built)); // only when empty: other users of .cache keep theirs
  } catch {}
});

function tempDir(): string {
  return join(tempDirSync('forge-proposals-'), '.forge', 'toolsmith');
}

function clock(start = Date.parse('2026-01-01T00:00:00Z')) {
  let t = start;
  return () => new Date((t += 1000));
}

function draft(over: Partial<Proposal> = {}) {
  return {
    state: 'pending' as const,
    name: 'alice.csv_sum',
    capability: 'csv_sum',
    persona: 'alice',
    session: 's-1',
    spec: {
      name: 'alice.csv_sum',
      description: 'sums',
      input_schema: { type: 'object' },
      impl: 'x',
      runtime: 'node',
    } as unknown as Proposal['spec'],
    by: 'alice',
    ...over,
  };
}

function mode(path: string): number {
  return statSync(path).mode & 0o777;
}

describe('create, get, list', () => {
  it('creates nothing until the first write, then files 0600 in dirs 0700, and reads them back', async () => {
    const dir = tempDir();
    const store = openProposalStore({ dir, now: clock() });
    expect(await store.list()).toEqual([]);
    expect(await store.get('p-0123456789abcdef')).toBeUndefined();
    expect(existsSync(dir)).toBe(false);

    const p = await store.create(draft());
    expect(p.id).toMatch(/^p-[0-9a-f]{16}$/);
    expect(p).toMatchObject({ state: 'pending', created_at: '2026-01-01T00:00:01.000Z', updated_at: '2026-01-01T00:00:01.000Z' });
    expect(p.history).toEqual([{ state: 'pending', at: '2026-01-01T00:00:01.000Z', by: 'alice' }]);
    expect('by' in p).toBe(false);
    const file = join(dir, 'proposals', `${p.id}.json`);
    expect(mode(file)).toBe(0o600);
    expect(mode(join(dir, 'proposals'))).toBe(0o700);
    expect(mode(dir)).toBe(0o700);
    expect(await store.get(p.id)).toEqual(p);
    expect(await openProposalStore({ dir }).get(p.id)).toEqual(p);
    expect(readdirSync(join(dir, 'proposals'))).toEqual([`${p.id}.json`]);
  });

  it('lists newest first, filtered by one or several states and by name', async () => {
    const store = openProposalStore({ dir: tempDir(), now: clock() });
    const a = await store.create(draft());
    const b = await store.create(draft({ state: 'validated' }));
    const c = await store.create(draft({ name: 'bob.other', state: 'failed' }));
    const d = await store.create(draft());
    const ids = (ps: Proposal[]) => ps.map((p) => p.id);
    expect(ids(await store.list())).toEqual([d.id, c.id, b.id, a.id]);
    expect(ids(await store.list({ state: 'pending' }))).toEqual([d.id, a.id]);
    expect(ids(await store.list({ state: ['validated', 'failed'] }))).toEqual([c.id, b.id]);
    expect(ids(await store.list({ name: 'alice.csv_sum' }))).toEqual([d.id, b.id, a.id]);
    expect(ids(await store.list({ name: 'bob.other', state: 'pending' }))).toEqual([]);
  });

  it('refuses a malformed proposal instead of storing it', async () => {
    const dir = tempDir();
    const store = openProposalStore({ dir });
    await expect(store.create(draft({ state: 'live' as never }))).rejects.toThrow(/"state" "live" is not one of/);
    await expect(store.create(draft({ name: '' }))).rejects.toThrow(/"name" must be a non-empty string/);
    await expect(store.create({ ...draft(), by: '' })).rejects.toThrow(/"by" must be a non-empty string/);
    expect(await store.list()).toEqual([]);
  });
});

describe('transition', () => {
  it('moves only from the given states, appends history, applies the change', async () => {
    const store = openProposalStore({ dir: tempDir(), now: clock() });
    const p = await store.create(draft());
    const wrong = await store.transition(p.id, ['validated'], 'active', { by: 'op' });
    expect(wrong).toMatchObject({ ok: false, kind: 'state_conflict', current: p });
    expect(wrong.ok === false && wrong.message).toBe(
      `proposal ${p.id} is pending (since 2026-01-01T00:00:01.000Z, by alice), not validated; nothing was changed: reload it and decide again`,
    );
    expect(await store.get(p.id)).toEqual(p);

    const v = await store.transition(p.id, ['pending', 'failed'], 'validated', {
      by: 'alice',
      change: () => ({ validation: { ok: true, summary: 'all passed' } as Proposal['validation'] }),
    });
    expect(v.ok).toBe(true);
    const a = await store.transition(p.id, ['validated'], 'active', {
      by: 'op',
      reason: 'looks right',
      change: (cur) => ({
        activated: { version: 1, digest: 'sha256:x', at: '2026-02-01T00:00:00.000Z', by: 'op' },
        capability: `${cur.capability}`,
      }),
    });
    if (!a.ok) throw new Error(a.message);
    expect(a.proposal.history).toEqual([
      { state: 'pending', at: '2026-01-01T00:00:01.000Z', by: 'alice' },
      { state: 'validated', at: '2026-01-01T00:00:02.000Z', by: 'alice' },
      { state: 'active', at: '2026-01-01T00:00:03.000Z', by: 'op', reason: 'looks right' },
    ]);
    expect(a.proposal).toMatchObject({
      state: 'active',
      updated_at: '2026-01-01T00:00:03.000Z',
      created_at: p.created_at,
      validation: { ok: true },
    });
    expect(await store.get(p.id)).toEqual(a.proposal);
    const again = await store.transition(p.id, ['validated'], 'active', { by: 'op2' });
    expect(again.ok === false && again.message).toMatch(/is active \(since 2026-01-01T00:00:03.000Z, by op\)/);
  });

  it('refuses changes to the fields the store owns, and unknown ids', async () => {
    const dir = tempDir();
    const store = openProposalStore({ dir });
    const p = await store.create(draft());
    for (const k of ['id', 'created_at', 'history', 'state', 'updated_at']) {
      await expect(store.transition(p.id, ['pending'], 'validated', { by: 'x', change: () => ({ [k]: 'z' }) })).rejects.toThrow(
        `may not set "${k}"`,
      );
    }
    expect(await store.get(p.id)).toEqual(p);
    expect(await store.transition('p-0000000000000000', ['pending'], 'validated', { by: 'x' })).toMatchObject({
      ok: false,
      kind: 'unknown_proposal',
    });
    expect(readdirSync(join(dir, 'proposals')).filter((f) => f.startsWith('.tmp-'))).toEqual([]);
  });

  it('of 20 concurrent transitions in one process, exactly one wins; the rest see who did', async () => {
    const store = openProposalStore({ dir: tempDir() });
    const p = await store.create(draft({ state: 'validated' }));
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        store.transition(p.id, ['validated'], 'active', { by: `op${i}`, change: () => ({ capability: `won-by-op${i}` }) }),
      ),
    );
    const winners = results.filter((r) => r.ok);
    expect(winners).toHaveLength(1);
    const winner = (winners[0] as { proposal: Proposal }).proposal;
    const by = (winner.history.at(-1) as { by: string }).by;
    expect(winner.capability).toBe(`won-by-${by}`);
    for (const r of results.filter((x) => !x.ok)) expect(r).toMatchObject({ kind: 'state_conflict', current: { state: 'active' } });
    expect((await store.get(p.id))?.history).toHaveLength(2);
  });

  it('waits for a live holder and then fails clearly, naming it; takes over a dead holder at once, and a stale lock of no known holder', async () => {
    const dir = tempDir();
    const store = openProposalStore({ dir, lockWaitMs: 300 });
    const p = await store.create(draft());
    const lockPath = join(dir, 'proposals', `${p.id}.lock`);
    const held = new DirLock(lockPath);
    await held.acquire();
    const err = await store.transition(p.id, ['pending'], 'validated', { by: 'x' }).catch((e: Error & { code?: string }) => e);
    await held.release();
    expect(err).toMatchObject({ code: 'lock_timeout' });
    expect((err as Error).message).toContain(`proposal ${p.id} in ${join(dir, 'proposals')} is locked by another process`);
    expect((err as Error).message).toContain(`held by pid ${process.pid}`);
    expect(await store.get(p.id)).toEqual(p);

    // A holder killed while holding: taken over at once (well within the 300 ms wait, where an
    // mtime-only lock would wait out its 10 s stale period).
    await killedAfter(
      `import { DirLock } from '@forge/audit-chain'; await new DirLock(${JSON.stringify(lockPath)}).acquire(); console.log('held'); setInterval(() => {}, 1000);`,
      'held',
      pkg,
    );
    expect((await store.transition(p.id, ['pending'], 'validated', { by: 'x' })).ok).toBe(true);

    // A lock directory with no owner record (made by hand, or by an older forge) once it is stale.
    mkdirSync(lockPath);
    const old = new Date(Date.now() - 60_000);
    utimesSync(lockPath, old, old);
    expect((await store.transition(p.id, ['validated'], 'failed', { by: 'x' })).ok).toBe(true);
  });
});

describe('ids, claims and bad files', () => {
  it('malformed ids never reach a path', async () => {
    const dir = tempDir();
    const store = openProposalStore({ dir });
    const p = await store.create(draft());
    // What `../x` would name, were it joined into a path: a valid proposal and a claim beside it.
    writeFileSync(join(dir, 'x.json'), JSON.stringify({ ...p, id: '../x' }));
    writeFileSync(join(dir, 'x.claim'), '{}');
    for (const id of ['../x', 'p-zz', `${p.id}/../${p.id}`, p.id.toUpperCase(), `${p.id} `, '']) {
      expect(await store.get(id)).toBeUndefined();
      expect(await store.transition(id, ['pending'], 'validated', { by: 'x' })).toMatchObject({ ok: false, kind: 'unknown_proposal' });
      expect(await store.claim(id, 'op')).toBe(false);
      await store.release(id);
    }
    expect(readdirSync(dir).sort()).toEqual(['proposals', 'x.claim', 'x.json']);
    expect(readdirSync(join(dir, 'proposals'))).toEqual([`${p.id}.json`]);
  });

  it('claims once, for ever: a second store and a crashed claimer still give false; release allows one more', async () => {
    const dir = tempDir();
    const store = openProposalStore({ dir, now: clock() });
    const p = await store.create(draft({ state: 'validated' }));
    expect(await store.claim('p-0000000000000000', 'op')).toBe(false);
    expect(await store.claim(p.id, 'op1')).toBe(true);
    expect(await store.claim(p.id, 'op2')).toBe(false);
    const claimFile = join(dir, 'proposals', `${p.id}.claim`);
    expect(JSON.parse(readFileSync(claimFile, 'utf8'))).toEqual({ by: 'op1', at: '2026-01-01T00:00:02.000Z' });
    expect(mode(claimFile)).toBe(0o600);
    expect(await openProposalStore({ dir }).claim(p.id, 'op3')).toBe(false);
    await store.release(p.id);
    await store.release(p.id);
    expect(await openProposalStore({ dir }).claim(p.id, 'op4')).toBe(true);
    expect(await store.claim(p.id, 'op5')).toBe(false);
    // The claim is a file, not a lock: it outlives its process.
    const q = await store.create(draft({ state: 'validated' }));
    const child = `const { openProposalStore } = await import(${JSON.stringify(moduleUrl)});
      const ok = await openProposalStore({ dir: process.argv[2] }).claim(process.argv[3], 'doomed');
      process.stdout.write(String(ok)); process.kill(process.pid, 'SIGKILL');`;
    const script = join(dir, '..', 'crash.mjs');
    writeFileSync(script, child);
    let out = '';
    try {
      execFileSync(process.execPath, [script, dir, q.id], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
    } catch (err) {
      out = (err as { stdout: string; signal: string }).stdout;
      expect((err as { signal: string }).signal).toBe('SIGKILL');
    }
    expect(out).toBe('true');
    expect(await openProposalStore({ dir }).claim(q.id, 'op')).toBe(false);
  });

  it('skips and reports torn, mismatched, oversized, inconsistent and misnamed files', async () => {
    const dir = tempDir();
    const problems: [string, string][] = [];
    const store = openProposalStore({ dir, onProblem: (f, r) => problems.push([f.slice(dir.length + 1), r]) });
    const good = await store.create(draft());
    const text = readFileSync(join(dir, 'proposals', `${good.id}.json`), 'utf8');
    const put = (name: string, body: string) => writeFileSync(join(dir, 'proposals', name), body);
    put('p-1111111111111111.json', text.slice(0, 40));
    put('p-2222222222222222.json', text);
    put('p-3333333333333333.json', JSON.stringify({ ...good, id: 'p-3333333333333333', state: 'live' }));
    put('p-4444444444444444.json', JSON.stringify({ ...good, id: 'p-4444444444444444', state: 'active' }));
    const big = `${JSON.stringify({ ...good, id: 'p-5555555555555555' })}${' '.repeat(4 * 1024 * 1024)}`;
    put('p-5555555555555555.json', big);
    put('notes.json', '{}');
    put('.tmp-1-abc', 'partial');
    expect((await store.list()).map((p) => p.id)).toEqual([good.id]);
    expect(problems.sort()).toEqual([
      ['proposals/notes.json', 'not a proposal file name (p- and 16 hex digits, .json)'],
      ['proposals/p-1111111111111111.json', expect.stringMatching(/^not valid JSON \(a torn or hand-edited file\?\)/)],
      ['proposals/p-2222222222222222.json', `"id" "${good.id}" does not match the file name p-2222222222222222.json`],
      ['proposals/p-3333333333333333.json', expect.stringMatching(/^"state" "live" is not one of pending, validated/)],
      ['proposals/p-4444444444444444.json', '"state" is active but the last history entry says pending'],
      ['proposals/p-5555555555555555.json', `the file is ${Buffer.byteLength(big)} bytes; a proposal file is at most 4194304`],
    ]);
    expect(problems.length).toBe(6);
    problems.length = 0;
    expect(await store.get('p-1111111111111111')).toBeUndefined();
    expect(problems.map((p) => p[0])).toEqual(['proposals/p-1111111111111111.json']);
  });

  it('lineage: active and retired of one name by activation time, leaving out any never activated', async () => {
    const dir = tempDir();
    const problems: string[] = [];
    const store = openProposalStore({ dir, now: clock(), onProblem: (_f, r) => problems.push(r) });
    const activate = async (p: Proposal, at: string) => {
      const r = await store.transition(p.id, ['validated'], 'active', {
        by: 'op',
        change: () => ({ activated: { version: 1, digest: 'd', at, by: 'op' } }),
      });
      if (!r.ok) throw new Error(r.message);
    };
    const v1 = await store.create(draft({ state: 'validated' }));
    const v2 = await store.create(draft({ state: 'validated' }));
    await activate(v2, '2026-03-01T00:00:00.000Z');
    await activate(v1, '2026-03-02T00:00:00.000Z');
    await store.transition(v2.id, ['active'], 'retired', { by: 'op' });
    const other = await store.create(draft({ state: 'validated', name: 'bob.x' }));
    await activate(other, '2026-03-03T00:00:00.000Z');
    await store.create(draft({ state: 'pending' }));
    // Created straight into `active` (as a hand edit would leave it): never activated.
    const forged = await store.create(draft({ state: 'active' }));
    expect((await store.lineage('alice.csv_sum')).map((p) => [p.id, p.state])).toEqual([
      [v1.id, 'active'],
      [v2.id, 'retired'],
    ]);
    expect(problems).toEqual([`active but never activated (no "activated" record): left out of the lineage of alice.csv_sum`]);
    expect(forged.state).toBe('active');
  });
});

describe('across processes', () => {
  let scratch: string;
  beforeAll(() => {
    scratch = mkdtempSync(join(tmpdir(), 'forge-proposals-procs-'));
  });
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it('4 node processes racing on 8 proposals: for each, exactly one claim and one activation win', async () => {
    const dir = join(scratch, 'race');
    const store = openProposalStore({ dir });
    const ids: string[] = [];
    for (let i = 0; i < 8; i++) ids.push((await store.create(draft({ state: 'validated' }))).id);
    const script = join(scratch, 'racer.mjs');
    writeFileSync(
      script,
      `const { openProposalStore } = await import(${JSON.stringify(moduleUrl)});
      const [dir, me, ...ids] = process.argv.slice(2);
      const store = openProposalStore({ dir });
      process.stdout.write('ready\\n');
      await new Promise((resolve) => process.stdin.once('data', resolve));
      const out = await Promise.all(ids.map(async (id) => {
        const claimed = await store.claim(id, me);
        const r = await store.transition(id, ['validated'], 'active', { by: me, change: () => ({ capability: 'won-by-' + me }) });
        return { id, claimed, ok: r.ok, kind: r.ok ? undefined : r.kind, state: r.ok ? r.proposal.state : r.current?.state };
      }));
      process.stdout.write(JSON.stringify(out) + '\\n');
      process.stdin.destroy();`,
    );
    const children: ChildProcess[] = [];
    onTestFinished(() => {
      for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    });
    const outputs = await new Promise<string[]>((resolve, reject) => {
      const texts: string[] = [];
      let ready = 0;
      let done = 0;
      for (let i = 0; i < 4; i++) {
        const c = spawn(process.execPath, [script, dir, `proc${i}`, ...ids], { stdio: ['pipe', 'pipe', 'inherit'] });
        children.push(c);
        texts[i] = '';
        c.stdout?.on('data', (b: Buffer) => {
          const before = texts[i] as string;
          texts[i] = before + b.toString();
          if (!before.includes('ready\n') && (texts[i] as string).includes('ready\n') && ++ready === 4) {
            for (const k of children) k.stdin?.write('go\n');
          }
        });
        c.on('error', reject);
        c.on('exit', (code) => {
          if (code !== 0) reject(new Error(`child ${i} exited with ${code}: ${texts[i]}`));
          else if (++done === 4) resolve(texts);
        });
      }
    });
    type Row = { id: string; claimed: boolean; ok: boolean; kind?: string; state?: string };
    const rows: Row[] = outputs.flatMap((t) => JSON.parse(t.split('\n')[1] as string) as Row[]);
    for (const id of ids) {
      const mine = rows.filter((r) => r.id === id);
      expect(mine).toHaveLength(4);
      expect(mine.filter((r) => r.claimed)).toHaveLength(1);
      expect(mine.filter((r) => r.ok)).toHaveLength(1);
      for (const r of mine.filter((x) => !x.ok)) expect(r).toMatchObject({ kind: 'state_conflict', state: 'active' });
      const final = (await store.get(id)) as Proposal;
      expect(final.history.map((e) => e.state)).toEqual(['validated', 'active']);
      expect(final.capability).toBe(`won-by-${(final.history[1] as { by: string }).by}`);
    }
    expect(readdirSync(join(dir, 'proposals')).filter((f) => !f.endsWith('.json') && !f.endsWith('.claim'))).toEqual([]);
  });
});
