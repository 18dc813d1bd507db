import { waitFor } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import type { SourcedTool, ToolSource } from '../src/index.js';
import { failed, okData, py, runStarted, setup } from './helpers.js';

/**
 * `Forge.agentTools`: one framework-neutral view of forged and source tools, whose `execute`
 * is `callTool` (the same gates, sandbox and audit entry), refusals as envelopes, the caller's
 * authority per call, cancellation, and a list that follows the Forge's changes.
 */

const counter = py('code.count', 'print(json.dumps({"ok": True, "data": {"lines": len(open(args["path"]).read().splitlines())}}))', {
  description: 'counts the lines of a file',
  input_schema: {
    type: 'object',
    properties: { path: { type: 'string', 'x-bind': 'ro' } },
    required: ['path'],
    additionalProperties: false,
  },
  output_schema: {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    type: 'object',
    properties: { lines: { type: 'integer' } },
    required: ['lines'],
  },
});

const upstream: SourcedTool = {
  name: 'up.echo',
  description: 'echoes its message',
  input_schema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] },
  digest: `sha256:${'c'.repeat(64)}`,
  origin: { kind: 'gateway', server: 'up', tool: 'echo', sandboxed: true, transport: 'stdio' },
  annotations: { title: 'Echo', readOnlyHint: true, made_up: 3 },
};

/** A source serving `upstream`, answering with what it was sent. */
function echoSource(): ToolSource {
  return {
    kind: 'gateway',
    attach() {},
    list: async () => [upstream],
    resolve: async (name) => (name === upstream.name ? upstream : undefined),
    execute: async (job) => ({ ok: true, data: { echoed: (job.input as { message: string }).message } }),
    onChange: () => () => {},
    close: async () => {},
  };
}

describe('Forge.agentTools', () => {
  it('lists forged and source tools in one shape: wire names, schemas without x-*, host paths and origin in the description, hints', async () => {
    const fx = await setup({ forge: { sources: [echoSource()] } });
    expect((await fx.forge.forgeTool(counter)).ok).toBe(true);
    const tools = await fx.forge.agentTools();
    expect(tools.map((t) => [t.name, t.wireName])).toEqual([
      ['code.count', 'code__count'],
      ['up.echo', 'up__echo'],
    ]);
    const [count, echo] = tools;
    expect(count?.inputSchema).toEqual({
      type: 'object',
      properties: { path: { type: 'string' } },
      required: ['path'],
      additionalProperties: false,
    });
    expect(count?.outputSchema).toEqual({ type: 'object', properties: { lines: { type: 'integer' } }, required: ['lines'] });
    expect(count?.description).toContain('counts the lines of a file');
    expect(count?.description).toContain('Host paths: path (read-only)');
    expect(count?.annotations).toEqual({ readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false });
    expect(count?.origin).toMatchObject({ kind: 'forged', scope: 'project', version: 1, runtime: 'python3' });
    expect(echo?.title).toBe('Echo');
    expect(echo?.annotations).toEqual({ title: 'Echo', readOnlyHint: true });
    expect(echo?.origin).toEqual({ kind: 'gateway', server: 'up', tool: 'echo', digest: upstream.digest, sandboxed: true });
    expect(echo?.description).toContain('echo of the gateway server "up", sandboxed');
  });

  it('execute is callTool: the answer, its audit entry, refusals as envelopes with their message, the caller per call', async () => {
    const fx = await setup({ forge: { sources: [echoSource()] } });
    expect((await fx.forge.forgeTool(counter)).ok).toBe(true);
    const file = fx.file('notes.txt', 'a\nb\nc\n');
    const tools = await fx.forge.agentTools({ persona: 'writer' });
    const count = tools.find((t) => t.name === 'code.count');
    const echo = tools.find((t) => t.name === 'up.echo');
    expect(okData(await (count?.execute({ path: file }) ?? Promise.reject(new Error('no code.count'))))).toEqual({ lines: 3 });
    expect(okData(await (echo?.execute({ message: 'hi' }) ?? Promise.reject(new Error('no up.echo'))))).toEqual({ echoed: 'hi' });
    expect(fx.entries('forge.called').map((e) => [e.data.name, e.data.persona])).toEqual([['code.count', 'writer']]);
    expect(fx.entries('gateway.called')).toHaveLength(1);

    const invalid = await count?.execute({ path: 3 });
    expect(invalid && failed(invalid, 'validation_failed').message).toMatch(/input\/path: must be string/);
    // The caller's authority is the call's, not the listing's: an ACL given per call applies.
    const denied = await count?.execute({ path: file }, { caller: { allowedTools: 'up.*' } });
    expect(denied && failed(denied, 'acl.persona_denied').message).toContain('code.count');
    // A persona whose ACL leaves a tool out is not offered it.
    expect((await fx.forge.agentTools({ allowedTools: 'up.*' })).map((t) => t.name)).toEqual(['up.echo']);
  });

  it('a signal cancels the run; the list follows forges and removals (toolsChanged)', async () => {
    const fx = await setup();
    const sleeper = py('sleeper', 'import time\ntime.sleep(30)\nprint(json.dumps({"ok": True, "data": 1}))');
    expect((await fx.forge.forgeTool(sleeper)).ok).toBe(true);
    const [tool] = await fx.forge.agentTools();
    const ac = new AbortController();
    const call = tool?.execute({}, { signal: ac.signal });
    await runStarted(fx.forge.paths.runsDir);
    ac.abort(new Error('the user stopped the agent'));
    const answer = await call;
    expect(answer && failed(answer, 'cancelled').message).toBe('the user stopped the agent; the tool was killed');

    let changes = 0;
    const off = fx.forge.on('toolsChanged', () => changes++);
    expect((await fx.forge.forgeTool(counter)).ok).toBe(true);
    await waitFor('toolsChanged after a forge', () => changes > 0);
    expect((await fx.forge.agentTools()).map((t) => t.name)).toEqual(['code.count', 'sleeper']);
    expect((await fx.forge.removeTool('sleeper')).ok).toBe(true);
    expect((await fx.forge.agentTools()).map((t) => t.name)).toEqual(['code.count']);
    off();
  });
});
