import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { outputDigest } from '../src/auditData.js';
import { example, failed, okData, py, RECEIPT, setup, tool } from './helpers.js';

const SHA = /^sha256:[0-9a-f]{64}$/;

describe('forge → call, the canonical examples', () => {
  it('fib (python): forged, stamped, audited, run in bwrap with its manifest', async () => {
    const fx = await setup();
    const changes: unknown[] = [];
    fx.forge.on('toolsChanged', (e) => changes.push(e));
    const made = await fx.forge.forgeTool(await example('fib'), { session: 's1' });
    if (!made.ok) throw new Error(made.message);
    expect(made.tool).toMatchObject({
      name: 'fib',
      version: 1,
      scope: 'project',
      state: 'active',
      runtime: 'python3',
      created_by: { persona: 'default', session: 's1' },
    });
    expect(made.tool.digest).toMatch(SHA);
    expect(changes).toEqual([{ scopes: ['project'], names: ['fib'] }]);
    expect(existsSync(join(fx.project, '.forge', 'tools', 'fib.json'))).toBe(true);
    expect(fx.entries('forge.created').map((e) => e.data)).toEqual([
      {
        ok: true,
        persona: 'default',
        session: 's1',
        scope: 'project',
        name: 'fib',
        version: 1,
        digest: made.tool.digest,
        runtime: 'python3',
        policy: expect.stringMatching(SHA),
      },
    ]);

    const env = await fx.forge.callTool('fib', { n: 100 }, { session: 's1' });
    expect(okData(env)).toEqual({ n: 100, fib: '354224848179261915075' });
    expect(env.meta).toEqual({
      run_id: expect.any(String),
      cache: 'miss',
      sandbox: 'bwrap',
      duration_ms: expect.any(Number),
      audit: RECEIPT,
    });
    const runId = env.meta.run_id as string;

    const m = fx.manifest(runId);
    expect(m).toMatchObject({
      run_id: runId,
      tool: {
        name: 'fib',
        version: 1,
        digest: made.tool.digest,
        scope: 'project',
        runtime: expect.stringMatching(/^python3@3\.\d+\.\d+$/),
      },
      persona: 'default',
      session: 's1',
      input: { n: 100 },
      input_digest: expect.stringMatching(SHA),
      sandbox: { label: 'bwrap', binds: [] },
      limits: { timeout_ms: 5000, clamped: [] },
      secrets: [],
      exit: { reason: 'exit', code: 0, signal: null },
      cache: 'miss',
      ok: true,
      stdout_bytes: expect.any(Number),
      artifacts: [],
      stderr_tail: '',
    });
    expect((m.sandbox as { mounts: string[] }).mounts).toEqual(expect.arrayContaining(['ro:/forge/tool/main.py', 'rw:/forge/artifacts']));

    const called = fx.entries('forge.called');
    expect(called).toHaveLength(1);
    expect(called[0]?.data).toEqual({
      ok: true,
      name: 'fib',
      version: 1,
      digest: made.tool.digest,
      scope: 'project',
      persona: 'default',
      session: 's1',
      run_id: runId,
      input_digest: m.input_digest,
      cache: 'miss',
      // What a later cache hit is checked against: the key and the digest of this answer.
      cache_key: expect.stringMatching(/^[0-9a-f]{64}$/),
      output_digest: outputDigest(env),
      exit: 'exit',
      duration_ms: expect.any(Number),
      policy: expect.stringMatching(SHA),
    });
    expect(fx.forge.callCount('fib')).toBe(1);
    expect((await fx.forge.listTools()).map((t) => [t.tool.name, t.scope])).toEqual([['fib', 'project']]);
  });

  it('word_count (node) counts a real text', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('word_count'))).ok).toBe(true);
    const env = await fx.forge.callTool('word_count', { text: 'Hello world\nhello forge, héllo', top: 2 });
    expect(okData(env)).toEqual({
      words: 5,
      lines: 2,
      characters: 30,
      top: [
        ['hello', 2],
        ['forge', 1],
      ],
    });
    expect(fx.manifest(env.meta.run_id as string).tool).toMatchObject({ runtime: expect.stringMatching(/^node@v\d+/) });
  });

  it('line_count (bash) reads a directory through x-bind ro', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('line_count'))).ok).toBe(true);
    fx.file('src/a.py', 'one\ntwo\nthree\n');
    fx.file('src/b.py', 'x\ny\n');
    fx.file('src/deep/c.py', 'z\n');
    fx.file('src/notes.txt', 'not\ncounted\n');
    const dir = join(fx.project, 'src');
    const env = await fx.forge.callTool('line_count', { dir, ext: 'py' });
    expect(okData(env)).toEqual({ files: 3, lines: 6 });
    expect(fx.manifest(env.meta.run_id as string).sandbox).toMatchObject({ binds: [`ro:${dir}`] });
  });

  it('csv_stats (python) reads a real CSV through x-bind ro, and its output_schema holds', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('csv_stats'))).ok).toBe(true);
    const csv = fx.file('data/prices.csv', 'item,price\napple,1.5\npear,2.5\nfig,n/a\nplum,5\n');
    const env = await fx.forge.callTool('csv_stats', { path: csv, column: 'price' });
    expect(okData(env)).toEqual({ column: 'price', count: 3, skipped: 1, mean: 3, min: 1.5, max: 5 });
    expect(env.meta.cache).toBe('off');
    expect(fx.manifest(env.meta.run_id as string).sandbox).toMatchObject({ binds: [`ro:${csv}`] });
  });

  it('an x-bind ro file is read-only inside the sandbox', async () => {
    const fx = await setup();
    const spec = py(
      'try_write',
      'try:\n  open(args["path"], "a").write("x")\n  r = "wrote"\nexcept OSError as e:\n  r = e.errno\nprint(json.dumps({"ok": True, "data": r}))',
      { input_schema: { type: 'object', properties: { path: { type: 'string', 'x-bind': 'ro' } }, required: ['path'] } },
    );
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    const f = fx.file('data/keep.txt', 'original');
    // EROFS; or EACCES first when forge runs as root, since the tool then runs as the sandbox's
    // own uid, which does not own the file.
    expect(process.getuid?.() === 0 ? [13, 30] : [30]).toContain(okData(await fx.forge.callTool('try_write', { path: f })));
    expect(readFileSync(f, 'utf8')).toBe('original');
  });

  it('json_to_csv (python) writes a new file on the host through x-bind rw', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('json_to_csv'))).ok).toBe(true);
    mkdirSync(join(fx.project, 'out'));
    const out = join(fx.project, 'out', 'rows.csv');
    const env = await fx.forge.callTool('json_to_csv', {
      rows: [
        { a: 1, b: 'x' },
        { a: 2, c: { k: [1] } },
      ],
      out,
    });
    expect(okData(env)).toEqual({ path: out, rows: 2, columns: ['a', 'b', 'c'] });
    expect(readFileSync(out, 'utf8')).toBe('a,b,c\r\n1,x,\r\n2,,"{""k"": [1]}"\r\n');
    expect(statSync(out).mode & 0o777).toBe(0o600);
    expect(fx.manifest(env.meta.run_id as string).sandbox).toMatchObject({ binds: [`rw:${out}`] });
  });

  it('the tool gets exactly its input JSON on stdin', async () => {
    const fx = await setup();
    expect(
      (
        await fx.forge.forgeTool(
          tool('stdin_echo', 'python3', 'import json, sys\nprint(json.dumps({"ok": True, "data": sys.stdin.read()}))'),
        )
      ).ok,
    ).toBe(true);
    const input = { text: 'ünïcødé ✓ "quoted"\n', list: [1, 2.5, null, true], nested: { a: {} } };
    const raw = okData(await fx.forge.callTool('stdin_echo', input)) as string;
    expect(JSON.parse(raw)).toEqual(input);
  });

  it('files written to /forge/artifacts are listed in the run manifest and kept on the host', async () => {
    const fx = await setup();
    const spec = py(
      'reporter',
      [
        'base = os.environ["FORGE_ARTIFACTS"]',
        'open(os.path.join(base, "report.txt"), "w").write("hello")',
        'os.mkdir(os.path.join(base, "sub"))',
        'open(os.path.join(base, "sub", "x.bin"), "wb").write(bytes(range(10)))',
        'print(json.dumps({"ok": True, "data": {"run": os.environ["FORGE_RUN_ID"], "base": base}}))',
      ].join('\n'),
    );
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    const env = await fx.forge.callTool('reporter', {});
    const runId = env.meta.run_id as string;
    expect(okData(env)).toEqual({ run: runId, base: '/forge/artifacts' });
    expect(fx.manifest(runId).artifacts).toEqual([
      { path: 'report.txt', bytes: 5, kind: 'file' },
      { path: 'sub', bytes: 0, kind: 'directory' },
      { path: 'sub/x.bin', bytes: 10, kind: 'file' },
    ]);
    expect(readFileSync(join(fx.runDir(runId), 'artifacts', 'report.txt'), 'utf8')).toBe('hello');
  });

  it('the sandbox environment is an allow-list: the host environment does not leak in', async () => {
    const fx = await setup();
    process.env.FORGE_RUNNER_TEST_LEAK = 'host-only-value';
    try {
      expect((await fx.forge.forgeTool(py('env_dump', 'print(json.dumps({"ok": True, "data": dict(os.environ)}))'))).ok).toBe(true);
      const env = okData(await fx.forge.callTool('env_dump', {})) as Record<string, string>;
      expect(env.FORGE_RUNNER_TEST_LEAK).toBeUndefined();
      expect(env.FORGE_ARTIFACTS).toBe('/forge/artifacts');
      expect(Object.values(env)).not.toContain('host-only-value');
    } finally {
      delete process.env.FORGE_RUNNER_TEST_LEAK;
    }
  });

  it('the impl runs from a content-addressed copy: editing that copy on disk changes nothing that runs', async () => {
    const fx = await setup();
    const made = await fx.forge.forgeTool(py('answer', 'print(json.dumps({"ok": True, "data": 42}))'));
    if (!made.ok) throw new Error(made.message);
    expect(okData(await fx.forge.callTool('answer', {}))).toBe(42);
    const copy = join(fx.forge.paths.codeDir, `${made.tool.digest.slice('sha256:'.length)}.py`);
    expect(readFileSync(copy, 'utf8')).toBe(made.tool.impl);
    chmodSync(copy, 0o600);
    writeFileSync(copy, 'import json\nprint(json.dumps({"ok": True, "data": "evil"}))\n');
    expect(okData(await fx.forge.callTool('answer', {}))).toBe(42);
    expect(createHash('sha256').update(readFileSync(copy)).digest('hex')).toBe(createHash('sha256').update(made.tool.impl).digest('hex'));
  });

  it('a tool that fails its own way (ok:false) passes its kind through unchanged', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('csv_stats'))).ok).toBe(true);
    const csv = fx.file('data/x.csv', 'a,b\n1,2\n');
    const env = await fx.forge.callTool('csv_stats', { path: csv, column: 'zzz' });
    const err = failed(env, 'no_such_column');
    expect(err.message).toBe("column 'zzz' is not in the header ['a', 'b']");
    expect(env.meta).toMatchObject({ cache: 'off', sandbox: 'bwrap', run_id: expect.any(String) });
    expect(fx.entries('forge.called').at(-1)?.data).toMatchObject({ ok: false, kind: 'no_such_column', exit: 'exit' });
    expect(fx.manifest(env.meta.run_id as string)).toMatchObject({ ok: false, error_kind: 'no_such_column' });
  });
});
