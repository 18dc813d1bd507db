import { closeSync, openSync, readFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { artifactUri, type Envelope, parseRunUri, type Refusal, RUN_ID_PATTERN, runIdProblem } from '../src/index.js';
import { newRunId } from '../src/manifest.js';
import { runDirName } from '../src/runIds.js';
import { failed, okData, py, setup } from './helpers.js';

const POLICY = { operator_personas: ['ops'] };

// A real 1×1 PNG (signature, IHDR, IDAT, IEND), made by the tool itself with zlib and crc32.
const WRITE_PNG = String.raw`
import struct, zlib
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b"")
`;

/** A tool that writes a PNG, a fake PNG, a text file, a large file and links out of its artifacts. */
const ARTIST = py(
  'artist',
  `${WRITE_PNG}
a = os.environ["FORGE_ARTIFACTS"]
os.makedirs(a + "/out", exist_ok=True)
open(a + "/plot.png", "wb").write(png)
open(a + "/fake.png", "wb").write(b"not a png at all")
open(a + "/out/notes.txt", "w").write("hello notes")
open(a + "/big.bin", "wb").write(b"x" * 4096)
os.symlink("/etc/passwd", a + "/passwd")
os.symlink("/etc", a + "/etcdir")
if args.get("other"):
    os.symlink(args["other"], a + "/other")
    os.symlink(args["other_dir"], a + "/otherdir")
print(json.dumps({"ok": True, "data": "drawn", "meta": {"files": args.get("files", [])}}))`,
);

function ok<T extends { ok: boolean }>(r: T | Refusal): T {
  if (!r.ok) throw new Error(`expected ok, got ${JSON.stringify(r)}`);
  return r as T;
}

function refused(r: { ok: boolean } | Refusal, kind: string): Refusal {
  if (r.ok) throw new Error(`expected a ${kind} refusal, got ${JSON.stringify(r)}`);
  expect((r as Refusal).kind, (r as Refusal).message).toBe(kind);
  return r as Refusal;
}

const runIdOf = (env: Envelope) => env.meta.run_id as string;

describe('run ids and URIs', () => {
  it('a run id names exactly the directory newRunId made for it', () => {
    for (const t of [0, 1, 86_399_999, Date.UTC(2026, 11, 1, 12, 30, 5, 999), 4_102_444_800_000]) {
      const made = newRunId(new Date(t));
      expect(made.id).toMatch(RUN_ID_PATTERN);
      expect(runDirName(made.id)).toBe(made.dirName);
      expect(runIdProblem(made.id)).toBeUndefined();
    }
    for (const bad of ['', '../x', 'abc', 'mifx2k3a-0f3a9c1e0001/..', 'MIFX2K3A-0f3a9c1e0001', 'zzzzzzzzzzz-0f3a9c1e0001', 42]) {
      expect(runIdProblem(bad), String(bad)).toContain('is not a forge run id');
    }
  });

  it('artifact URIs encode each segment and read back to the same path', () => {
    const id = newRunId(new Date()).id;
    const uri = artifactUri(id, 'out dir/a#b?.png');
    expect(uri).toBe(`forge://runs/${id}/artifacts/out%20dir/a%23b%3F.png`);
    expect(parseRunUri(uri)).toEqual({ kind: 'artifact', runId: id, path: 'out dir/a#b?.png' });
    expect(parseRunUri(`forge://runs/${id}/manifest`)).toEqual({ kind: 'manifest', runId: id });
    expect(parseRunUri('forge://runs/nope/manifest')).toBeUndefined();
    expect(parseRunUri(`forge://runs/${id}/artifacts/%E0%A4%A`)).toBeUndefined();
    expect(parseRunUri(`forge://tools/${id}`)).toBeUndefined();
  });
});

describe('meta.files: what a tool names is checked on disk after the run', () => {
  it('keeps regular files inside the artifacts (normalized, typed by name and magic) and drops the rest with the reason', async () => {
    const fx = await setup({ userPolicy: POLICY });
    expect((await fx.forge.forgeTool(ARTIST)).ok).toBe(true);
    const files = [
      'plot.png',
      '/forge/artifacts/out/notes.txt',
      './out//notes.txt',
      'fake.png',
      'passwd',
      'etcdir/passwd',
      '../run_manifest.json',
      '/etc/passwd',
      'missing.txt',
      'out',
      42,
    ];
    const env = await fx.forge.callTool('artist', { files }, { persona: 'alice' });
    const id = runIdOf(env);
    expect(okData(env)).toBe('drawn');
    expect(env.meta.files).toEqual([
      { path: 'plot.png', size: expect.any(Number), mime_type: 'image/png', uri: `forge://runs/${id}/artifacts/plot.png` },
      { path: 'out/notes.txt', size: 11, mime_type: 'text/plain', uri: `forge://runs/${id}/artifacts/out/notes.txt` },
      { path: 'fake.png', size: 16, mime_type: 'application/octet-stream', uri: `forge://runs/${id}/artifacts/fake.png` },
    ]);
    expect(env.meta.files_dropped).toEqual([
      { path: 'passwd', reason: '"passwd" is a symbolic link (forge serves only regular files, never a link\'s target)' },
      { path: 'etcdir/passwd', reason: '"etcdir" is a symbolic link (forge serves only regular files, never a link\'s target)' },
      { path: '../run_manifest.json', reason: 'not inside /forge/artifacts' },
      { path: '/etc/passwd', reason: 'not inside /forge/artifacts' },
      { path: 'missing.txt', reason: 'no file "missing.txt" among the run\'s artifacts' },
      { path: 'out', reason: '"out" is not a regular file' },
      { path: '42', reason: 'not a path (a string)' },
    ]);
  });

  it('bounds the names checked, and a tool cannot set files_dropped itself', async () => {
    const fx = await setup();
    const spec = py(
      'many',
      'open(os.environ["FORGE_ARTIFACTS"] + "/a.txt", "w").write("a")\nprint(json.dumps({"ok": True, "data": 1, "meta": {"files": ["a.txt"] * 150, "files_dropped": "mine"}}))',
    );
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    const env = await fx.forge.callTool('many', {});
    expect(env.meta.files).toHaveLength(1);
    expect(env.meta.files_dropped).toEqual([{ path: '(50 more)', reason: 'meta.files names at most 100 files' }]);
    const notArray = py('not_array', 'print(json.dumps({"ok": True, "data": 1, "meta": {"files": "a.txt"}}))');
    expect((await fx.forge.forgeTool(notArray)).ok).toBe(true);
    const env2 = await fx.forge.callTool('not_array', {});
    expect(env2.meta.files).toEqual([]);
    expect(env2.meta.files_dropped).toEqual([{ path: 'a.txt', reason: 'meta.files must be an array of paths under /forge/artifacts' }]);
    const none = await fx.forge.callTool('not_array', {});
    expect(none.ok).toBe(true);
  });
});

describe('reading a run back by its id', () => {
  it('gives its persona the manifest as written, the artifact list, and the bytes of its files', async () => {
    const fx = await setup({ userPolicy: POLICY });
    expect((await fx.forge.forgeTool(ARTIST)).ok).toBe(true);
    const env = await fx.forge.callTool('artist', { files: ['plot.png'] }, { persona: 'alice' });
    const id = runIdOf(env);
    const run = ok(await fx.forge.readRun(id, { persona: 'alice' }));
    expect(run).toMatchObject({ ok: true, run_id: id, kind: 'run', uri: `forge://runs/${id}/manifest` });
    expect(run.manifest).toEqual(JSON.parse(readFileSync(join(fx.runDir(id), 'run_manifest.json'), 'utf8')));
    expect(run.manifest).toMatchObject({ run_id: id, persona: 'alice', tool: { name: 'artist' } });
    expect(run.artifacts).toEqual([
      { path: 'big.bin', bytes: 4096, kind: 'file', uri: `forge://runs/${id}/artifacts/big.bin` },
      { path: 'etcdir', bytes: 0, kind: 'symlink' },
      { path: 'fake.png', bytes: 16, kind: 'file', uri: `forge://runs/${id}/artifacts/fake.png` },
      { path: 'out', bytes: 0, kind: 'directory' },
      { path: 'out/notes.txt', bytes: 11, kind: 'file', uri: `forge://runs/${id}/artifacts/out/notes.txt` },
      { path: 'passwd', bytes: 0, kind: 'symlink' },
      { path: 'plot.png', bytes: expect.any(Number), kind: 'file', uri: `forge://runs/${id}/artifacts/plot.png` },
    ]);

    const png = ok(await fx.forge.readArtifact(id, 'plot.png', { persona: 'alice' }));
    expect(png.mime_type).toBe('image/png');
    expect(png.bytes.equals(readFileSync(join(fx.runDir(id), 'artifacts', 'plot.png')))).toBe(true);
    expect(png.bytes.subarray(0, 8).toString('hex')).toBe('89504e470d0a1a0a');
    expect(png.size).toBe(png.bytes.length);
    expect(ok(await fx.forge.readArtifact(id, 'fake.png', { persona: 'alice' })).mime_type).toBe('application/octet-stream');
    const notes = ok(await fx.forge.readArtifact(id, 'out/notes.txt', { persona: 'alice' }));
    expect([notes.mime_type, notes.bytes.toString()]).toEqual(['text/plain', 'hello notes']);
  });

  it('refuses links a tool left (to /etc/passwd, to /etc, to another run), never following them', async () => {
    const fx = await setup({ userPolicy: POLICY });
    expect((await fx.forge.forgeTool(ARTIST)).ok).toBe(true);
    const first = runIdOf(await fx.forge.callTool('artist', {}, { persona: 'alice' }));
    const firstDir = fx.runDir(first);
    const env = await fx.forge.callTool(
      'artist',
      { other: join(firstDir, 'artifacts', 'big.bin'), other_dir: firstDir },
      { persona: 'alice' },
    );
    const id = runIdOf(env);
    for (const path of ['passwd', 'etcdir/passwd', 'other', 'otherdir/run_manifest.json']) {
      const r = refused(await fx.forge.readArtifact(id, path, { persona: 'alice' }), 'policy_denied');
      expect(r.message).toContain('is a symbolic link');
      expect(r.message).not.toContain('root:');
    }
    const r = refused(await fx.forge.readArtifact(id, 'out/notes.txt/x', { persona: 'alice' }), 'not_found');
    expect(r.message).toBe(
      `artifact "out/notes.txt" (on the way to "out/notes.txt/x") of run "${id}" is not a directory; readRun lists what the run has`,
    );
    refused(await fx.forge.readArtifact(id, 'out', { persona: 'alice' }), 'policy_denied');
    const refusedReads = fx.entries('run.read_refused').map((e) => [e.data.path, e.data.reason]);
    expect(refusedReads).toEqual([
      ['passwd', 'symlink'],
      ['etcdir/passwd', 'symlink'],
      ['other', 'symlink'],
      ['otherdir/run_manifest.json', 'symlink'],
      ['out/notes.txt/x', 'not_directory'],
      ['out', 'not_regular'],
    ]);
  });

  it('refuses traversal and malformed ids before looking at the disk', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(ARTIST)).ok).toBe(true);
    const id = runIdOf(await fx.forge.callTool('artist', {}));
    for (const path of [
      '../run_manifest.json',
      '/etc/passwd',
      'out/../../run_manifest.json',
      'out/./notes.txt',
      'out//notes.txt',
      'a\0b',
      '',
      'out/',
    ]) {
      refused(await fx.forge.readArtifact(id, path), 'validation_failed');
    }
    expect(refused(await fx.forge.readArtifact(id, '../x'), 'validation_failed').message).toMatchInlineSnapshot(
      `"artifact path "../x" is not normalized (empty, "." or ".." segment); give it like "out/plot.png""`,
    );
    for (const bad of ['..', `${id}/..`, '../../etc', id.toUpperCase()]) refused(await fx.forge.readRun(bad), 'validation_failed');
  });

  it('gives another persona the same not_found as a run that does not exist; an operator reads it', async () => {
    const fx = await setup({ userPolicy: POLICY });
    expect((await fx.forge.forgeTool(ARTIST)).ok).toBe(true);
    const id = runIdOf(await fx.forge.callTool('artist', {}, { persona: 'alice' }));
    const missing = newRunId(new Date()).id;
    const theirs = refused(await fx.forge.readRun(id, { persona: 'bob' }), 'not_found');
    const none = refused(await fx.forge.readRun(missing, { persona: 'bob' }), 'not_found');
    expect(theirs.message.replace(id, 'ID')).toBe(none.message.replace(missing, 'ID'));
    expect(theirs.message).toBe(
      `no run "${id}" that persona "bob" may read (a run is readable by the persona that made the call and by operator personas, policy operator_personas)`,
    );
    const art = refused(await fx.forge.readArtifact(id, 'plot.png', { persona: 'bob' }), 'not_found');
    const artNone = refused(await fx.forge.readArtifact(missing, 'plot.png', { persona: 'bob' }), 'not_found');
    expect(art.message.replace(id, 'ID')).toBe(artNone.message.replace(missing, 'ID'));
    // The audit log tells an operator which it was.
    expect(fx.entries('run.read_refused').map((e) => e.data.reason)).toEqual(['not_yours', 'missing', 'not_yours', 'missing']);

    expect(ok(await fx.forge.readRun(id, { persona: 'ops' })).manifest.persona).toBe('alice');
    expect(ok(await fx.forge.readArtifact(id, 'plot.png', { persona: 'ops' })).mime_type).toBe('image/png');
  });

  it('caps the bytes read: over maxBytes is resource_limit, default 16 MiB', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(ARTIST)).ok).toBe(true);
    const id = runIdOf(await fx.forge.callTool('artist', {}));
    const r = refused(await fx.forge.readArtifact(id, 'big.bin', { maxBytes: 1024 }), 'resource_limit');
    expect(r.message).toBe(
      `artifact "big.bin" of run "${id}" is 4096 bytes, over the read limit of 1024; read a smaller file, or ask with a larger maxBytes`,
    );
    expect(ok(await fx.forge.readArtifact(id, 'big.bin', { maxBytes: 4096 })).size).toBe(4096);
    expect(ok(await fx.forge.readArtifact(id, 'big.bin')).bytes.equals(Buffer.alloc(4096, 'x'))).toBe(true);
  });

  it('serves the spill of truncated stdout and the kept bytes of invalid stdout', async () => {
    const fx = await setup();
    const chatty = py('chatty', 'sys.stdout.buffer.write(bytes(range(256)) * 20)', { meta: { output_cap: 1024 } });
    expect((await fx.forge.forgeTool(chatty)).ok).toBe(true);
    const env = await fx.forge.callTool('chatty', {});
    failed(env, 'resource_limit');
    const spill = ok(await fx.forge.readArtifact(runIdOf(env), 'full_stdout.bin'));
    expect([spill.size, spill.mime_type]).toEqual([5120, 'application/octet-stream']);
    expect(spill.bytes.equals(readFileSync(env.meta.stdout_full_artifact as string))).toBe(true);

    expect((await fx.forge.forgeTool(py('chatter', 'print("not json")'))).ok).toBe(true);
    const bad = await fx.forge.callTool('chatter', {});
    failed(bad, 'output_invalid');
    expect(ok(await fx.forge.readArtifact(runIdOf(bad), 'stdout.bin')).bytes.toString()).toBe('not json\n');
  });

  it('a cache hit names the seed run’s files through its own id, readable by the hit’s persona only', async () => {
    const fx = await setup({ userPolicy: POLICY });
    const spec = py(
      'drawn',
      `${WRITE_PNG}\nopen(os.environ["FORGE_ARTIFACTS"] + "/p.png", "wb").write(png)\nprint(json.dumps({"ok": True, "data": args["n"], "meta": {"files": ["p.png"]}}))`,
      { meta: { deterministic: true } },
    );
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    const seed = await fx.forge.callTool('drawn', { n: 1 }, { persona: 'alice' });
    const hit = await fx.forge.callTool('drawn', { n: 1 }, { persona: 'bob' });
    const seedId = runIdOf(seed);
    const hitId = runIdOf(hit);
    expect(hit.meta).toMatchObject({ cache: 'hit', seed_run: seedId });
    expect(hit.meta.files).toEqual([
      { path: 'p.png', size: expect.any(Number), mime_type: 'image/png', uri: `forge://runs/${hitId}/artifacts/p.png` },
    ]);
    const viaHit = ok(await fx.forge.readArtifact(hitId, 'p.png', { persona: 'bob' }));
    expect(viaHit.bytes.equals(ok(await fx.forge.readArtifact(seedId, 'p.png', { persona: 'alice' })).bytes)).toBe(true);
    const record = ok(await fx.forge.readRun(hitId, { persona: 'bob' }));
    expect(record).toMatchObject({ kind: 'hit', manifest: { run_id: hitId, persona: 'bob', seed_run: seedId, cache: 'hit' } });
    expect(record.artifacts).toEqual([
      { path: 'p.png', bytes: expect.any(Number), kind: 'file', uri: `forge://runs/${hitId}/artifacts/p.png` },
    ]);
    // Neither persona reads the other's record.
    refused(await fx.forge.readRun(seedId, { persona: 'bob' }), 'not_found');
    refused(await fx.forge.readArtifact(hitId, 'p.png', { persona: 'alice' }), 'not_found');
    // A restarted engine finds the hit in runs/hits.jsonl.
    const again = await fx.reopen();
    expect(ok(await again.readRun(hitId, { persona: 'bob' })).kind).toBe('hit');
  });
});

