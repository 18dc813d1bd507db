import type { CallContext, Envelope, Forge } from '@forge/runner';
import {
  type CallToolResult,
  CLIENT_CAPABILITIES_META_KEY,
  type ClientCapabilities,
  type LoggingLevel,
  MissingRequiredClientCapabilityError,
  ProtocolError,
  type RequestId,
  Server,
  type ServerCapabilities,
  type ServerContext,
  type Tool,
  type Transport,
} from '@modelcontextprotocol/server';
// Inlined by the build: nothing is read from disk at run time, and a bundle of this package works.
import packageJson from '../package.json' with { type: 'json' };
import { APPROVE_TOOL_DEFINITION, elicitsForm, runApprove } from './approveTool.js';
import { Inflight } from './inflight.js';
import { isMetaTool, META_TOOL_DEFINITIONS, runMetaTool } from './metaTools.js';
import { findView, sourcedView, type ToolRecord, type ToolView, toolView } from './schema.js';
import { addSurface } from './surface.js';
import { addTaskHandlers, startTask } from './taskCalls.js';
import { declaresTasks, TASKS_EXTENSION, type TaskStore } from './tasks.js';
import { toolEvents, withFiles } from './toolResults.js';
import {
  isToolsmithTool,
  runToolsmithTool,
  TOOLSMITH_TOOL_DEFINITIONS,
  type ToolsmithSurface,
  toolsmithListing,
} from './toolsmithTools.js';

/** The two families of MCP protocol revisions: `legacy` is 2024-11-05 … 2025-11-25 (initialize, sessions), `modern` 2026-07-28 (stateless). */
export type ProtocolEra = 'legacy' | 'modern';

/** Options of {@link createForgeMcpServer}. */
export interface ForgeMcpServerOptions {
  /** Who this server's client is: persona, session, task and ACL (each defaults to the Forge's environment). */
  ctx?: CallContext;
  /** Server name in the initialize and server/discover answers (default `forge`). */
  name?: string;
  /** Server version in the initialize and server/discover answers (default: this package's version). */
  version?: string;
  /**
   * The project's toolsmith (`createToolsmith` of @forge/toolsmith): while policy
   * `toolsmith.enabled` is true for the caller's persona, `forge_request` and `forge_propose` are
   * listed and answered by it; a persona in governed mode is not offered `forge_tool` (the runner
   * refuses it). Without one, those two names are unknown tools, as before. With its `show` and
   * `approve`, `forge_approve` is listed for a persona policy lets approve in its client
   * (`status().approvesInClient`) when the client can elicit: the human there confirms.
   */
  toolsmith?: ToolsmithSurface;
}

/** What {@link buildServer} needs beyond the public options. */
export interface BuildOptions extends ForgeMcpServerOptions {
  /** The era this instance serves (known to the entry that built it; default `legacy`). */
  era?: ProtocolEra;
  /**
   * The caller's listing kept across instances (a 2026 HTTP request's instance lives for one
   * request): a call by name looks its tool up there before listing again. The entry clears it
   * when tools change; what it holds only shapes the answer (every call is judged by the runner).
   */
  views?: { get(): Map<string, ToolView> | undefined; set(views: Map<string, ToolView>): void };
  /** The tasks of the entry that built this instance, and whose they are (the caller's principal); 2026 era only. */
  tasks?: { store: TaskStore; owner: string };
  /**
   * Whether this instance follows the Forge's changes and sends `notifications/tools/list_changed`
   * itself (default true): a connection that lives on (stdio, a 2025 HTTP session). A per-request
   * instance (a 2026 HTTP request) does not; its entry publishes changes to listen streams.
   */
  watch?: boolean;
  /**
   * The forge session this instance is the whole of (a 2025 HTTP session): `dispose()` releases
   * it in the Forge (`Forge.releaseSession`), closing its session and task registries.
   */
  ownsSession?: string;
}

const PACKAGE_VERSION: string = packageJson.version;

const INSTRUCTIONS =
  'forge lets you create tools at runtime. Before writing the same snippet a second time, computing exact numbers over data, or producing a file that must be reproducible, call forge_list, then forge_tool to create a tool and forge_call to use it at once. Do not forge one-off commands or pure language work.';

