/**
 * forge's tools for the OpenAI Agents SDK for JS (`@openai/agents`): function tools with forge's
 * JSON Schema as their parameters (`strict: false`: forge validates, and names the failing
 * field). The model reads `data` as text, or forge's refusal message; `run(agent, input,
 * { signal })` cancels the sandboxed run.
 */
import type { AgentTool, Forge } from '@forge/runner';
import { type FunctionTool, tool as functionTool, type JsonSchemaDefinition } from '@openai/agents';
import { type AdapterOptions, modelText, toolsBy } from './shared.js';

/** The SDK's type of a non-strict JSON Schema (any JSON Schema of an object, sent as it is). */
type NonStrictSchema = Extract<JsonSchemaDefinition['schema'], { additionalProperties: true }>;

/** One forge tool as an OpenAI Agents function tool, named by its wire name. */
export function openaiAgentsTool(tool: AgentTool): FunctionTool {
  return functionTool({
    name: tool.wireName,
    description: tool.description,
    parameters: tool.inputSchema as unknown as NonStrictSchema,
    strict: false,
    execute: async (input, _context, details) => modelText(await tool.execute(input, details?.signal ? { signal: details.signal } : {})),
    // forge answers refusals itself; what throws is forge failing, said as it is.
    errorFunction: (_context, err) => `forge could not run ${tool.name}: ${err instanceof Error ? err.message : String(err)}`,
  }) as unknown as FunctionTool;
}

/**
 * The tools `options`' caller may use: pass as an `Agent`'s `tools`. The agent reads its
 * `tools` at every turn, so assigning a fresh list (after `Forge.on('toolsChanged')`) takes
 * effect on the next turn.
 */
export async function openaiAgentsTools(forge: Pick<Forge, 'agentTools'>, options: AdapterOptions = {}): Promise<FunctionTool[]> {
  return Object.values(await toolsBy(forge, options, openaiAgentsTool));
}
