/**
 * Each adapter driven through its framework's own tool-execution path, with a scripted model in
 * place of an LLM (each framework's own mock where it has one): the framework parses the model's
 * tool call, runs the tool (through forge: a real sandboxed run, its audit entry), and hands the
 * result to the model's next turn, which is where the assertions look. Per framework: an answer,
 * forge's own refusal message reaching the model (a tool removed after it was listed), a
 * cancelled run, and a tool forged mid-session reaching the model.
 */

import { AIMessage, type BaseMessage, HumanMessage, ToolMessage } from '@langchain/core/messages';
import { Agent as MastraAgent } from '@mastra/core/agent';
import {
  Agent,
  type AgentInputItem,
  type Model,
  type ModelRequest,
  type ModelResponse,
  run,
  setTracingDisabled,
  Usage,
} from '@openai/agents';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';
import { describe, expect, it } from 'vitest';
import { aiTools } from '../src/ai.js';
import { langchainTools } from '../src/langchain.js';
import { mastraTools } from '../src/mastra.js';
import { openaiAgentsTools } from '../src/openai-agents.js';
import { fixture, LATE } from './fixture.js';

setTracingDisabled(true);

const UNKNOWN = /forge refused the call \(unknown_tool\): no forged tool is named "math\.fib"/;

// --- the AI SDK's (and Mastra's) language-model mock: one scripted answer per model call ---
const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
const toolCall = (toolName: string, input: unknown, id = 'call-1') => ({
  content: [{ type: 'tool-call' as const, toolCallId: id, toolName, input: JSON.stringify(input) }],
  finishReason: { unified: 'tool-calls' as const, raw: undefined },
  usage,
  warnings: [],
});
const say = (text: string) => ({
  content: [{ type: 'text' as const, text }],
  finishReason: { unified: 'stop' as const, raw: undefined },
  usage,
  warnings: [],
});
/** The tool results the model was shown in its `i`-th call. */
function shownTo(model: MockLanguageModelV4, i: number): unknown[] {
  const prompt = model.doGenerateCalls[i]?.prompt ?? [];
  return prompt.filter((m) => m.role === 'tool').flatMap((m) => m.content.map((c) => (c as { output?: unknown }).output));
}

describe('Vercel AI SDK (generateText)', () => {
  it('runs a forged tool, shows the model data or forge refusal, cancels, and sees a tool forged mid-session', async () => {
    const fx = await fixture();
    const model = new MockLanguageModelV4({
      doGenerate: [toolCall('math__fib', { n: 10 }), toolCall('math__fib', { n: -1 }, 'call-2'), say('done')],
    });
    const first = await generateText({ model, prompt: 'fib 10', tools: await aiTools(fx.forge), stopWhen: stepCountIs(5) });
    expect(first.text).toBe('done');
    // The host gets forge's whole envelope; the model reads data, or forge's refusal (its validation names the field).
    expect(first.steps[0]?.toolResults[0]?.output).toMatchObject({
      ok: true,
      data: { n: 10, fib: '55' },
      meta: { run_id: expect.any(String) },
    });
    expect(shownTo(model, 1)).toEqual([{ type: 'json', value: { n: 10, fib: '55' } }]);
    expect(shownTo(model, 2).at(-1)).toEqual({
      type: 'error-text',
      value: expect.stringMatching(/^forge refused the call \(validation_failed\): input\/n: must be >= 0/),
    });

    // Cancelled: the SDK's abortSignal stops the sandboxed run; forge audits the call as cancelled.
    const before = fx.runs();
    const ac = new AbortController();
    const sleepy = new MockLanguageModelV4({ doGenerate: [toolCall('sleeper', {}), say('never')] });
    const running = generateText({
      model: sleepy,
      prompt: 'sleep',
      tools: await aiTools(fx.forge),
      stopWhen: stepCountIs(3),
      abortSignal: ac.signal,
    });
    await fx.runStarted(before);
    ac.abort(new Error('the user stopped the agent'));
    await expect(running).rejects.toThrow('the user stopped the agent');
    expect(await fx.called('sleeper')).toMatchObject({ ok: false, kind: 'cancelled' });

    // Mid-session: a tool forged since, and one removed since (refused with forge's own message).
    const stale = await aiTools(fx.forge);
    await fx.add(LATE);
    expect((await fx.forge.removeTool('math.fib')).ok).toBe(true);
    const fresh = await aiTools(fx.forge);
    expect(Object.keys(fresh).sort()).toEqual(['late__greet', 'sleeper']);
    const later = new MockLanguageModelV4({ doGenerate: [toolCall('late__greet', { who: 'ada' }), say('ok')] });
    await generateText({ model: later, prompt: 'greet', tools: fresh, stopWhen: stepCountIs(3) });
    expect(shownTo(later, 1)).toEqual([{ type: 'text', value: 'hello ada' }]);
    const old = new MockLanguageModelV4({ doGenerate: [toolCall('math__fib', { n: 3 }), say('ok')] });
    await generateText({ model: old, prompt: 'fib', tools: stale, stopWhen: stepCountIs(3) });
    expect(shownTo(old, 1)).toEqual([{ type: 'error-text', value: expect.stringMatching(UNKNOWN) }]);
  });
});