/** For a persona in governed mode: new tools are proposed and approved, never forged directly. */
const GOVERNED_INSTRUCTIONS =
  'forge adds tools at runtime under governance: a new tool is proposed, validated in a sandbox and approved by a person before it can be called. Before writing the same snippet a second time, computing exact numbers over data, or producing a file that must be reproducible, call forge_list to reuse a tool; if none fits, call forge_propose with a blueprint and examples (forge_request just asks for one). Do not propose one-off commands or pure language work.';

/**
 * A persona in direct mode whose toolsmith is attached (or whose mode cannot be known yet: an
 * engine still opening when initialize is answered) hears where forge_propose fits too.
 */
const GOVERNED_HINT =
  'Where forge_tool is not in your tool list, new tools are governed: propose one with forge_propose instead (it goes live once a person approves it).';

/** The initialize `instructions` for `persona` (fixed for the session: the SDK sends them once). */
function instructionsFor(smith: ToolsmithSurface | undefined, persona: string): string {
  if (!smith) return INSTRUCTIONS;
  return toolsmithListing(smith, persona).hideForgeTool ? GOVERNED_INSTRUCTIONS : `${INSTRUCTIONS} ${GOVERNED_HINT}`;
}

/** Thrown through the SDK's tools/call result check by a handler that started a task; see {@link ForgeServer}. */
class TaskCreated extends Error {
  constructor(readonly result: Record<string, unknown>) {
    super('task created');
  }
}

/**
 * The SDK's `Server`, letting a `tools/call` answer be a `CreateTaskResult` (`resultType:
 * "task"`): the SDK checks a tool result against `CallToolResult`, which would strip the task
 * fields, and has no runtime of the tasks extension. Every other answer goes through its checks.
 */
class ForgeServer extends Server {
  protected override _wrapHandler(method: string, handler: Parameters<Server['_wrapHandler']>[1]): ReturnType<Server['_wrapHandler']> {
    if (method !== 'tools/call') return super._wrapHandler(method, handler);
    const inner = super._wrapHandler(method, async (request, ctx) => {
      const result = await handler(request, ctx);
      if ((result as { resultType?: unknown }).resultType === 'task') throw new TaskCreated(result);
      return result;
    });
    return async (request, ctx) => {
      try {
        return await inner(request, ctx);
      } catch (err) {
        if (err instanceof TaskCreated) return err.result as Awaited<ReturnType<typeof inner>>;
        throw err;
      }
    };
  }
}

/**
 * The forged tools `ctx` sees, then the sources' tools, by wire name, and a signature of that set (it changes when a tool
 * comes, goes or changes, or the caller's network grant does).
 */
export async function listViews(forge: Forge, ctx: CallContext): Promise<{ views: Map<string, ToolView>; signature: string }> {
  const listed = await forge.listTools(ctx);
  const facts = forge.sandboxFacts(ctx);
  const views = new Map<string, ToolView>();
  let signature = facts.network ? 'net\n' : '';
  for (const l of listed) {
    // A tool whose wire name another one shares is not listed (forge_call reaches it by its forge name).
    if (isMetaTool(l.tool.name) || l.wireConflict !== undefined) continue;
    const view = toolView(l.tool as ToolRecord, facts);
    views.set(view.tool.name, view);
    signature += `${l.tool.name}\0${l.scope}\0${l.tool.digest}\0${l.tool.version}\n`;
  }
  // The sources' tools (the gateway's upstream tools): after the forged ones, never over one.
  for (const t of await forge.listSourced(ctx)) {
    const view = sourcedView(t);
    if (views.has(view.tool.name)) continue;
    views.set(view.tool.name, view);
    signature += `${t.name}\0${t.origin.kind}\0${t.digest}\n`;
  }
  return { views, signature };
}

/** A server built for a transport: the Server, and how to detach it from the Forge. */
export interface BuiltServer {
  server: Server;
  /** Stops listening to the Forge's changes (the transport is closed by its owner). */
  dispose(): void;
}

