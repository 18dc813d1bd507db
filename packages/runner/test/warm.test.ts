/**
 * Warm interpreters through the runner: a Python or Node tool's call served by a sandbox whose
 * interpreter was already running gives the envelope a cold call gives (data, errors, refusals,
 * redaction, files, events), is recorded as warm with what its warm-up cost, and keeps nothing
 * for the next call.
 */
import type { Envelope, ToolEvent } from '@forge/runner';
import { describe, expect, it } from 'vitest';
import { builtSoon, type Fixture, js, py, setup, tool } from './helpers.js';

const TOKEN = 'tok_warm_5d1e0c9b7a3f';
const OPTIONS = { workspacePolicy: { persona_secret_allow: { default: ['API_TOKEN'] } }, vault: { API_TOKEN: TOKEN } };

/** Tools whose envelopes must be the same cold and warm. */
const CORPUS = [
  py(
    'adds',
    'print(json.dumps({"ok": True, "data": {"sum": args["a"] + args["b"], "main": __name__, "file": __file__, "argv": sys.argv}}))',
  ),
  py('raises', 'raise RuntimeError("tool failed on purpose")'),
  py('exits', 'print("partial", file=sys.stderr)\nsys.exit(4)'),
  py('not_json', 'print("this is not json")'),
  py('spins', 'while True: pass', { meta: { cpu_s: 1 } }),
  py('sleeps', 'import time\ntime.sleep(60)', { meta: { timeout_ms: 800 } }),
  py(
    'leaks',
    't = os.environ["API_TOKEN"]\nsys.stderr.write("token " + t + "\\n")\nprint(json.dumps({"ok": True, "data": {"token": t, "child": __import__("subprocess").run(["/bin/sh", "-c", "echo $API_TOKEN"], capture_output=True, text=True).stdout}}))',
    { meta: { secrets: ['API_TOKEN'] } },
  ),
  py(
    'files',
    'open(os.environ["FORGE_ARTIFACTS"] + "/out.csv", "w").write("a,b\\n1,2\\n")\nprint(json.dumps({"ok": True, "data": sorted(os.listdir(os.environ["FORGE_ARTIFACTS"])), "meta": {"files": ["out.csv"]}}))',
  ),
  py(
    'events',
    'for i in range(3):\n    os.write(3, (json.dumps({"progress": i, "total": 3}) + "\\n").encode())\nprint(json.dumps({"ok": True, "data": "done"}))',
  ),
  js(
    'js_adds',
    'console.log(JSON.stringify({ ok: true, data: { sum: args.a + args.b, main: require.main === module, file: __filename, argv: process.argv } }));',
  ),
  js('js_raises', "throw new Error('tool failed on purpose');"),
  js(
    'js_leaks',
    "const t = process.env.API_TOKEN;\nprocess.stderr.write('token ' + t + '\\n');\nconsole.log(JSON.stringify({ ok: true, data: { token: t, env: Object.keys(process.env).sort() } }));",
    { meta: { secrets: ['API_TOKEN'] } },
  ),
  js(
    'js_events',
    "for (let i = 0; i < 3; i++) fs.writeSync(3, JSON.stringify({ progress: i, total: 3 }) + '\\n');\nconsole.log(JSON.stringify({ ok: true, data: 'done' }));",
  ),
  tool(
    'js_module',
    'node',
    "import { readFileSync } from 'node:fs';\nconst args = JSON.parse(readFileSync(0, 'utf8'));\nawait Promise.resolve();\nconsole.log(JSON.stringify({ ok: true, data: { url: import.meta.url, args } }));\n",
  ),
];

/** An envelope without what differs between any two calls: run ids and directories, durations, the fixture's root. */
function comparable(fx: Fixture, env: Envelope): unknown {
  const { run_id: _r, duration_ms: _d, audit: _a, ...meta } = env.meta as Record<string, unknown>;
  const text = JSON.stringify({ ...env, meta })
    .replaceAll(fx.root, '<root>')
    .replaceAll(String(env.meta.run_id), '<run>')
    .replace(/\d{8}T\d{6}Z_<run>/g, '<rundir>');
  return JSON.parse(text);
}

