import { randomBytes } from 'node:crypto';
import { mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { kill9, runStoreChild, type StoreChildOpen, startStoreChild, startTogether } from './children.js';
import { tempDir } from './temp.js';

/** An artifact as a run store lists it (structurally the runner's `StoredArtifact`). */
export interface ListedArtifact {
  path: string;
  bytes: number;
  kind: 'file' | 'directory' | 'symlink' | 'other';
  sha256?: string;
  mime_type?: string;
  bytes_kept?: 'store' | 'worker';
  host?: string;
  worker_path?: string;
}

/** What reading an artifact gave (structurally the runner's `ArtifactBytes`). */
export type ReadBytes = { ok: true; bytes: Buffer } | { ok: false; problem: string; at: string; size?: number; message?: string };

/** The store under test (structurally `RunStore` of @forge/runner; see its contract there). */
export interface RunStoreUnderTest {
  readonly kind: string;
  readonly where: string;
  writeManifest(runId: string, manifest: Record<string, unknown>, options?: { runDir?: string }): Promise<void>;
  appendHit(record: Record<string, unknown> & { run_id: string }): Promise<void>;
  readManifest(runId: string): Promise<{ kind: 'run' | 'hit'; manifest: Record<string, unknown> } | undefined>;
  listArtifacts(runId: string, max?: number): Promise<ListedArtifact[]>;
  readArtifact(runId: string, path: string, maxBytes: number): Promise<ReadBytes>;
}

/** One test's storage, fresh and empty, as an implementation gives it to {@link describeRunStore}. */
export interface RunStoreHarness {
  /** A store over this storage (each call a new store object, as a new process would open it). */
  open(): Promise<RunStoreUnderTest>;
  /**
   * The directory of run `runId` on this host, made, with an empty `artifacts/` in it: where the
   * sandbox writes, and what `writeManifest` is given as `runDir`.
   */
  runDir(runId: string): Promise<string>;
  /** How a child process opens a store over the same storage. */
  child: StoreChildOpen;
  /** Releases everything `open` opened and removes the storage. */
  cleanup(): Promise<void>;
}

const tag = randomBytes(4).toString('hex');
let counter = 0;
/** A fresh run id of the runner's grammar (time, a dash, 8 hex digits, a counter). */
export function runIdOf(): string {
  return `${Date.now().toString(36)}-${tag}${(++counter).toString(36).padStart(4, '0')}`;
}

/** What the topics of the suite share. */
interface RunSuite {
  /** Fresh, empty storage for the current test, removed after it. */
  fresh(): Promise<RunStoreHarness>;
}

/**
 * The run store conformance suite: every implementation of the runner's `RunStore` runs it (the
 * file store in packages/conformance/test, PostgreSQL in packages/postgres/test). Behaviour
 * (manifests written, replaced and read; hit records; artifacts listed and read, links never
 * followed, read caps), many processes writing at once, kill -9 of a writer in the middle of its
 * writes (no torn manifest), and bad input (malformed run ids and paths).
 */
export function describeRunStore(label: string, factory: () => Promise<RunStoreHarness>): void {
  const suite: RunSuite = {
    async fresh() {
      const h = await factory();
      onTestFinished(() => h.cleanup());
      return h;
    },
  };
  describe(`RunStore conformance: ${label}`, () => {
    runStoreManifests(suite);
    runStoreArtifacts(suite);
    runStoreBadInput(suite);
    runStoreAcrossProcesses(suite);
  });
}

/** Writes `manifest` for a run with `files` (path → content) among its artifacts. */
async function writeRun(
  h: RunStoreHarness,
  store: RunStoreUnderTest,
  id: string,
  manifest: Record<string, unknown>,
  files: Record<string, string | Buffer> = {},
): Promise<string> {
  const dir = await h.runDir(id);
  for (const [p, content] of Object.entries(files)) {
    await mkdir(join(dir, 'artifacts', p, '..'), { recursive: true });
    await writeFile(join(dir, 'artifacts', p), content);
  }
  await store.writeManifest(id, manifest, { runDir: dir });
  return dir;
}

/** Manifests written, replaced and read, and hit records. */
function runStoreManifests({ fresh }: RunSuite): void {
  it('a manifest reads back as written (kind run); a run never written is undefined', async () => {
    const h = await fresh();
    const store = await h.open();
    const id = runIdOf();
    const manifest = { run_id: id, persona: 'alice', tool: { name: 'fib', version: 1 }, input: { n: 20, s: 'é ✓' }, ok: true };
    await writeRun(h, store, id, manifest);
    expect(await store.readManifest(id)).toEqual({ kind: 'run', manifest });
    expect(await (await h.open()).readManifest(id)).toEqual({ kind: 'run', manifest });
    expect(await store.readManifest(runIdOf())).toBeUndefined();
    expect(typeof store.kind).toBe('string');
  });

  it('writing a manifest again replaces it (the run that could not be audited says why)', async () => {
    const h = await fresh();
    const store = await h.open();
    const id = runIdOf();
    const dir = await writeRun(h, store, id, { run_id: id, persona: 'p', ok: true }, { 'a.txt': 'A' });
    await store.writeManifest(id, { run_id: id, persona: 'p', ok: true, answered: 'audit_unavailable' }, { runDir: dir });
    expect((await store.readManifest(id))?.manifest).toEqual({ run_id: id, persona: 'p', ok: true, answered: 'audit_unavailable' });
    expect((await store.listArtifacts(id)).map((a) => a.path)).toEqual(['a.txt']);
  });

  it('a hit record reads back as kind hit; many appended in one turn all do', async () => {
    const h = await fresh();
    const store = await h.open();
    const seed = runIdOf();
    await writeRun(h, store, seed, { run_id: seed, persona: 'p' });
    const ids = Array.from({ length: 50 }, () => runIdOf());
    await Promise.all(ids.map((id, i) => store.appendHit({ run_id: id, seed_run: seed, persona: 'p', i, cache: 'hit' })));
    const later = await h.open();
    for (const [i, id] of ids.entries())
      expect(await later.readManifest(id)).toEqual({
        kind: 'hit',
        manifest: { run_id: id, seed_run: seed, persona: 'p', i, cache: 'hit' },
      });
    expect(await later.listArtifacts(ids[0] as string)).toEqual([]);
  });
}

/** Artifacts listed and read, read caps, links never followed. */
function runStoreArtifacts({ fresh }: RunSuite): void {
  it('artifacts: listed with their sizes, read byte for byte, capped, missing ones named', async () => {
    const h = await fresh();
    const store = await h.open();
    const id = runIdOf();
    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 1, 2, 3, 255]);
    await writeRun(
      h,
      store,
      id,
      { run_id: id, persona: 'p' },
      { 'plot.png': png, 'out/notes.txt': 'notes\n', 'out/deep/x.bin': 'x'.repeat(5000) },
    );
    const listed = await (await h.open()).listArtifacts(id);
    expect(listed.map(({ path, bytes, kind }) => ({ path, bytes, kind }))).toEqual([
      { path: 'out', bytes: 0, kind: 'directory' },
      { path: 'out/deep', bytes: 0, kind: 'directory' },
      { path: 'out/deep/x.bin', bytes: 5000, kind: 'file' },
      { path: 'out/notes.txt', bytes: 6, kind: 'file' },
      { path: 'plot.png', bytes: 13, kind: 'file' },
    ]);
    const reader = await h.open();
    expect(await reader.readArtifact(id, 'plot.png', 1 << 20)).toEqual({ ok: true, bytes: png });
    expect(await reader.readArtifact(id, 'out/notes.txt', 6)).toEqual({ ok: true, bytes: Buffer.from('notes\n') });
    expect(await reader.readArtifact(id, 'out/deep/x.bin', 4999)).toMatchObject({ ok: false, problem: 'too_large', size: 5000 });
    expect(await reader.readArtifact(id, 'nope.txt', 100)).toMatchObject({ ok: false, problem: 'missing' });
    expect(await reader.readArtifact(id, 'out', 100)).toMatchObject({ ok: false });
    expect(await reader.readArtifact(id, 'out/notes.txt/x', 100)).toMatchObject({ ok: false, problem: 'not_directory' });
    expect(await reader.readArtifact(runIdOf(), 'plot.png', 100)).toMatchObject({ ok: false, problem: 'missing' });
    expect(await reader.listArtifacts(runIdOf())).toEqual([]);
    expect((await reader.listArtifacts(id, 2)).length).toBe(2);
  });

  it('a symbolic link among the artifacts is listed as one and never followed', async () => {
    const h = await fresh();
    const store = await h.open();
    const id = runIdOf();
    const dir = await h.runDir(id);
    await writeFile(join(dir, 'artifacts', 'real.txt'), 'real');
    await symlink('/etc/passwd', join(dir, 'artifacts', 'passwd'));
    await symlink('real.txt', join(dir, 'artifacts', 'alias'));
    await store.writeManifest(id, { run_id: id, persona: 'p' }, { runDir: dir });
    const listed = await store.listArtifacts(id);
    expect(listed.find((a) => a.path === 'passwd')?.kind).toBe('symlink');
    expect(listed.find((a) => a.path === 'alias')?.kind).toBe('symlink');
    expect(await store.readArtifact(id, 'passwd', 1 << 20)).toMatchObject({ ok: false, problem: 'symlink' });
    expect(await store.readArtifact(id, 'alias', 1 << 20)).toMatchObject({ ok: false, problem: 'symlink' });
    expect(await store.readArtifact(id, 'real.txt', 1 << 20)).toEqual({ ok: true, bytes: Buffer.from('real') });
  });
}

