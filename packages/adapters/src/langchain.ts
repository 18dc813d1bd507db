/**
 * forge's tools for LangChain.js (`@langchain/core`): structured tools with forge's JSON Schema,
 * answering as `content_and_artifact`: the content is what the model reads (`data`, or forge's
 * refusal with `status: "error"`), the artifact forge's whole envelope. LangChain checks the
 * input against the same schema before forge does (its error names the field). A `signal` in
 * the invoke config cancels the sandboxed run.
 */
import type { AgentTool, Forge } from '@forge/runner';
import { ToolMessage } from '@langchain/core/messages';
import { DynamicStructuredTool } from '@langchain/core/tools';
import { type AdapterOptions, modelText, toolsBy } from './shared.js';

/** One forge tool as a LangChain tool, named by its wire name. */
export function langchainTool(tool: AgentTool): DynamicStructuredTool {
  return new DynamicStructuredTool({
    name: tool.wireName,
    description: tool.description,
    schema: tool.inputSchema,
    responseFormat: 'content_and_artifact',
    verboseParsingErrors: true,
    func: async (input, _run, config) => {
      config?.signal?.throwIfAborted();
      const envelope = await tool.execute(input, config?.signal ? { signal: config.signal } : {});
      const text = modelText(envelope);
      const call = (config as { toolCall?: { id?: string } } | undefined)?.toolCall;
      if (envelope.ok || !call?.id) return [text, envelope];
      // A refusal is a tool message with status "error" (passed through as it is): the model reads forge's message.
      return [
        new ToolMessage({ tool_call_id: call.id, name: tool.wireName, status: 'error', content: text, artifact: envelope }),
        envelope,
      ];
    },
  });
}

/**
 * The tools `options`' caller may use: pass to `bindTools` and a tool node. The set is read when
 * called; bind a fresh one (after `Forge.on('toolsChanged')`) to see tools forged since.
 */
export async function langchainTools(forge: Pick<Forge, 'agentTools'>, options: AdapterOptions = {}): Promise<DynamicStructuredTool[]> {
  return Object.values(await toolsBy(forge, options, langchainTool));
}
