/**
 * `tools/call`: a table of named routes (the toolsmith's approve and propose tools, forge's
 * meta-tools, a tool call run as a task, a forged or gateway tool), and the steps every call
 * shares done once around it: its place in flight, its signal, the refusal after the shutdown
 * began, the list_changed the client hears before the answer, and the answer as a tool result.
 */
import type { CallContext, Envelope, Forge } from '@forge/runner';
import {
  type CallToolRequest,
  type CallToolResult,
  type ClientCapabilities,
  MissingRequiredClientCapabilityError,
  ProtocolError,
  type ServerContext,
} from '@modelcontextprotocol/server';
import { runApprove } from './approveTool.js';
import { clientSignal, joinSignals } from './callSignals.js';
import type { Inflight, UnansweredCalls } from './inflight.js';
import type { ListingMark, ToolListing } from './listing.js';
import { isMetaTool, runMetaTool } from './metaTools.js';
import type { ToolView } from './schema.js';
import { startTask } from './taskCalls.js';
import { declaresTasks, TASKS_EXTENSION, type TaskStore } from './tasks.js';
import { toolEvents, toResult, withFiles } from './toolResults.js';
import { isToolsmithTool, runToolsmithTool, type ToolsmithSurface } from './toolsmithTools.js';

/** What the routes use of the server that answers the call (built once per server). */
export interface CallPorts {
  /** The engine, once open. */
  ready(): Forge | Promise<Forge>;
  /** The server's caller context (each call's adds its signal and events). */
  ctx: CallContext;
  /** The persona the toolsmith sees. */
  persona: string;
  smith: ToolsmithSurface | undefined;
  /** The tasks of the entry (2026 era only). */
  tasks: { store: TaskStore; owner: string } | undefined;
  inflight: Inflight;
  unanswered: UnansweredCalls;
  listing: ToolListing;
  /** The client capabilities a request runs under. */
  declared(extra: ServerContext): ClientCapabilities | undefined;
  /** True for a per-request instance (2026 HTTP): no transport to watch, its answer is handed over when the handler returns. */
  answeredOnReturn(): boolean;
}

/** One tool call as the routes see it. */
export interface ToolCall {
  name: string;
  args: Record<string, unknown>;
  /** Set once the shutdown began: a signal already aborted for that reason. */
  late: AbortSignal | undefined;
  /** The server's context with the call's own signal and events. */
  ctx: CallContext;
  extra: ServerContext;
  /** The view of the tool the call names (looked up once, on first use). */
  view(): Promise<ToolView | undefined>;
  /** Lets go of the call's place in flight. */
  release(): void;
}

/**
 * A route's answer: an envelope, which the shared steps turn into the tool result (with the
 * tool's view, and the files it names when `files` is the engine), or a result as it is (a task
 * started, a question for the human) with no list_changed step.
 */
type RouteAnswer = { envelope: Envelope; view?: ToolView; files?: Forge } | { result: CallToolResult };

/** What the client hears of list changes before a route's answer. */
type Announce =
  /** A toolsmith switched on or off is noticed. */
  | 'toolsmith'
  /** That, and a check under way is waited for (the client's call changed the tools). */
  | 'settled'
  /** That, and a change the Forge reported since the call began is announced even when the client's view is the same. */
  | 'own-change';

interface CallRoute {
  readonly name: 'approve' | 'toolsmith' | 'meta' | 'task' | 'tool';
  matches(call: ToolCall, ports: CallPorts): boolean | Promise<boolean>;
  /**
   * After the shutdown began: what was not done ("nothing was …"), for a route that refuses the
   * call itself; undefined when the runner hears it, its signal already aborted, and audits the refusal.
   */
  refusedLate(name: string): string | undefined;
  announce: Announce;
  run(call: ToolCall, ports: CallPorts): Promise<RouteAnswer>;
}