/** What this server offers, on both eras. */
export const CAPABILITIES: ServerCapabilities = {
  tools: { listChanged: true },
  resources: { subscribe: true, listChanged: true },
  prompts: { listChanged: false },
  completions: {},
  logging: {},
};

/**
 * One MCP server (the SDK's low-level `Server`) bound to one caller context: the five meta-tools
 * (with `forge_request` and `forge_propose` when a toolsmith is attached and enabled, and without
 * `forge_tool` for a persona in governed mode) plus every forged tool visible to that context, `notifications/tools/list_changed` whenever
 * that set changes, and tool calls answered as forge envelopes (`isError` when not ok).
 * Connect it to any transport with `server.connect(transport)` (it speaks the 2025 era there);
 * closing the server does not close the Forge, which belongs to the caller. `serveStdio` and
 * `serveHttp` serve both eras.
 *
 * `forge` may be a promise of the engine still opening: the server then answers `initialize`
 * at once and every other request waits for the engine. If it fails to open, those requests are
 * answered with an error saying why; the caller should close the server.
 */
export function createForgeMcpServer(forge: Forge | PromiseLike<Forge>, options: ForgeMcpServerOptions = {}): Server {
  return buildServer(forge, options, new Inflight()).server;
}

/** {@link createForgeMcpServer} with the in-flight tracker of the transport that owns it. */
export function buildServer(forge: Forge | PromiseLike<Forge>, options: BuildOptions, inflight: Inflight): BuiltServer {
  const ctx: CallContext = { ...options.ctx };
  const tasks = options.era === 'modern' ? options.tasks : undefined;
  const smith = options.toolsmith;
  // The persona the toolsmith sees (it defaults an absent one to `default`, as here).
  const persona = ctx.persona ?? 'default';
  const server = new ForgeServer(
    { name: options.name ?? 'forge', version: options.version ?? PACKAGE_VERSION },
    {
      capabilities: tasks ? { ...CAPABILITIES, extensions: { [TASKS_EXTENSION]: {} } } : CAPABILITIES,
      instructions: instructionsFor(smith, persona),
    },
  );

  // Calls whose answer is not yet handed to the transport, by request id: each releases its
  // place in `inflight` once its answer is sent (see Inflight for why the handler's end is not enough).
  const unanswered = new Map<RequestId, () => void>();
  const connect = server.connect.bind(server);
  server.connect = async (transport: Transport) => {
    // Before the SDK sets its handlers: the wrappers below run around them.
    watchAnswers(transport, unanswered);
    await connect(transport);
    guardParams(transport);
  };

  // The engine once open; until then requests wait on `opening`.
  let engine: Forge | undefined;
  const opening: Promise<Forge> = Promise.resolve(forge);
  const ready = (): Forge | Promise<Forge> =>
    engine ??
    opening.catch((err: unknown) => {
      throw new Error(`this server has no forge engine (it failed to open, so the session cannot go on): ${(err as Error).message}`);
    });

  // The forged tools this client sees, by wire name, and a signature of that set (what it last saw).
  let visible: Map<string, ToolView> | undefined;
  // The last two listings (never cleared): what a subscribed tool spec was, and is.
  let latest: Map<string, ToolView> | undefined;
  let previous: Map<string, ToolView> | undefined;
  let seen: string | undefined;
  // What the toolsmith added to or took from the listing last time it was computed.
  let smithListed = toolsmithListing(undefined, persona);
  const refresh = async (): Promise<{ views: Map<string, ToolView>; signature: string }> => {
    const { views, signature } = await listViews(await ready(), ctx);
    visible = views;
    previous = latest;
    latest = views;
    options.views?.set(views);
    // The toolsmith's part of the listing is in the signature: turning it on or off, or a persona's
    // mode changing, is list_changed like a tool coming or going.
    smithListed = toolsmithListing(smith, persona);
    return { views, signature: smithListed.key + signature };
  };
  /** The view of the tool `name` names, in either form (wire or forge name). */
  const viewOf = async (name: string): Promise<ToolView | undefined> => {
    const known = visible ?? options.views?.get();
    return (known && findView(known, name)) ?? findView((await refresh()).views, name);
  };

  // Coalesces bursts of changes: one listing at a time, one more if changes came in meanwhile.
  let checking: Promise<void> | undefined;
  let again = false;
  // Counters: notifications sent, and changes the Forge reported (see the meta-tool path below).
  let sent = 0;
  let reported = 0;
  const notify = async () => {
    // Only once the client is initialized (or spoke the 2026 era); a closed transport just drops it.
    if (!server.transport || (!server.getClientCapabilities() && server.getNegotiatedProtocolVersion() === undefined)) return;
    sent++;
    await server.sendToolListChanged().catch(() => {});
    // The tool specs are resources too.
    await server.sendResourceListChanged().catch(() => {});
  };
  const checkChanged = (): Promise<void> => {
    if (checking) {
      again = true;
      return checking;
    }
    checking = (async () => {
      do {
        again = false;
        const { views, signature } = await refresh();
        const before = previous;
        if (signature === seen) continue;
        seen = signature;
        await notify();
        // A subscribed tool spec that changed (or went away) is reported updated.
        for (const uri of surface.subscribed()) {
          if (!uri.startsWith('forge://tools/')) continue;
          const name = decodeURIComponent(uri.slice('forge://tools/'.length));
          const was = before && findView(before, name)?.record;
          const now = findView(views, name)?.record;
          if (was?.digest !== now?.digest || was?.version !== now?.version || was?.scope !== now?.scope)
            await server.sendResourceUpdated({ uri }).catch(() => {});
        }
      } while (again);
    })()
      .catch((err) => process.emitWarning(`forge mcp: listing tools after a change failed: ${(err as Error).message}`))
      .finally(() => {
        checking = undefined;
      });
    return checking;
  };
  /**
   * The policy is not watched: a call is where a toolsmith switched on or off (or a mode changed)
   * is noticed, and the client then hears list_changed before it reads the answer.
   */
  const noticeToolsmith = async (): Promise<void> => {
    if (!smith || options.watch === false || seen === undefined) return;
    if (toolsmithListing(smith, persona).key !== smithListed.key) await checkChanged();
  };
  let disposed = false;
  let unsubscribe = () => {};
  const subscribe = (f: Forge) => {
    engine = f;
    if (disposed || options.watch === false) return;
    unsubscribe = f.on('toolsChanged', () => {
      reported++;
      visible = undefined;
      void checkChanged();
    });
  };
  // An engine given open is subscribed to at once, so no change in between is missed.
  if (isPromiseLike(forge)) opening.then(subscribe, () => {});
  else subscribe(forge);

  /** The client capabilities a request runs under: the request's own on the 2026 era, initialize's on the 2025 era. */
  const declared = (extra: ServerContext): ClientCapabilities | undefined =>
    options.era === 'modern'
      ? ((extra.mcpReq.envelope as Record<string, unknown> | undefined)?.[CLIENT_CAPABILITIES_META_KEY] as ClientCapabilities | undefined)
      : server.getClientCapabilities();

  server.setRequestHandler('tools/list', async (_request, extra) => {
    const { views, signature } = await refresh();
    seen = signature;
    const tools: Tool[] = [];
    for (const t of META_TOOL_DEFINITIONS) {
      if (t.name === 'forge_tool') {
        // Governed: forge_tool is refused, so it is not offered; proposing is (while enabled).
        if (!smithListed.hideForgeTool) tools.push(t);
        if (smithListed.propose) tools.push(...TOOLSMITH_TOOL_DEFINITIONS);
        // Approving in the client needs a human there to ask: only a client that can elicit is offered it.
        if (smithListed.approve && elicitsForm(declared(extra))) tools.push(APPROVE_TOOL_DEFINITION);
      } else tools.push(t);
    }
    for (const v of views.values()) {
      const support = v.record.meta?.task_support;
      // The 2026 Tool has no `execution` field (the SDK drops it): the support is in forge's _meta too.
      const forgeMeta = (v.tool._meta as { forge: Record<string, unknown> }).forge;
      tools.push(
        tasks && support && support !== 'forbidden'
          ? { ...v.tool, execution: { taskSupport: support }, _meta: { forge: { ...forgeMeta, task_support: support } } }
          : v.tool,
      );
    }
    return { tools };
  });

  const surface = addSurface(server, { ready, ctx, views: async () => visible ?? (await refresh()).views });

  server.setRequestHandler('tools/call', async (request, extra): Promise<CallToolResult> => {
    const { name, arguments: args } = request.params;
    const id = extra.mcpReq.id;
    const signal = extra.mcpReq.signal;
    // Counted until its answer is sent, or until the SDK aborted the request (the client
    // cancelled it, or the transport closed): then no answer is due.
    const release = inflight.begin();
    unanswered.set(id, release);
    const forget = () => {
      if (unanswered.get(id) === release) unanswered.delete(id);
      release();
    };
    signal.addEventListener('abort', forget, { once: true });
    if (signal.aborted) forget();
    // A per-request instance (2026 HTTP) has no transport to watch: its answer is handed over when the handler returns.
    const done = server.transport?.sessionId === undefined && options.era === 'modern' ? forget : () => {};
    let joined: { signal: AbortSignal; dispose(): void } | undefined;
    try {
      // After the shutdown began, a call is refused, and audited by the runner like any refusal:
      // it is handed to it with its signal already aborted for that reason.
      const late = inflight.closing ? AbortSignal.abort(new Error(lateReason(inflight.reason))) : undefined;
      if (late && name === 'forge_list') return toResult(refusal('cancelled', `${lateReason(inflight.reason)}; nothing was listed`));
      const signals = [late, clientSignal(signal), inflight.controller.signal, ctx.signal].filter((s): s is AbortSignal => s !== undefined);
      joined = joinSignals(signals);
      const callCtx: CallContext = {
        ...ctx,
        signal: joined.signal,
        onEvent: toolEvents(name, request.params._meta?.progressToken, extra),
      };
      if (smith && name === 'forge_approve') {
        if (late) return toResult(refusal('cancelled', `${lateReason(inflight.reason)}; nothing was approved`));
        await ready();
        const step = await runApprove(smith, args ?? {}, {
          persona,
          declared: declared(extra),
          inputResponses: extra.mcpReq.inputResponses,
          requestState: extra.mcpReq.requestState(),
        });
        if ('ask' in step) {
          // A question for the human, not the call's answer: the 2026 client asks and calls again; on the
          // 2025 era the SDK's shim asks and runs this handler again under the same request id (counted
          // anew then). Waiting for a person holds no place in flight: close() does not wait for one.
          forget();
          return step.ask as unknown as CallToolResult;
        }
        await noticeToolsmith();
        // The client hears list_changed (the tool went live) before it reads the answer.
        if (checking) await checking;
        return toResult(step.envelope);
      }
      if (smith && isToolsmithTool(name)) {
        // The toolsmith takes no signal: after the shutdown began nothing new is started there.
        if (late) return toResult(refusal('cancelled', `${lateReason(inflight.reason)}; nothing was requested or proposed`));
        await ready();
        // Enabled or not, the toolsmith answers: off or paused is its refusal, passed on.
        const envelope = await runToolsmithTool(smith, name, args ?? {}, { ...callCtx, persona });
        await noticeToolsmith();
        return toResult(envelope);
      }
      if (isMetaTool(name)) {
        const before = { sent, reported };
        const envelope = await runMetaTool(await ready(), name, args, callCtx);
        await noticeToolsmith();
        // The client hears list_changed before it reads the answer to its own forge/promote/remove,
        // even when what it sees did not change (a promoted tool still shadowed by the project's).
        if (checking) await checking;
        if (envelope.ok && reported > before.reported && sent === before.sent) await notify();
        return toResult(envelope);
      }
      const view = await viewOf(name);
      const target = view?.record.name ?? name;
      const f = await ready();
      const support = tasks ? (view?.record.meta?.task_support ?? 'forbidden') : 'forbidden';
      if (support !== 'forbidden' && tasks) {
        const declared = declaresTasks(extra.mcpReq.envelope);
        if (!declared && support === 'required')
          throw new MissingRequiredClientCapabilityError(
            { requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } } },
            `tool ${target} runs only as a task: declare the ${TASKS_EXTENSION} extension in the request's client capabilities`,
          );
        if (declared)
          return startTask(
            tasks,
            f,
            target,
            args ?? {},
            view,
            {
              ...ctx,
              signal: AbortSignal.any([late, inflight.controller.signal, ctx.signal].filter((s): s is AbortSignal => s !== undefined)),
            },
            inflight,
          );
      }
      const envelope = await f.callTool(target, args ?? {}, callCtx);
      await noticeToolsmith();
      return withFiles(toResult(envelope, view), envelope, f, ctx);
    } catch (err) {
      // A protocol error (a missing client capability) is the client's to hear as one.
      if (err instanceof ProtocolError) throw err;
      // A bug, not an outcome: still an error result, so the agent sees it and the session goes on.
      return toResult(refusal('internal', `forge mcp: ${(err as Error).message}`));
    } finally {
      joined?.dispose();
      done();
    }
  });

  if (tasks) addTaskHandlers(server, tasks);

  return {
    server,
    dispose() {
      if (disposed) return;
      disposed = true;
      unsubscribe();
      // The session's own registries (and their watches) go with it; the tools stay stored.
      const owned = options.ownsSession;
      if (owned !== undefined) void opening.then((f) => f.releaseSession(owned)).catch(() => {});
    },
  };
}

