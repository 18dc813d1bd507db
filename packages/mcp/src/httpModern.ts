/**
 * The 2026-07-28 era over HTTP: stateless, one server instance per request, built for the
 * request's credential (never for a connection: there is none). The caller rides in authInfo.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { CallContext, Forge } from '@forge/runner';
import type { AuthInfo } from '@modelcontextprotocol/server';
import type { HttpCaller } from './httpAccess.js';
import { requestId } from './httpJson.js';
import type { Inflight } from './inflight.js';
import { listViews } from './listing.js';
import { headerDeclarations, paramHeaderProblem } from './paramHeaders.js';
import { findView, type ToolView } from './schema.js';
import { passAuthInfo } from './sdkInternals.js';
import { buildServer, type ForgeMcpServerOptions } from './server.js';
import { TaskStore } from './tasks.js';

type NodeSdk = typeof import('@modelcontextprotocol/node');
type ServerSdk = typeof import('@modelcontextprotocol/server');

/** What the 2026-era factory needs of a request's caller. */
interface ModernCaller {
  ctx: CallContext;
  /** Whose tasks the request may see (one principal: a token, or the loopback caller). */
  principal: string;
}

/** What {@link ModernEntry} is built from. */
export interface ModernEntryOptions {
  forge: Forge;
  inflight: Inflight;
  maxBody: number;
  /** The server name, version and toolsmith each instance gets. */
  naming: Pick<ForgeMcpServerOptions, 'name' | 'version' | 'toolsmith'>;
  sdk: { node: NodeSdk; server: ServerSdk };
}

/** The 2026-era entry of one HTTP server: its handler, its callers' listings and its tasks. */
export class ModernEntry {
  readonly #forge: Forge;
  readonly #sdk: ModernEntryOptions['sdk'];
  readonly #handler: ReturnType<ServerSdk['createMcpHandler']>;
  readonly #node: ReturnType<NodeSdk['toNodeHandler']>;
  readonly #listings = new Listings();
  readonly #unwatch: () => void;

  constructor(o: ModernEntryOptions) {
    this.#forge = o.forge;
    this.#sdk = o.sdk;
    // Tasks outlive the request that made them: they belong to the server, by principal.
    const tasks = new TaskStore();
    this.#handler = o.sdk.server.createMcpHandler(
      ({ authInfo }) => {
        const caller = (authInfo?.extra as { forge?: ModernCaller } | undefined)?.forge;
        if (!caller) throw new Error('forge mcp: a 2026-era request reached the handler without its caller');
        const built = buildServer(
          o.forge,
          {
            ctx: caller.ctx,
            era: 'modern',
            watch: false,
            tasks: { store: tasks, owner: caller.principal },
            views: this.#listings.of(caller.principal, caller.ctx),
            ...o.naming,
          },
          o.inflight,
        );
        return built.server;
      },
      {
        legacy: 'reject',
        maxRequestBodySize: o.maxBody,
        onerror: (err) => {
          if (process.env.FORGE_MCP_DEBUG) process.emitWarning(`forge mcp: ${err.message}`);
        },
      },
    );
    this.#node = o.sdk.node.toNodeHandler(this.#handler, { maxRequestBodySize: o.maxBody });
    // List changes reach 2026-era clients on their subscriptions/listen streams.
    this.#unwatch = o.forge.on('toolsChanged', () => {
      this.#listings.clear();
      this.#handler.notify.toolsChanged();
    });
  }

  /**
   * Whether a request is of this era: 2026-07-28 requests carry their protocol version and
   * capabilities in `_meta` (or are server/discover); everything else is the 2025 era, served with sessions.
   */
  async takes(req: IncomingMessage, body: unknown): Promise<boolean> {
    return (
      req.method === 'POST' &&
      !(typeof req.headers['mcp-session-id'] === 'string') &&
      !(legacyBody(body) ?? (await this.#sdk.server.isLegacyRequest(await this.#sdk.node.toWebRequest(req, body))))
    );
  }

  /**
   * Answers one request of `caller`; a tools/call whose `Mcp-Param-*` headers disagree with its
   * arguments gets 400. `track` sees the response the handler then writes.
   */
  async serve(
    req: IncomingMessage,
    res: ServerResponse,
    body: unknown,
    caller: HttpCaller,
    track: (res: ServerResponse) => void,
  ): Promise<void> {
    const modernCtx: CallContext = { ...caller.ctx, session: modernSession(caller.principal) };
    const authInfo: AuthInfo = {
      token: '',
      clientId: caller.principal,
      scopes: [],
      extra: {
        forge: { ctx: modernCtx, principal: caller.principal } satisfies ModernCaller,
      },
    };
    passAuthInfo(req, authInfo);
    const mismatch = await this.#paramHeaders(body, caller.principal, modernCtx, req);
    if (mismatch) {
      res.writeHead(400, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          jsonrpc: '2.0',
          id: requestId(body),
          error: {
            code: -32020,
            message: `Bad Request: the request headers and body disagree: ${mismatch.message}`,
            data: { header: mismatch.header },
          },
        }),
      );
      return;
    }
    track(res);
    await this.#node(req, res, body);
  }

  /** Stops following the Forge's changes and closes the handler. */
  async close(): Promise<void> {
    this.#unwatch();
    await this.#handler.close().catch(() => {});
  }

  /** For a 2026 tools/call: how its `Mcp-Param-*` headers disagree with its arguments, if they do. */
  async #paramHeaders(body: unknown, principal: string, ctx: CallContext, req: IncomingMessage) {
    const m = body as { method?: unknown; params?: { name?: unknown; arguments?: unknown } } | null;
    if (m?.method !== 'tools/call' || typeof m.params?.name !== 'string') return undefined;
    const name = m.params.name;
    // The caller's listing, shared with the instance that then serves the call (listed once).
    const listing = this.#listings.of(principal, ctx);
    let views = listing.get();
    if (!views) {
      views = (await listViews(this.#forge, ctx)).views;
      listing.set(views);
    }
    const declared = headerDeclarations(findView(views, name)?.record.input_schema);
    if (declared.length === 0) return undefined;
    return paramHeaderProblem(declared, m.params.arguments, (h) => {
      const v = req.headers[h];
      return Array.isArray(v) ? v.join(', ') : v;
    });
  }
}