const approve: CallRoute = {
  name: 'approve',
  matches: (call, { smith }) => smith !== undefined && call.name === 'forge_approve',
  refusedLate: () => 'nothing was approved',
  announce: 'settled',
  async run(call, ports: Pick<CallPorts, 'ready' | 'smith' | 'persona' | 'declared'>) {
    await ports.ready();
    const step = await runApprove(ports.smith as ToolsmithSurface, call.args, {
      persona: ports.persona,
      declared: ports.declared(call.extra),
      inputResponses: call.extra.mcpReq.inputResponses,
      requestState: call.extra.mcpReq.requestState(),
    });
    if ('envelope' in step) return { envelope: step.envelope };
    // A question for the human, not the call's answer: the 2026 client asks and calls again; on the
    // 2025 era the SDK's shim asks and runs this handler again under the same request id (counted
    // anew then). Waiting for a person holds no place in flight: close() does not wait for one.
    call.release();
    return { result: step.ask as unknown as CallToolResult };
  },
};

const toolsmith: CallRoute = {
  name: 'toolsmith',
  matches: (call, { smith }) => smith !== undefined && isToolsmithTool(call.name),
  // The toolsmith takes no signal: after the shutdown began nothing new is started there.
  refusedLate: () => 'nothing was requested or proposed',
  announce: 'toolsmith',
  async run(call, ports: Pick<CallPorts, 'ready' | 'smith' | 'persona'>) {
    await ports.ready();
    // Enabled or not, the toolsmith answers: off or paused is its refusal, passed on.
    return {
      envelope: await runToolsmithTool(ports.smith as ToolsmithSurface, call.name, call.args, { ...call.ctx, persona: ports.persona }),
    };
  },
};

const meta: CallRoute = {
  name: 'meta',
  matches: (call) => isMetaTool(call.name),
  refusedLate: (name) => (name === 'forge_list' ? 'nothing was listed' : undefined),
  // The client hears list_changed before it reads the answer to its own forge/promote/remove.
  announce: 'own-change',
  async run(call, ports: Pick<CallPorts, 'ready'>) {
    return { envelope: await runMetaTool(await ports.ready(), call.name, call.args, call.ctx) };
  },
};

/** The task support of the called tool on a server with tasks (`forbidden` without). */
async function taskSupport(call: ToolCall, tasks: CallPorts['tasks']): Promise<string> {
  return tasks ? ((await call.view())?.record.meta?.task_support ?? 'forbidden') : 'forbidden';
}

const task: CallRoute = {
  name: 'task',
  async matches(call, { tasks }) {
    const support = await taskSupport(call, tasks);
    return support !== 'forbidden' && (support === 'required' || declaresTasks(call.extra.mcpReq.envelope));
  },
  refusedLate: () => undefined,
  announce: 'toolsmith',
  async run(call, ports: Pick<CallPorts, 'ready' | 'tasks' | 'ctx' | 'inflight'>) {
    const view = await call.view();
    const target = view?.record.name ?? call.name;
    const forge = await ports.ready();
    if (!declaresTasks(call.extra.mcpReq.envelope))
      throw new MissingRequiredClientCapabilityError(
        { requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } } },
        `tool ${target} runs only as a task: declare the ${TASKS_EXTENSION} extension in the request's client capabilities`,
      );
    // The task outlives the request: the client's signal is not its own.
    const signals = [call.late, ports.inflight.controller.signal, ports.ctx.signal].filter((s): s is AbortSignal => s !== undefined);
    const tasks = ports.tasks as { store: TaskStore; owner: string };
    return { result: startTask(tasks, forge, target, call.args, view, { ...ports.ctx, signal: AbortSignal.any(signals) }, ports.inflight) };
  },
};

const tool: CallRoute = {
  name: 'tool',
  matches: () => true,
  refusedLate: () => undefined,
  announce: 'toolsmith',
  async run(call, ports: Pick<CallPorts, 'ready'>) {
    const view = await call.view();
    const forge = await ports.ready();
    const envelope = await forge.callTool(view?.record.name ?? call.name, call.args, call.ctx);
    return { envelope, view, files: forge };
  },
};