/** The levels of `notifications/message`, lowest first. */
export const LOG_LEVELS: readonly LoggingLevel[] = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'];

/** Context of a request handler (re-exported for the modules that add handlers). */
export type HandlerContext = ServerContext;

/**
 * Answers `tools/call` and `tools/list` requests with malformed params with JSON-RPC -32602 and a
 * plain message naming the field. (The SDK validates a request against its schema before its own
 * -32602 check, so these came back as -32603 "internal error" with a raw validation dump.) Every
 * server built here installs it on the transports it connects to.
 */
function guardParams(transport: Transport): void {
  const next = transport.onmessage;
  transport.onmessage = (message, extra) => {
    const problem = paramsProblem(message as { id?: unknown; method?: unknown; params?: unknown });
    if (problem !== undefined) {
      const id = (message as { id: string | number }).id;
      void transport.send({ jsonrpc: '2.0', id, error: { code: -32602, message: `Invalid params: ${problem}` } }).catch(() => {});
      return;
    }
    next?.(message, extra);
  };
}

/** Why a `tools/call` or `tools/list` request's params are malformed, or undefined. */
export function paramsProblem(m: { id?: unknown; method?: unknown; params?: unknown }): string | undefined {
  if (m.id === undefined || (m.method !== 'tools/call' && m.method !== 'tools/list')) return undefined;
  const p = m.params as Record<string, unknown> | undefined;
  const isObject = (v: unknown) => v !== null && typeof v === 'object' && !Array.isArray(v);
  const got = (v: unknown) => (v === undefined ? 'nothing' : JSON.stringify(v).slice(0, 60));
  if (m.method === 'tools/call') {
    if (!isObject(p)) return `tools/call takes params {"name": "<tool>", "arguments": {…}} (got ${got(p)})`;
    if (typeof p?.name !== 'string') return `tools/call needs params.name, a tool name string (got ${got(p?.name)})`;
    if (p.arguments !== undefined && !isObject(p.arguments))
      return `tools/call params.arguments must be an object (got ${got(p.arguments)})`;
    return undefined;
  }
  if (p === undefined) return undefined;
  if (!isObject(p)) return `tools/list params must be an object (got ${got(p)})`;
  if (p.cursor !== undefined && typeof p.cursor !== 'string') return `tools/list params.cursor must be a string (got ${got(p.cursor)})`;
  return undefined;
}

