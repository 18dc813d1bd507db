import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { bindsIn } from '../src/cards.js';
import { example, py, setup, writeAtomic } from './helpers.js';

const policy = {
  persona_sandbox_overrides: { net: { network: 'allow', allow_domains: ['example.org'] } },
  persona_secret_allow: { net: ['api_key'] },
  budgets: { ceilings: { timeout_ms: 10_000 } },
};

const reader = py('reader', 'import json, sys\nprint(json.dumps({"ok": True, "data": 1}))', {
  input_schema: {
    type: 'object',
    properties: { path: { type: 'string', 'x-bind': 'ro' }, out: { type: 'string', 'x-bind': 'rw' } },
    required: ['path'],
  },
  meta: { secrets: ['api_key'], timeout_ms: 60_000 },
});

describe('describeTools: each visible tool as a card', () => {
  it('says what a run may touch for the caller: binds, network, secrets, the budget after ceilings', async () => {
    const fx = await setup({ workspacePolicy: policy, vault: { api_key: 'k' } });
    expect(await fx.forge.forgeTool(reader, { persona: 'net' })).toMatchObject({ ok: true });
    const [card] = await fx.forge.describeTools({ persona: 'net' });
    expect(card).toMatchObject({
      name: 'reader',
      wireName: 'reader',
      origin: { kind: 'forged', scope: 'project', forgedBy: { persona: 'net' } },
      status: { state: 'active', version: 1 },
      cap: {
        runtime: 'python3',
        sandboxed: true,
        binds: [
          { at: '/properties/path', mode: 'ro' },
          { at: '/properties/out', mode: 'rw' },
        ],
        bindRoots: [fx.project],
        network: { network: 'allow', allow_domains: ['example.org'] },
        secrets: ['api_key'],
        limits: { timeout_ms: 10_000 },
        clamped: [{ field: 'timeout_ms', requested: 60_000, applied: 10_000 }],
      },
      policy: { persona: 'net', allowed: true },
    });
    const other = (await fx.forge.describeTools({ persona: 'other' }))[0];
    expect(other?.cap.network.network).toBe('deny');
    expect(other?.policy.allowed).toBe(false);
    expect(other?.policy.gates.find((g) => !g.ok)).toMatchObject({ gate: 'secrets', kind: 'secret_denied' });
  });

  it('a card that says refused names the kind a call gets, before anything runs', async () => {
    const fx = await setup({ workspacePolicy: policy, vault: { api_key: 'k' } });
    expect(await fx.forge.forgeTool(reader, { persona: 'net' })).toMatchObject({ ok: true });
    expect(await fx.forge.forgeTool(await example('fib'))).toMatchObject({ ok: true });
    const check = async (persona: string) => {
      for (const card of await fx.forge.describeTools({ persona })) {
        if (card.policy.allowed) continue;
        const gate = card.policy.gates.find((g) => !g.ok);
        const input = card.name === 'fib' ? { n: 3 } : { path: 'x' };
        const env = await fx.forge.callTool(card.name, input, { persona });
        expect(env, `${persona} ${card.name}`).toMatchObject({ ok: false, error: { kind: gate?.kind } });
      }
    };
    await check('other');
    writeAtomic(
      join(fx.project, '.forge', 'policy.json'),
      JSON.stringify({ ...policy, forbidden_tool_names: ['fib'], runtimes: { allow: ['node'] } }),
    );
    await expect.poll(async () => (await fx.forge.describeTools({ persona: 'net' })).every((c) => !c.policy.allowed)).toBe(true);
    const cards = await fx.forge.describeTools({ persona: 'net' });
    expect(cards.find((c) => c.name === 'fib')?.policy.gates[0]).toMatchObject({ gate: 'name', kind: 'name_forbidden' });
    expect(cards.find((c) => c.name === 'reader')?.policy.gates.find((g) => !g.ok)).toMatchObject({
      gate: 'runtime',
      kind: 'policy_denied',
    });
    await check('net');
    expect(fx.sandboxRuns('fib')).toHaveLength(0);
    expect(fx.sandboxRuns('reader')).toHaveLength(0);
  });

  it("shows the hooks each tool's calls meet: the global ones on every card, a tool's own on its card only; an untrusted one refuses", async () => {
    const fx = await setup();
    expect(await fx.forge.forgeTool(await example('fib'))).toMatchObject({ ok: true });
    expect(await fx.forge.forgeTool({ ...(await example('fib')), name: 'fib2' })).toMatchObject({ ok: true });
    const hook = (rel: string) => {
      const file = join(fx.home, 'hooks', rel);
      mkdirSync(join(file, '..'), { recursive: true });
      // Modes set whatever the umask: a group-writable hook or directory is not trusted.
      for (let d = join(file, '..'); d !== fx.home; d = join(d, '..')) chmodSync(d, 0o755);
      writeFileSync(file, '#!/bin/sh\nexit 0\n');
      chmodSync(file, 0o755);
      return file;
    };
    const all = hook('pre.d/10-all');
    const own = hook('tools/fib2/post.d/10-own');
    const byName = async () => Object.fromEntries((await fx.forge.describeTools()).map((c) => [c.name, c.policy]));
    const cards = await byName();
    const digest = expect.stringMatching(/^sha256:[0-9a-f]{64}$/);
    expect(cards.fib?.hooks).toEqual({ pre: [{ path: all, digest }], post: [] });
    expect(cards.fib2?.hooks).toEqual({ pre: [{ path: all, digest }], post: [{ path: own, digest }] });
    chmodSync(all, 0o775);
    const refused = await byName();
    for (const name of ['fib', 'fib2']) {
      expect(refused[name]?.allowed).toBe(false);
      expect(refused[name]?.gates.find((g) => !g.ok)).toMatchObject({
        gate: 'hooks',
        kind: 'hook_failed',
        message: expect.stringContaining('10-all is writable by its group'),
      });
    }
  });

  it('finds x-bind anywhere in a schema, escaping pointer tokens, and not inside data keywords', () => {
    expect(
      bindsIn({
        properties: { 'a/b~c': { 'x-bind': 'rw' }, list: { items: { 'x-bind': 'ro' } } },
        anyOf: [{ properties: { p: { 'x-bind': 'ro' } } }],
        default: { 'x-bind': 'rw' },
        enum: [{ 'x-bind': 'rw' }],
      }),
    ).toEqual([
      { at: '/properties/a~1b~0c', mode: 'rw' },
      { at: '/properties/list/items', mode: 'ro' },
      { at: '/anyOf/0/properties/p', mode: 'ro' },
    ]);
  });
});