// --- the OpenAI Agents SDK: a Model of the test's own, answering from a script ---
type Turn = (request: ModelRequest) => AgentInputItem[] | Promise<AgentInputItem[]>;
function scripted(turns: Turn[]): Model & { requests: ModelRequest[] } {
  const requests: ModelRequest[] = [];
  return {
    requests,
    async getResponse(request: ModelRequest): Promise<ModelResponse> {
      requests.push(request);
      const turn = turns[requests.length - 1];
      if (!turn) throw new Error(`the script has no turn ${requests.length}`);
      return { usage: new Usage(), output: (await turn(request)) as ModelResponse['output'], responseId: `r${requests.length}` };
    },
    // biome-ignore lint/correctness/useYield: never streamed here
    async *getStreamedResponse() {
      throw new Error('not streamed');
    },
  };
}
const fnCall =
  (name: string, args: unknown, callId = 'c1'): Turn =>
  () => [{ type: 'function_call', callId, name, arguments: JSON.stringify(args), status: 'completed' }];
const final =
  (text: string): Turn =>
  () => [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text }] }];
/** What the model was shown of each tool call in its request `i`. */
function outputsIn(model: { requests: ModelRequest[] }, i: number): unknown[] {
  const input = model.requests[i]?.input;
  return Array.isArray(input)
    ? input.filter((x) => x.type === 'function_call_result').map((x) => (x as { output: { text?: string } }).output.text)
    : [];
}

