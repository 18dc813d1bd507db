/**
 * Calls served by sandboxes built ahead of time: from the second call of a runtime on, a call
 * without x-bind or network starts in a sandbox already set up. Each must still run its own
 * tool's code, keep its own artifacts, and be recorded as such; close() stops the waiting ones.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { prebuiltStats } from '@forge/sandbox';
import { describe, expect, it } from 'vitest';
import { builtSoon, example, okData, py, setup, tool } from './helpers.js';

const prebuilt = (m: Record<string, unknown>) => (m.sandbox as { prebuilt: boolean }).prebuilt;

describe('calls in sandboxes built ahead', () => {
  it('python, node and bash tools: from the second call on, each call takes one and runs its own code', async () => {
    const fx = await setup();
    // Two python tools of the same shape, called in turn: each call must run its own impl.
    const a = py('which_a', 'open(os.environ["FORGE_ARTIFACTS"] + "/a.txt", "w").write("A")\nprint(json.dumps({"ok": True, "data": "a"}))');
    const b = py('which_b', 'open(os.environ["FORGE_ARTIFACTS"] + "/b.txt", "w").write("B")\nprint(json.dumps({"ok": True, "data": "b"}))');
    const node = tool('which_node', 'node', 'console.log(JSON.stringify({ ok: true, data: process.version.startsWith("v") }))');
    const bash = tool('which_bash', 'bash', 'read -r input; echo "{\\"ok\\": true, \\"data\\": \\"bash $BASH_VERSINFO\\"}"');
    for (const spec of [a, b, node, bash]) expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    const runs: { id: string; want: unknown; tool: string }[] = [];
    for (let round = 0; round < 3; round++) {
      for (const [name, want] of [
        ['which_a', 'a'],
        ['which_b', 'b'],
        ['which_node', true],
        ['which_bash', expect.stringMatching(/^bash \d+$/)],
      ] as const) {
        await builtSoon();
        const env = await fx.forge.callTool(name, {});
        expect(okData(env)).toEqual(want);
        runs.push({ id: env.meta.run_id as string, want, tool: name });
      }
    }
    // The first call of each runtime builds its own; every later one takes a sandbox built ahead.
    const served = runs.map((r) => prebuilt(fx.manifest(r.id)));
    expect(served).toEqual([false, true, false, false, ...Array(8).fill(true)]);
    for (const r of runs) {
      const artifacts = readdirSync(join(fx.runDir(r.id), 'artifacts'));
      if (r.tool === 'which_a') expect(artifacts).toEqual(['a.txt']);
      else if (r.tool === 'which_b') expect(artifacts).toEqual(['b.txt']);
      else expect(artifacts).toEqual([]);
    }
    const last = runs.at(-4) as { id: string };
    expect(fx.manifest(last.id).artifacts).toEqual([{ path: 'a.txt', bytes: 1, kind: 'file' }]);
    expect(readFileSync(join(fx.runDir(last.id), 'artifacts', 'a.txt'), 'utf8')).toBe('A');
  });

  it('a call with x-bind builds its own sandbox, and says so in its manifest', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(await example('line_count'))).ok).toBe(true);
    fx.file('src/a.py', 'one\ntwo\n');
    const dir = join(fx.project, 'src');
    for (let i = 0; i < 3; i++) {
      await builtSoon();
      const env = await fx.forge.callTool('line_count', { dir, ext: 'py' });
      expect(okData(env)).toEqual({ files: 1, lines: 2 });
      expect(prebuilt(fx.manifest(env.meta.run_id as string))).toBe(false);
    }
  });

  it('prebuild: false builds every sandbox at call time', async () => {
    const before = stageDirs();
    const fx = await setup({ forge: { prebuild: false } });
    expect((await fx.forge.forgeTool(await example('fib'))).ok).toBe(true);
    for (let n = 1; n <= 3; n++) {
      await builtSoon();
      const env = await fx.forge.callTool('fib', { n: 10 + n });
      expect(env.ok).toBe(true);
      expect(prebuilt(fx.manifest(env.meta.run_id as string))).toBe(false);
    }
    expect(stageDirs().filter((d) => !before.includes(d))).toEqual([]);
  });

  it('close() stops the waiting sandboxes and removes their stage directory (a neutral one under the temporary directory)', async () => {
    const earlier = stageDirs();
    const fx = await setup();
    const spec = py('quick', 'print(json.dumps({"ok": True, "data": 1}))');
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    expect((await fx.forge.callTool('quick', {})).ok).toBe(true);
    await builtSoon();
    const mine = () => stageDirs().filter((d) => !earlier.includes(d));
    expect(mine()).toHaveLength(1);
    expect(existsSync(join(fx.project, '.forge', 'runs', '.sandboxes'))).toBe(false);
    const before = prebuiltStats().ready;
    expect(before).toBeGreaterThan(0);
    await fx.forge.close();
    expect(prebuiltStats().ready).toBeLessThan(before);
    expect(mine()).toEqual([]);
    // A second engine over the same project builds afresh.
    const again = await fx.reopen();
    expect((await again.callTool('quick', {})).ok).toBe(true);
  });
});

/** This process's stage directories of sandboxes built ahead (see makeStageDir). */
function stageDirs(): string[] {
  return readdirSync(tmpdir()).filter((n) => n.startsWith(`forge-sandbox-prebuilt-${process.pid}-`));
}
