/**
 * A tool with many x-bind inputs: the launcher names a descriptor per bind and per-run file, and
 * past nine of them a one-digit shell cannot; such a run must still work (as root: with rw binds
 * staged), never fail as a tool that printed nothing.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { waitFor } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { okData, py, setup } from './helpers.js';

describe('many binds', () => {
  it('a tool with 6 read-only and 3 read-write bound paths runs, reads every one and writes every rw one', async () => {
    const fx = await setup();
    const data = join(fx.root, 'data');
    mkdirSync(data);
    const ro = Array.from({ length: 6 }, (_, i) => `in${i}`);
    const rw = Array.from({ length: 3 }, (_, i) => `out${i}`);
    for (const k of ro) writeFileSync(join(data, k), k);
    const properties = Object.fromEntries([
      ...ro.map((k) => [k, { type: 'string', 'x-bind': 'ro' }]),
      ...rw.map((k) => [k, { type: 'string', 'x-bind': 'rw' }]),
    ]);
    const made = await fx.forge.forgeTool(
      py(
        'many_binds',
        `got = {k: open(v).read() for k, v in args.items() if k.startswith("in")}
for k, v in args.items():
    if k.startswith("out"):
        open(v, "w").write("wrote " + k)
print(json.dumps({"ok": True, "data": got}))`,
        { input_schema: { type: 'object', properties } },
      ),
    );
    expect(made.ok, JSON.stringify(made)).toBe(true);
    writeFileSync(fx.forge.paths.workspacePolicy, JSON.stringify({ bind_roots: [fx.root] }));
    await waitFor('the workspace policy with bind_roots to be in force', () => {
      const p = fx.forge.policy();
      return p.ok && p.snapshot.policy.bind_roots.includes(fx.root);
    });
    const input = Object.fromEntries([...ro, ...rw].map((k) => [k, join(data, k)]));
    const env = await fx.forge.callTool('many_binds', input);
    expect(okData(env)).toEqual(Object.fromEntries(ro.map((k) => [k, k])));
    for (const k of rw) expect(readFileSync(join(data, k), 'utf8')).toBe(`wrote ${k}`);
  });
});