/** The routes, first match wins: the toolsmith's tools, forge's meta-tools, a task, then any other tool (forged or a gateway's). */
const ROUTES: readonly CallRoute[] = [approve, toolsmith, meta, task, tool];

async function routeOf(call: ToolCall, ports: CallPorts): Promise<CallRoute> {
  for (const route of ROUTES) if (await route.matches(call, ports)) return route;
  return tool;
}

/** Answers one `tools/call` request: every outcome is a tool result but a protocol error (a missing client capability). */
export async function answerToolCall(ports: CallPorts, request: CallToolRequest, extra: ServerContext): Promise<CallToolResult> {
  const { name } = request.params;
  const { inflight } = ports;
  // Counted until its answer is sent, or until the SDK aborted the request (then no answer is due).
  const release = ports.unanswered.begin(extra.mcpReq.id, extra.mcpReq.signal);
  const done = ports.answeredOnReturn() ? release : () => {};
  // After the shutdown began, a call is refused, and audited by the runner like any refusal:
  // it is handed to it with its signal already aborted for that reason.
  const late = inflight.closing ? AbortSignal.abort(new Error(lateReason(inflight.reason))) : undefined;
  const joined = joinSignals(
    [late, clientSignal(extra.mcpReq.signal), inflight.controller.signal, ports.ctx.signal].filter(
      (s): s is AbortSignal => s !== undefined,
    ),
  );
  try {
    const before = ports.listing.mark();
    const call = toolCall(ports, request, extra, { late, signal: joined.signal, release });
    const route = await routeOf(call, ports);
    const nothing = late ? route.refusedLate(name) : undefined;
    if (nothing !== undefined) return toResult(refusal('cancelled', `${lateReason(inflight.reason)}; ${nothing}`));
    const answer = await route.run(call, ports);
    if ('result' in answer) return answer.result;
    await announce(ports.listing, route.announce, before, answer.envelope);
    const result = toResult(answer.envelope, answer.view);
    return answer.files ? await withFiles(result, answer.envelope, answer.files, ports.ctx) : result;
  } catch (err) {
    // A protocol error (a missing client capability) is the client's to hear as one.
    if (err instanceof ProtocolError) throw err;
    // A bug, not an outcome: still an error result, so the agent sees it and the session goes on.
    return toResult(refusal('internal', `forge mcp: ${(err as Error).message}`));
  } finally {
    joined.dispose();
    done();
  }
}

function toolCall(
  ports: CallPorts,
  request: CallToolRequest,
  extra: ServerContext,
  own: { late: AbortSignal | undefined; signal: AbortSignal; release(): void },
): ToolCall {
  const { name } = request.params;
  let view: Promise<ToolView | undefined> | undefined;
  return {
    name,
    args: request.params.arguments ?? {},
    late: own.late,
    ctx: { ...ports.ctx, signal: own.signal, onEvent: toolEvents(name, request.params._meta?.progressToken, extra) },
    extra,
    view: () => {
      view ??= ports.listing.viewOf(name);
      return view;
    },
    release: own.release,
  };
}

/** The list_changed step before a route's answer (see {@link Announce}). */
async function announce(listing: ToolListing, how: Announce, before: ListingMark, envelope: Envelope): Promise<void> {
  await listing.noticeToolsmith();
  if (how === 'toolsmith') return;
  await listing.settled();
  if (how === 'own-change' && envelope.ok) await listing.announceOwnChange(before);
}

const refusal = (kind: string, message: string): Envelope => ({ ok: false, error: { kind, message }, meta: {} });

/** The refusal text of a call that arrives after the shutdown began. */
const lateReason = (reason: string | undefined): string =>
  `${reason ?? 'the forge server is shutting down'} and takes no new calls (call again once it is back)`;
