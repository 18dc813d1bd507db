/** What the adapters share: the caller they list for, how an answer reads to a model, the listing. */
import type { AgentTool, CallContext, Envelope, ErrorEnvelope, Forge } from '@forge/runner';

/** What every adapter takes: who calls (persona, session, task, allowed tools). */
export type AdapterOptions = Omit<CallContext, 'signal' | 'onEvent'>;

/**
 * What a model reads of a refusal: forge's kind and its message, which says what was wrong and
 * what to do (`validation_failed: input/n: must be >= 0`).
 */
export function refusalText(envelope: ErrorEnvelope): string {
  return `forge refused the call (${envelope.error.kind}): ${envelope.error.message}`;
}

/** What a model reads of an answer: `data` (a string as it is, anything else as JSON), or the refusal. */
export function modelText(envelope: Envelope): string {
  if (!envelope.ok) return refusalText(envelope);
  return typeof envelope.data === 'string' ? envelope.data : (JSON.stringify(envelope.data) ?? 'null');
}

/**
 * The tools `options`' caller may use, as `make` turns each into a framework's tool, keyed by
 * wire name (the name function-calling APIs accept). Used by every adapter.
 */
export async function toolsBy<T>(
  forge: Pick<Forge, 'agentTools'>,
  options: AdapterOptions,
  make: (tool: AgentTool) => T,
): Promise<Record<string, T>> {
  const out: Record<string, T> = {};
  for (const tool of await forge.agentTools(options)) out[tool.wireName] = make(tool);
  return out;
}
