/** A damaged tool file over MCP: not offered in tools/list, marked in forge_list, refused, removable with forge_remove. */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { call, connect, example, forgeOk, newForge, tempDirs } from './helpers.js';

describe('a damaged tool file', () => {
  it('drops out of tools/list (list_changed), is marked in forge_list, refused as tool_damaged, and forge_remove takes it away', async () => {
    const dirs = tempDirs();
    writeFileSync(join(dirs.home, 'policy.json'), JSON.stringify({ operator_personas: ['ops'], breakers: { per_tool_rpm: 100000 } }));
    const forge = await newForge(dirs, { watch: true });
    const { client, changes } = await connect(forge);
    await forgeOk(client, await example('fib'));
    expect((await client.listTools()).tools.map((t) => t.name)).toContain('fib');

    const file = join(dirs.project, '.forge', 'tools', 'fib.json');
    const text = readFileSync(file, 'utf8');
    const changed = changes.next();
    writeFileSync(file, text.slice(0, Math.floor(text.length / 2)));
    await changed;
    // Never offered to the model as callable.
    expect((await client.listTools()).tools.map((t) => t.name)).not.toContain('fib');
    const listed = await call(client, 'forge_list');
    expect(listed.envelope).toEqual({
      ok: true,
      data: { tools: [{ name: 'fib', scope: 'project', damaged: true, where: file, problem: expect.stringMatching(/^not valid JSON: /) }] },
      meta: {},
    });

    for (const [name, args] of [
      ['fib', { n: 3 }],
      ['forge_call', { name: 'fib', input: { n: 3 } }],
    ] as const) {
      const r = await call(client, name, args);
      expect(r.result.isError).toBe(true);
      expect(r.envelope).toMatchObject({
        ok: false,
        error: { kind: 'tool_damaged', message: expect.stringContaining(`its file ${file} cannot be used (not valid JSON`) },
      });
    }

    const { client: ops } = await connect(forge, { persona: 'ops' });
    const removed = await call(ops, 'forge_remove', { name: 'fib' });
    expect(removed.envelope).toEqual({ ok: true, data: { name: 'fib', scope: 'project', damaged: true, removed: true }, meta: {} });
    expect((await call(client, 'forge_list')).envelope).toEqual({ ok: true, data: { tools: [] }, meta: {} });
  });
});
