import type { CallContext, Forge } from '@forge/runner';
import {
  CLIENT_CAPABILITIES_META_KEY,
  type ClientCapabilities,
  type Server,
  type ServerCapabilities,
  type ServerContext,
} from '@modelcontextprotocol/server';
// Inlined by the build: nothing is read from disk at run time, and a bundle of this package works.
import packageJson from '../package.json' with { type: 'json' };
import { elicitsForm } from './approveTool.js';
import { EngineGate } from './engineGate.js';
import { Inflight, UnansweredCalls } from './inflight.js';
import { refuseMalformedParams } from './jsonrpc.js';
import { type SharedViews, ToolListing, toolsList } from './listing.js';
import { hookTransports, TaskAnsweringServer } from './sdkInternals.js';
import { addSkills, SKILLS_EXTENSION, type SkillSet, skillsFor } from './skills.js';
import { addSurface } from './surface.js';
import { addTaskHandlers } from './taskCalls.js';
import { TASKS_EXTENSION, type TaskStore } from './tasks.js';
import { answerToolCall, type CallPorts } from './toolCall.js';
import { type ToolsmithSurface, toolsmithListing } from './toolsmithTools.js';

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
  views?: SharedViews;
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

/** A server built for a transport: the Server, and how to detach it from the Forge. */
export interface BuiltServer {
  server: Server;
  /** Stops listening to the Forge's changes (the transport is closed by its owner). */
  dispose(): void;
}

/** What this server offers, on both eras (the 2026 era adds the tasks extension). */
export const CAPABILITIES: ServerCapabilities = {
  tools: { listChanged: true },
  resources: { subscribe: true, listChanged: true },
  prompts: { listChanged: false },
  completions: {},
  logging: {},
  // MCP Skills (SEP-2640): forge's guidance and a summary per namespace of the caller's tools (skills.ts).
  extensions: { [SKILLS_EXTENSION]: { directoryRead: true } },
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
  const server = new TaskAnsweringServer(
    { name: options.name ?? 'forge', version: options.version ?? PACKAGE_VERSION },
    {
      capabilities: tasks ? { ...CAPABILITIES, extensions: { ...CAPABILITIES.extensions, [TASKS_EXTENSION]: {} } } : CAPABILITIES,
      instructions: instructionsFor(smith, persona),
    },
  );
  const unanswered = new UnansweredCalls(inflight);
  hookTransports(server, { intercept: refuseMalformedParams, answering: (message) => unanswered.answering(message) });

  const engine = new EngineGate(forge);
  const ready = (): Forge | Promise<Forge> => engine.ready();
  const listing = new ToolListing({
    server,
    ready,
    ctx,
    persona,
    smith,
    shared: options.views,
    watch: options.watch !== false,
    subscribed: () => surface.subscribed(),
  });
  /** The client capabilities a request runs under: the request's own on the 2026 era, initialize's on the 2025 era. */
  const declared = (extra: ServerContext): ClientCapabilities | undefined =>
    options.era === 'modern'
      ? ((extra.mcpReq.envelope as Record<string, unknown> | undefined)?.[CLIENT_CAPABILITIES_META_KEY] as ClientCapabilities | undefined)
      : server.getClientCapabilities();

  server.setRequestHandler('tools/list', async (_request, extra) => ({
    tools: toolsList(await listing.listForClient(), listing.toolsmith, {
      tasks: tasks !== undefined,
      elicits: elicitsForm(declared(extra)),
    }),
  }));
  // The caller's skills are built from the tools its listing shows (never another caller's).
  const skills = async (): Promise<SkillSet> => skillsFor(await listing.views());
  addSkills(server, { skills, modern: options.era === 'modern' });
  const surface = addSurface(server, { ready, ctx, views: () => listing.views(), skills });
  const ports: CallPorts = {
    ready,
    ctx,
    persona,
    smith,
    tasks,
    inflight,
    unanswered,
    listing,
    declared,
    answeredOnReturn: () => server.transport?.sessionId === undefined && options.era === 'modern',
  };
  server.setRequestHandler('tools/call', (request, extra) => answerToolCall(ports, request, extra));
  if (tasks) addTaskHandlers(server, tasks);

  const unsubscribe = options.watch === false ? () => {} : engine.follow((f) => f.on('toolsChanged', () => listing.toolsChanged()));
  let disposed = false;
  return {
    server,
    dispose() {
      if (disposed) return;
      disposed = true;
      unsubscribe();
      // The session's own registries (and their watches) go with it; the tools stay stored.
      const owned = options.ownsSession;
      if (owned !== undefined) engine.whenOpen((f) => f.releaseSession(owned));
    },
  };
}