function isPromiseLike(x: Forge | PromiseLike<Forge>): x is PromiseLike<Forge> {
  return typeof (x as PromiseLike<Forge>).then === 'function';
}

const refusal = (kind: string, message: string): Envelope => ({ ok: false, error: { kind, message }, meta: {} });

/** The refusal text of a call that arrives after the shutdown began. */
const lateReason = (reason: string | undefined): string =>
  `${reason ?? 'the forge server is shutting down'} and takes no new calls (call again once it is back)`;

/**
 * The request's own signal, aborted with a reason that says who stopped the call: the SDK aborts
 * it when the client cancels (`notifications/cancelled`, with its reason) or the transport closes.
 */
function clientSignal(signal: AbortSignal): AbortSignal {
  const because = (r: unknown) =>
    new Error(typeof r === 'string' && r !== '' ? `the client cancelled the call (${r})` : 'the client cancelled the call or went away');
  if (signal.aborted) return AbortSignal.abort(because(signal.reason));
  const ac = new AbortController();
  signal.addEventListener('abort', () => ac.abort(because(signal.reason)), { once: true });
  return ac.signal;
}

/**
 * Releases a tool call's place in flight once the transport took its answer (`send` settled):
 * only then may close() close the transport.
 */
function watchAnswers(transport: Transport, unanswered: Map<RequestId, () => void>): void {
  const send = transport.send.bind(transport);
  transport.send = async (message, options) => {
    const id = (message as { id?: RequestId }).id;
    const release = id !== undefined && ('result' in message || 'error' in message) ? unanswered.get(id) : undefined;
    if (!release || id === undefined) return send(message, options);
    unanswered.delete(id);
    try {
      return await send(message, options);
    } finally {
      release();
    }
  };
}