describe('the verified audit tail', () => {
  it('verifies the whole log, then gives an operator the last entries and another persona only its own', async () => {
    const fx = await setup({ userPolicy: POLICY });
    expect((await fx.forge.forgeTool(py('echo', 'print(json.dumps({"ok": True, "data": args}))'))).ok).toBe(true);
    for (const persona of ['alice', 'bob', 'alice']) okData(await fx.forge.callTool('echo', { persona }, { persona }));
    const all = ok(await fx.forge.auditTail({ persona: 'ops', last: 3 }));
    expect(all.verdict).toMatchObject({ ok: true });
    expect(all.shown).toBe('all');
    const lastThree = fx.audit().slice(-3);
    expect(all.entries.map((e) => e.seq)).toEqual(lastThree.map((e) => e.seq));
    expect(all.verdict.entries).toBe(fx.audit().length);

    const mine = ok(await fx.forge.auditTail({ persona: 'alice', last: 10 }));
    expect(mine.shown).toBe('persona');
    expect(mine.entries.map((e) => [e.type, (e.data as { persona: string }).persona])).toEqual([
      ['forge.called', 'alice'],
      ['forge.called', 'alice'],
    ]);
    for (const last of [0, 1001, 1.5]) refused(await fx.forge.auditTail({ persona: 'ops', last }), 'validation_failed');
  });

  it('reports a tampered log in its verdict (first bad entry and why)', async () => {
    const fx = await setup({ userPolicy: POLICY });
    expect((await fx.forge.forgeTool(py('echo', 'print(json.dumps({"ok": True, "data": args}))'))).ok).toBe(true);
    for (let i = 0; i < 3; i++) okData(await fx.forge.callTool('echo', { i }, { persona: 'alice' }));
    const log = fx.forge.paths.auditLog;
    const text = readFileSync(log);
    const victim = fx.audit().find((e) => e.type === 'forge.called');
    const at = text.indexOf(Buffer.from('"persona":"alice"'));
    expect(at).toBeGreaterThan(0);
    // One byte of an entry changed in place ("alice" → "alicf"), then put back before the test ends.
    const pos = at + '"persona":"alic'.length;
    const fd = openSync(log, 'r+');
    try {
      writeSync(fd, Buffer.from('f'), 0, 1, pos);
      const t = ok(await fx.forge.auditTail({ persona: 'ops', last: 100 }));
      expect(t.verdict.ok).toBe(false);
      expect(t.verdict.first_bad).toMatchObject({ reason: 'hash_mismatch', seq: victim?.seq });
      expect(t.tail_error).toContain('run "forge-audit verify');
      expect(t.entries).toEqual([]);
    } finally {
      writeSync(fd, Buffer.from('e'), 0, 1, pos);
      closeSync(fd);
    }
    expect(ok(await fx.forge.auditTail({ persona: 'ops', last: 1 })).verdict.ok).toBe(true);
  });
});