/** Malformed run ids. */
function runStoreBadInput({ fresh }: RunSuite): void {
  it('bad input: writes with a malformed run id throw a TypeError, reads of one find nothing', async () => {
    const h = await fresh();
    const store = await h.open();
    for (const bad of ['', 'nope', '../x', 'lz0000a-0f3a9c1e', `${runIdOf()}/..`, 'ZZZ-0f3a9c1e0001']) {
      await expect(store.writeManifest(bad, { run_id: bad })).rejects.toThrow(TypeError);
      await expect(store.appendHit({ run_id: bad })).rejects.toThrow(/not a forge run id/);
      expect(await store.readManifest(bad)).toBeUndefined();
      expect(await store.listArtifacts(bad)).toEqual([]);
      expect(await store.readArtifact(bad, 'a.txt', 10)).toMatchObject({ ok: false });
    }
  });
}

/** Writer processes at once, and a writer killed -9 in the middle of its rewrites. */
function runStoreAcrossProcesses({ fresh }: RunSuite): void {
  it('4 processes writing 20 runs and 20 hits each at once: every record is there, whole', async () => {
    const h = await fresh();
    const barrier = tempDir('forge-conf-runs-');
    onTestFinished(() => barrier.remove());
    const go = join(barrier.path, 'go');
    const plan = [0, 1, 2, 3].map(() => ({
      ids: Array.from({ length: 20 }, () => runIdOf()),
      hitIds: Array.from({ length: 20 }, () => runIdOf()),
    }));
    for (const p of plan) for (const id of p.ids) await h.runDir(id);
    const runs = plan.map((p) => runStoreChild(h.child, { op: 'runWriteMany', ...p, pad: 3000, go }));
    await startTogether(go, 4);
    await Promise.all(runs);
    const store = await h.open();
    for (const p of plan)
      for (const [i, id] of p.ids.entries()) {
        expect(await store.readManifest(id)).toEqual({
          kind: 'run',
          manifest: { run_id: id, n: i, persona: 'p', pad: 'y'.repeat(3000) },
        });
        expect(await store.readManifest(p.hitIds[i] as string)).toEqual({
          kind: 'hit',
          manifest: { run_id: p.hitIds[i], seed_run: id, persona: 'p', cache: 'hit' },
        });
      }
  });

  for (const after of [0, 2, 30]) {
    it(`kill -9 of a writer ${after} rewrites into a run's manifest: it reads whole, the last or a later version`, async () => {
      const h = await fresh();
      const id = runIdOf();
      await h.runDir(id);
      const c = startStoreChild(h.child, { op: 'runRewriteForever', id, pad: 300_000 });
      await c.linesAtLeast(after);
      await kill9(c);
      const last = Math.max(0, ...c.lines.map((l) => l.n as number));
      const found = await (await h.open()).readManifest(id);
      if (last > 0) expect(found).toBeDefined();
      if (found) {
        expect(found.kind).toBe('run');
        expect(found.manifest.pad).toBe('z'.repeat(300_000));
        expect(found.manifest.n as number).toBeGreaterThanOrEqual(last);
      }
      // The storage stays usable.
      const store = await h.open();
      await store.writeManifest(id, { run_id: id, persona: 'p', after: true });
      expect((await store.readManifest(id))?.manifest).toEqual({ run_id: id, persona: 'p', after: true });
    }, 60_000);
  }
}