/**
 * An envelope as a tool result: the envelope as JSON text, `isError: !ok`, and
 * `structuredContent` — `data` when the tool publishes an `outputSchema` (only when ok: the
 * client validates it against that schema), else the whole envelope.
 */
export function toResult(envelope: Envelope, view?: ToolView): CallToolResult {
  // An upstream tool's answer (the gateway's) keeps the upstream's own content blocks, redacted by
  // the runner, as a client calling the server directly would get them; the envelope, with forge's
  // meta, stays in structuredContent.
  const upstream = view?.record.runtime === 'mcp' && envelope.ok && !view.structuredData ? upstreamBlocks(envelope.data) : undefined;
  const result: CallToolResult = {
    content: upstream ?? [{ type: 'text', text: JSON.stringify(envelope) }],
    isError: !envelope.ok,
  };
  if (!view?.structuredData) result.structuredContent = envelope as unknown as Record<string, unknown>;
  else if (envelope.ok && envelope.data !== null && typeof envelope.data === 'object' && !Array.isArray(envelope.data))
    result.structuredContent = envelope.data as Record<string, unknown>;
  return result;
}

/** The content blocks of a gateway answer's `data` (`{ content: [...] }`), when every one is a block MCP knows; else undefined. */
function upstreamBlocks(data: unknown): CallToolResult['content'] | undefined {
  const content = (data as { content?: unknown } | null)?.content;
  if (!Array.isArray(content) || content.length === 0) return undefined;
  const str = (v: unknown) => typeof v === 'string';
  for (const b of content) {
    const block = b as Record<string, unknown> | null;
    if (block === null || typeof block !== 'object') return undefined;
    const ok =
      (block.type === 'text' && str(block.text)) ||
      ((block.type === 'image' || block.type === 'audio') && str(block.data) && str(block.mimeType)) ||
      (block.type === 'resource_link' && str(block.uri) && str(block.name)) ||
      (block.type === 'resource' && block.resource !== null && typeof block.resource === 'object');
    if (!ok) return undefined;
  }
  return content as CallToolResult['content'];
}

/**
 * One signal that aborts when any of `signals` does, and `dispose()` to let go of them. Not
 * `AbortSignal.any`: on Node 20 every signal it makes stays referenced from each long-lived source
 * (the server's shutdown signal), one for every call the server ever answered.
 */
function joinSignals(signals: readonly AbortSignal[]): { signal: AbortSignal; dispose(): void } {
  const ac = new AbortController();
  const gone = signals.find((s) => s.aborted);
  if (gone) {
    ac.abort(gone.reason);
    return { signal: ac.signal, dispose() {} };
  }
  const listeners = signals.map((s) => {
    const on = () => ac.abort(s.reason);
    s.addEventListener('abort', on, { once: true });
    return () => s.removeEventListener('abort', on);
  });
  return {
    signal: ac.signal,
    dispose() {
      for (const off of listeners) off();
    },
  };
}
