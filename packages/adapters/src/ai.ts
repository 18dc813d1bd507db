/**
 * forge's tools for the Vercel AI SDK (`ai` 7): `dynamicTool`s keyed by wire name, for
 * `generateText` / `streamText` / agents. Each call goes through `Forge.callTool`; the tool's
 * result (in `steps[].toolResults`) is forge's whole envelope, run id and all, while the model
 * reads `data`, or forge's refusal as an `error-text` part (never a generic error). The SDK's
 * `abortSignal` cancels the sandboxed run.
 */
import type { AgentTool, Envelope, Forge } from '@forge/runner';
import { dynamicTool, type JSONValue, jsonSchema } from 'ai';
import { type AdapterOptions, refusalText, toolsBy } from './shared.js';

/** An AI SDK tool whose input and output are known at run time only. */
export type DynamicTool = ReturnType<typeof dynamicTool>;

/** One forge tool as an AI SDK tool (input is validated by forge, which names the failing field). */
export function aiTool(tool: AgentTool): DynamicTool {
  return dynamicTool({
    ...(tool.title ? { title: tool.title } : {}),
    description: tool.description,
    inputSchema: jsonSchema(tool.inputSchema as Parameters<typeof jsonSchema>[0]),
    execute: (input, { abortSignal }) => tool.execute(input, abortSignal ? { signal: abortSignal } : {}),
    toModelOutput: ({ output }) => {
      const envelope = output as Envelope;
      if (!envelope.ok) return { type: 'error-text', value: refusalText(envelope) };
      if (typeof envelope.data === 'string') return { type: 'text', value: envelope.data };
      return { type: 'json', value: (envelope.data ?? null) as JSONValue };
    },
  });
}

/**
 * The tools `options`' caller may use, by wire name: pass as `tools`. The set is read when
 * called; ask again for each `generateText` (or after `Forge.on('toolsChanged')`) to see tools
 * forged or removed since.
 */
export function aiTools(forge: Pick<Forge, 'agentTools'>, options: AdapterOptions = {}): Promise<Record<string, DynamicTool>> {
  return toolsBy(forge, options, aiTool);
}
