import { describe, expect, it } from 'vitest';
import { failed, okData, py, setup } from './helpers.js';

// Schema patterns are compiled by @forge/registry for a linear-time engine; these check that the
// pipeline's two validation steps (input before the run, output after it) both use it, and that
// forging refuses what that engine cannot match.
describe('schema patterns in the call pipeline', () => {
  it('forge_tool refuses a backreference or lookaround, naming the path and the construct, and audits the refusal', async () => {
    const fx = await setup();
    const r = await fx.forge.forgeTool(
      py('twice', 'print(json.dumps({"ok": True, "data": 1}))', {
        input_schema: { type: 'object', properties: { s: { type: 'string', pattern: '^(\\w+) \\1$' } } },
        output_schema: { type: 'object', properties: { t: { type: 'string', pattern: '^(?!x)' } } },
      }),
    );
    expect(r).toMatchObject({
      ok: false,
      kind: 'validation_failed',
      problems: [
        { path: 'input_schema/properties/s/pattern', message: expect.stringContaining('uses the backreference \\1') },
        { path: 'output_schema/properties/t/pattern', message: expect.stringContaining('uses the lookahead (?!x)') },
      ],
    });
    expect(fx.entries('forge.created').at(-1)?.data).toMatchObject({ ok: false, kind: 'validation_failed' });
    expect(await fx.forge.callTool('twice', {})).toMatchObject({ ok: false, error: { kind: 'unknown_tool' } });
  });

  it('input: ^(a|a)*$ on 100000 hostile characters is validation_failed before any run; a matching input runs', async () => {
    const fx = await setup();
    const spec = py('count', 'print(json.dumps({"ok": True, "data": len(args["s"])}))', {
      input_schema: { type: 'object', properties: { s: { type: 'string', pattern: '^(a|a)*$' } }, required: ['s'] },
    });
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    for (const n of [30, 1000, 100_000]) {
      const env = await fx.forge.callTool('count', { s: `${'a'.repeat(n)}!` });
      expect(failed(env, 'validation_failed').message).toContain('input/s: must match pattern "^(a|a)*$"');
    }
    expect(fx.sandboxRuns('count')).toEqual([]);
    expect(okData(await fx.forge.callTool('count', { s: 'a'.repeat(1000) }))).toBe(1000);
  });

  it('output: a tool printing 100000 hostile characters against ^(a|aa)*$ is output_schema_failed', async () => {
    const fx = await setup();
    const spec = py('emit', 'print(json.dumps({"ok": True, "data": {"s": "a" * args["n"] + args["tail"]}}))', {
      output_schema: { type: 'object', properties: { s: { type: 'string', pattern: '^(a|aa)*$' } } },
    });
    expect((await fx.forge.forgeTool(spec)).ok).toBe(true);
    const env = await fx.forge.callTool('emit', { n: 100_000, tail: '!' });
    expect(failed(env, 'output_schema_failed').problems).toEqual([{ path: 'output/s', message: 'must match pattern "^(a|aa)*$"' }]);
    expect(okData(await fx.forge.callTool('emit', { n: 1000, tail: '' }))).toEqual({ s: 'a'.repeat(1000) });
  });
});