async function call(fx: Fixture, name: string, events: ToolEvent[]): Promise<Envelope> {
  return fx.forge.callTool(name, name.endsWith('adds') ? { a: 2, b: 3 } : {}, { onEvent: (e) => events.push(e) });
}

const mode = (fx: Fixture, env: Envelope) => (fx.manifest(env.meta.run_id as string).sandbox as { mode: string }).mode;

describe('warm calls through the runner', () => {
  it('give the envelope a cold call gives, for every kind of outcome, and are recorded as warm', async () => {
    const cold = await setup({ ...OPTIONS, forge: { prebuild: false } });
    const warm = await setup(OPTIONS);
    for (const spec of CORPUS) {
      const made = await cold.forge.forgeTool(spec);
      expect(made.ok, JSON.stringify(made)).toBe(true);
      expect((await warm.forge.forgeTool(spec)).ok).toBe(true);
    }
    for (const spec of CORPUS) {
      const coldEvents: ToolEvent[] = [];
      const warmEvents: ToolEvent[] = [];
      const c = await call(cold, spec.name, coldEvents);
      // A first call of the shape (its limits are part of it) has a warm sandbox built.
      await call(warm, spec.name, []);
      await builtSoon();
      const w = await call(warm, spec.name, warmEvents);
      expect(mode(cold, c)).toBe('cold');
      expect(mode(warm, w), spec.name).toBe('warm');
      if (spec.name === 'spins') {
        // Which CPU limit fires first, the run's cgroup budget or the process's RLIMIT_CPU (whose
        // holder shell then names the signal on stderr), is a race in a cold run.
        expect(w.ok || w.error, spec.name).toMatchObject({ kind: 'resource_limit', limit: 'cpu' });
        expect(c.ok || c.error, spec.name).toMatchObject({ kind: 'resource_limit', limit: 'cpu' });
        continue;
      }
      expect(comparable(warm, w), spec.name).toEqual(comparable(cold, c));
      expect(warmEvents, spec.name).toEqual(coldEvents);
    }
    const all = JSON.stringify(warm.audit()) + JSON.stringify(warm.sandboxRuns('leaks'));
    expect(all).not.toContain(TOKEN);
  });

  it('record the warm-up apart from the call: its cost in the manifest, the call’s limits its own', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(py('once', 'print(json.dumps({"ok": True, "data": 1}))'))).ok).toBe(true);
    await fx.forge.callTool('once', {});
    await builtSoon();
    const env = await fx.forge.callTool('once', {});
    const sandbox = fx.manifest(env.meta.run_id as string).sandbox as Record<string, unknown>;
    expect(sandbox).toMatchObject({ mode: 'warm', prebuilt: true, warmup: { ms: expect.any(Number) } });
  });

  it('keep nothing for the next call: module state, environment, files', async () => {
    const fx = await setup();
    const sticky = py(
      'sticky',
      'seen = [getattr(json, "mark", None), os.environ.get("LEFT"), os.path.exists("/tmp/left")]\njson.mark = 1\nos.environ["LEFT"] = "1"\nopen("/tmp/left", "w").write("x")\nprint(json.dumps({"ok": True, "data": seen}))',
    );
    expect((await fx.forge.forgeTool(sticky)).ok).toBe(true);
    const modes: string[] = [];
    for (let i = 0; i < 4; i++) {
      await builtSoon();
      const env = await fx.forge.callTool('sticky', {});
      expect(env.ok && env.data, JSON.stringify(env)).toEqual([null, null, false]);
      modes.push(mode(fx, env));
    }
    expect(modes.slice(1)).toEqual(['warm', 'warm', 'warm']);
  });

  it('warm: false keeps sandboxes built ahead without a running interpreter', async () => {
    const fx = await setup({ forge: { warm: false } });
    expect((await fx.forge.forgeTool(py('plain', 'print(json.dumps({"ok": True, "data": 1}))'))).ok).toBe(true);
    await fx.forge.callTool('plain', {});
    await builtSoon();
    const env = await fx.forge.callTool('plain', {});
    expect(mode(fx, env)).toBe('built');
  });
});
