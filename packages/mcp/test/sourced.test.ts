import type { SourcedTool, ToolSource } from '@forge/runner';
import { describe, expect, it } from 'vitest';
import { connect, newForge, tempDirs } from './helpers.js';

/**
 * Tools of a tool source (the gateway's upstream tools) on the MCP surface: listed after the
 * forged tools with where they come from, called through the engine, and answered with the
 * upstream's own content blocks. The source is the test's own, in process; the gateway's tests
 * and the app's end-to-end test drive real upstream servers.
 */

const IMAGE = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';

function source(answer: (name: string) => unknown): { source: ToolSource; withdraw(name: string): void } {
  const tool = (name: string, extra: Partial<SourcedTool> = {}): SourcedTool => ({
    name: `up.${name}`,
    description: `upstream ${name}`,
    input_schema: { type: 'object' },
    digest: `sha256:${'d'.repeat(64)}`,
    origin: { kind: 'gateway', server: 'up', tool: name, sandboxed: true, transport: 'stdio' },
    annotations: { readOnlyHint: true },
    ...extra,
  });
  let tools = [tool('blocks'), tool('odd'), tool('typed', { output_schema: { type: 'object', properties: { n: { type: 'number' } } } })];
  const listeners = new Set<(names: string[]) => void>();
  return {
    source: {
      kind: 'gateway',
      attach() {},
      list: async () => tools,
      resolve: async (name) => tools.find((t) => t.name === name),
      execute: async (job) => ({ ok: true, data: answer(job.tool.origin.tool) }),
      onChange(l) {
        listeners.add(l);
        return () => listeners.delete(l);
      },
      close: async () => {},
    },
    /** The upstream withdraws a tool (a changed one is withheld), and says so. */
    withdraw(name) {
      tools = tools.filter((t) => t.name !== name);
      for (const l of listeners) l([name]);
    },
  };
}

describe('tool sources on the MCP surface', () => {
  it('lists them after the forged tools with _meta.forge; answers with the upstream blocks, the envelope in structuredContent; odd blocks fall back to the envelope; a source that withdraws a tool is list_changed', async () => {
    const s = source((name) =>
      name === 'blocks'
        ? {
            content: [
              { type: 'text', text: 'from upstream' },
              { type: 'image', data: IMAGE, mimeType: 'image/png' },
            ],
          }
        : name === 'odd'
          ? { content: [{ type: 'hologram', text: 'x' }] }
          : { n: 7 },
    );
    const forge = await newForge(tempDirs(), { sources: [s.source] });
    const { client, changes } = await connect(forge);
    const listed = (await client.listTools()).tools;
    const blocks = listed.find((t) => t.name === 'up__blocks');
    expect(blocks?._meta?.forge).toMatchObject({
      name: 'up.blocks',
      source: 'gateway',
      server: 'up',
      upstream_tool: 'blocks',
      sandboxed: true,
    });
    expect(blocks?.annotations?.readOnlyHint).toBe(true);
    expect(blocks?.description).toContain('of the gateway server "up", sandboxed');
    expect(listed.find((t) => t.name === 'up__typed')?.outputSchema).toEqual({ type: 'object', properties: { n: { type: 'number' } } });

    const r = await client.callTool({ name: 'up__blocks', arguments: {} });
    expect(r.content).toEqual([
      { type: 'text', text: 'from upstream' },
      { type: 'image', data: IMAGE, mimeType: 'image/png' },
    ]);
    expect(r.structuredContent).toMatchObject({ ok: true, meta: { sandbox: 'gateway+bwrap' } });

    const odd = await client.callTool({ name: 'up__odd', arguments: {} });
    const first = (odd.content as { type: string; text: string }[])[0];
    expect(JSON.parse(first?.text ?? 'null')).toMatchObject({ ok: true, data: { content: [{ type: 'hologram' }] } });

    const typed = await client.callTool({ name: 'up__typed', arguments: {} });
    expect(typed.structuredContent).toEqual({ n: 7 });

    const next = changes.next();
    s.withdraw('up.odd');
    await next;
    expect((await client.listTools()).tools.map((t) => t.name)).not.toContain('up__odd');
  });
});