/**
 * Whether a parsed POST body is of the 2025 era when it shows it at once: `false` for a request
 * carrying the 2026 envelope's protocol version (the 2026 entry judges it, a removed method
 * `initialize` included) or `server/discover`, `true` for an `initialize` without it; undefined when the SDK's
 * classification must decide (it then sees the whole request, envelope and headers).
 */
function legacyBody(body: unknown): boolean | undefined {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return undefined;
  const m = body as { method?: unknown; params?: { _meta?: Record<string, unknown> } };
  // The envelope wins: a 2026 request for a method the era removed (initialize) is answered as 2026.
  const version = m.params?._meta?.['io.modelcontextprotocol/protocolVersion'];
  if (typeof version === 'string') return false;
  if (version !== undefined) return undefined;
  if (m.method === 'initialize') return true;
  if (m.method === 'server/discover') return false;
  return undefined;
}

/** How long a caller's listing is reused by later 2026 requests (cleared at once when tools change). */
const LISTING_TTL_MS = 5000;
/** Most callers whose listing is kept. */
const MAX_LISTINGS = 1024;

/** The 2026-era callers' listings, by principal and context, for calls by name. */
class Listings {
  readonly #kept = new Map<string, { views: Map<string, ToolView>; at: number }>();

  of(principal: string, ctx: CallContext) {
    const key = `${principal}\0${ctx.persona ?? ''}\0${ctx.allowedTools ?? ''}`;
    return {
      get: () => {
        const hit = this.#kept.get(key);
        return hit && Date.now() - hit.at < LISTING_TTL_MS ? hit.views : undefined;
      },
      set: (views: Map<string, ToolView>) => {
        if (this.#kept.size >= MAX_LISTINGS && !this.#kept.has(key)) this.#kept.clear();
        this.#kept.set(key, { views, at: Date.now() });
      },
    };
  }

  clear(): void {
    this.#kept.clear();
  }
}

/** What the 2026-era factory needs of a request's caller. */
interface ModernCaller {
  ctx: CallContext;
  /** Whose tasks the request may see (one principal: a token, or the loopback caller). */
  principal: string;
}

/**
 * The forge session of a 2026-era caller: stateless requests have no connection, so the session
 * scope (and its breakers) belong to the credential: one per token, one for the loopback caller.
 */
const modernSession = (principal: string): string => `c-${principal === 'loopback' ? 'loopback' : principal.slice(0, 16)}`;