describe('OpenAI Agents SDK (run)', () => {
  it('runs a forged tool, shows the model data or forge refusal, cancels, and sees a tool forged mid-run', async () => {
    const fx = await fixture();
    const agent = new Agent({ name: 'a', instructions: 'use tools', tools: await openaiAgentsTools(fx.forge) });
    // The third turn forges a tool and gives the agent the fresh list: the fourth calls it.
    const model = scripted([
      fnCall('math__fib', { n: 10 }),
      fnCall('math__fib', { n: 'ten' }, 'c2'),
      // The agent reads its tools at each turn: a list given now is there from the next one.
      async (request) => {
        await fx.add(LATE);
        agent.tools = await openaiAgentsTools(fx.forge);
        return fnCall('math__fib', { n: 1 }, 'c3')(request);
      },
      fnCall('late__greet', { who: 'ada' }, 'c4'),
      final('done'),
    ]);
    agent.model = model;
    const result = await run(agent, 'go');
    expect(outputsIn(model, 1)).toEqual(['{"n":10,"fib":"55"}']);
    expect(outputsIn(model, 2).at(-1)).toMatch(/^forge refused the call \(validation_failed\): input\/n: must be integer/);
    expect(outputsIn(model, 4).at(-1)).toBe('hello ada');
    expect(result.finalOutput).toBe('done');

    // Cancelled through run()'s signal.
    const before = fx.runs();
    const ac = new AbortController();
    const sleepy = new Agent({
      name: 's',
      instructions: 'sleep',
      tools: await openaiAgentsTools(fx.forge),
      model: scripted([fnCall('sleeper', {}), final('never')]),
    });
    const running = run(sleepy, 'sleep', { signal: ac.signal });
    await fx.runStarted(before);
    ac.abort(new Error('the user stopped the agent'));
    await expect(running).rejects.toThrow('the user stopped the agent');
    expect(await fx.called('sleeper')).toMatchObject({ ok: false, kind: 'cancelled' });

    // A tool removed after it was listed: forge's refusal reaches the model.
    const stale = new Agent({ name: 'o', instructions: 'x', tools: await openaiAgentsTools(fx.forge) });
    expect((await fx.forge.removeTool('math.fib')).ok).toBe(true);
    const old = scripted([fnCall('math__fib', { n: 3 }), final('ok')]);
    stale.model = old;
    await run(stale, 'fib');
    expect(outputsIn(old, 1)).toEqual([expect.stringMatching(UNKNOWN)]);
  });
});

// --- LangChain: a chat model of the test's own that answers from a script; the loop is a tool node's ---
class ScriptedChat {
  readonly seen: BaseMessage[][] = [];
  constructor(private readonly turns: ((seen: BaseMessage[]) => AIMessage)[]) {}
  invoke(messages: BaseMessage[]): AIMessage {
    this.seen.push([...messages]);
    const turn = this.turns[this.seen.length - 1];
    if (!turn) throw new Error(`the script has no turn ${this.seen.length}`);
    return turn(messages);
  }
}
/** What a LangGraph tool node does with a model's tool calls: invoke each tool with the call, a failure as an error message. */
async function toolNode(
  tools: Awaited<ReturnType<typeof langchainTools>>,
  message: AIMessage,
  signal?: AbortSignal,
): Promise<ToolMessage[]> {
  const out: ToolMessage[] = [];
  for (const call of message.tool_calls ?? []) {
    const tool = tools.find((t) => t.name === call.name);
    try {
      if (!tool) throw new Error(`no tool ${call.name}`);
      out.push((await tool.invoke({ ...call, type: 'tool_call' }, signal ? { signal } : {})) as ToolMessage);
    } catch (err) {
      out.push(
        new ToolMessage({ tool_call_id: call.id ?? '', name: call.name, status: 'error', content: `Error: ${(err as Error).message}` }),
      );
    }
  }
  return out;
}
const calls = (...c: [string, unknown][]) =>
  new AIMessage({ content: '', tool_calls: c.map(([name, args], i) => ({ id: `t${i}`, name, args: args as Record<string, unknown> })) });

