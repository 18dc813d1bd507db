/**
 * @forge/adapters — forge's tools in agent frameworks. Each subpath turns `Forge.agentTools`
 * (one framework-neutral view of the forged and gateway tools a caller may use) into one
 * framework's tools; every call goes through `Forge.callTool`, so it meets the same gates,
 * sandbox and audit entry as a call over MCP:
 *
 * - `@forge/adapters/ai`: the Vercel AI SDK (`aiTools`)
 * - `@forge/adapters/openai-agents`: the OpenAI Agents SDK (`openaiAgentsTools`)
 * - `@forge/adapters/langchain`: LangChain.js (`langchainTools`)
 * - `@forge/adapters/mastra`: Mastra (`mastraTools`)
 *
 * This entry holds what they share: how an answer reads to a model.
 *
 * Public API. Everything exported here is a deliberate, documented decision.
 */
export { type AdapterOptions, modelText, refusalText } from './shared.js';
