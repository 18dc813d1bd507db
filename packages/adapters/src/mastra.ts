/**
 * forge's tools for Mastra (`@mastra/core` 1): tools with forge's JSON Schema, keyed by wire
 * name. The model reads `data`, or forge's refusal message as the tool's error. Mastra checks the
 * input against the same schema before forge does (its message names the field). The agent's
 * `abortSignal` cancels the sandboxed run.
 */
import type { AgentTool, Forge } from '@forge/runner';
import { createTool } from '@mastra/core/tools';
import { type AdapterOptions, refusalText, toolsBy } from './shared.js';

/** A Mastra tool made by {@link mastraTool}. */
export type MastraTool = ReturnType<typeof createTool>;

/** One forge tool as a Mastra tool, its id the wire name. */
export function mastraTool(tool: AgentTool): MastraTool {
  return createTool({
    id: tool.wireName,
    description: tool.description,
    inputSchema: tool.inputSchema as Parameters<typeof createTool>[0]['inputSchema'],
    execute: async (input, context) => {
      const signal = (context as { abortSignal?: AbortSignal } | undefined)?.abortSignal;
      const envelope = await tool.execute(input, signal ? { signal } : {});
      if (envelope.ok) return envelope.data;
      // Mastra hands a thrown error's message to the model as the tool's error.
      throw new Error(refusalText(envelope));
    },
  }) as MastraTool;
}

/**
 * The tools `options`' caller may use, by wire name. Give an `Agent` a function that asks for
 * them (`tools: () => mastraTools(forge)`): Mastra resolves it at every `generate`/`stream`, so
 * tools forged meanwhile are there.
 */
export function mastraTools(forge: Pick<Forge, 'agentTools'>, options: AdapterOptions = {}): Promise<Record<string, MastraTool>> {
  return toolsBy(forge, options, mastraTool);
}