describe('LangChain.js (tool calls through the tools)', () => {
  it('runs a forged tool, shows the model data or forge refusal, cancels, and sees a tool forged mid-session', async () => {
    const fx = await fixture();
    let tools = await langchainTools(fx.forge);
    const model = new ScriptedChat([() => calls(['math__fib', { n: 10 }], ['math__fib', { n: -1 }]), () => new AIMessage('done')]);
    const messages: BaseMessage[] = [new HumanMessage('fib')];
    for (let step = 0; step < 3; step++) {
      const answer = model.invoke(messages);
      messages.push(answer);
      if (!answer.tool_calls?.length) break;
      messages.push(...(await toolNode(tools, answer)));
    }
    const shown = (model.seen[1] ?? []).filter((m): m is ToolMessage => m instanceof ToolMessage);
    expect(shown.map((m) => [m.status, m.content])).toEqual([
      ['success', '{"n":10,"fib":"55"}'],
      // LangChain checks the input against the schema before forge does; its message names the field.
      ['error', expect.stringMatching(/did not match expected schema[\s\S]*minimum/)],
    ]);
    expect(shown[0]?.artifact).toMatchObject({ ok: true, meta: { run_id: expect.any(String) } });

    const before = fx.runs();
    const ac = new AbortController();
    const running = toolNode(tools, calls(['sleeper', {}]), ac.signal);
    await fx.runStarted(before);
    ac.abort(new Error('the user stopped the agent'));
    expect((await running)[0]?.content).toMatch(/the user stopped the agent/);
    expect(await fx.called('sleeper')).toMatchObject({ ok: false, kind: 'cancelled' });

    const stale = tools;
    await fx.add(LATE);
    expect((await fx.forge.removeTool('math.fib')).ok).toBe(true);
    tools = await langchainTools(fx.forge);
    expect(tools.map((t) => t.name).sort()).toEqual(['late__greet', 'sleeper']);
    expect((await toolNode(tools, calls(['late__greet', { who: 'ada' }])))[0]?.content).toBe('hello ada');
    const refused = (await toolNode(stale, calls(['math__fib', { n: 3 }])))[0];
    expect([refused?.status, refused?.content]).toEqual(['error', expect.stringMatching(UNKNOWN)]);
    expect(refused?.artifact).toMatchObject({ ok: false, error: { kind: 'unknown_tool' } });
  });
});

/** Mastra's model type comes from its own copy of the AI SDK's provider types: the same shape. */
const forMastra = (m: MockLanguageModelV4) => m as unknown as ConstructorParameters<typeof MastraAgent>[0]['model'];

describe('Mastra (Agent.generate)', () => {
  it('runs a forged tool, shows the model data or forge refusal, cancels, and sees a tool forged mid-session', async () => {
    const fx = await fixture();
    const model = new MockLanguageModelV4({
      doGenerate: [toolCall('math__fib', { n: 10 }), say('done'), toolCall('late__greet', { who: 'ada' }), say('ok')],
    });
    // Tools as a function: Mastra asks at every generate.
    const agent = new MastraAgent({
      id: 'a',
      name: 'a',
      instructions: 'use tools',
      model: forMastra(model),
      tools: () => mastraTools(fx.forge),
    });
    expect((await agent.generate('fib', { maxSteps: 3 })).text).toBe('done');
    expect(shownTo(model, 1)).toEqual([{ type: 'json', value: { n: 10, fib: '55' } }]);
    await fx.add(LATE);
    await agent.generate('greet', { maxSteps: 3 });
    expect(shownTo(model, 3)).toEqual([{ type: 'text', value: 'hello ada' }]);

    // Cancelled: Mastra's abortSignal stops the run (generate itself settles without a result).
    const before = fx.runs();
    const ac = new AbortController();
    const sleepy = new MastraAgent({
      id: 's',
      name: 's',
      instructions: 'sleep',
      model: forMastra(new MockLanguageModelV4({ doGenerate: [toolCall('sleeper', {}), say('never')] })),
      tools: await mastraTools(fx.forge),
    });
    const running = sleepy.generate('sleep', { maxSteps: 3, abortSignal: ac.signal }).catch((err: unknown) => err);
    await fx.runStarted(before);
    ac.abort(new Error('the user stopped the agent'));
    await running;
    expect(await fx.called('sleeper')).toMatchObject({ ok: false, kind: 'cancelled' });

    // A tool removed after it was listed: forge's refusal is the tool's error the model reads.
    const staleModel = new MockLanguageModelV4({ doGenerate: [toolCall('math__fib', { n: 3 }), say('ok')] });
    const stale = new MastraAgent({
      id: 'o',
      name: 'o',
      instructions: 'x',
      model: forMastra(staleModel),
      tools: await mastraTools(fx.forge),
    });
    expect((await fx.forge.removeTool('math.fib')).ok).toBe(true);
    await stale.generate('fib', { maxSteps: 3 });
    expect(shownTo(staleModel, 1)).toEqual([{ type: 'error-text', value: expect.stringMatching(UNKNOWN) }]);
  });
});
