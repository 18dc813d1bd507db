import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import { type CallContext, type Forge, openFilesLimit } from '@forge/runner';
import type { NodeStreamableHTTPServerTransport } from '@modelcontextprotocol/node';
import { type AuthInfo, isInitializeRequest, type Server } from '@modelcontextprotocol/server';
import { ForgeMcpError } from './errors.js';
import { SessionEventStore } from './eventStore.js';
import { Inflight } from './inflight.js';
import { DEFAULT_MAX_MESSAGE_BYTES, paramsNotObject } from './jsonrpc.js';
import { listViews } from './listing.js';
import { headerDeclarations, paramHeaderProblem } from './paramHeaders.js';
import { findView, type ToolView } from './schema.js';
import { passAuthInfo } from './sdkInternals.js';
import { buildServer } from './server.js';
import { admitSession, resolveSessionLimits } from './sessionLimits.js';
import { TaskStore } from './tasks.js';
import type { ToolsmithSurface } from './toolsmithTools.js';

/** One bearer token's caller: its persona and, optionally, its tool ACL (`FORGE_ALLOWED_TOOLS` syntax). */
export interface HttpTokenGrant {
  persona: string;
  /** Comma list of tool names or globs this persona may call (unset: every tool). Meta-tools are always callable. */
  allowedTools?: string;
}

/** Options of {@link serveHttp}. */
export interface ServeHttpOptions {
  /** Address to bind (default `127.0.0.1`). Anything but loopback requires `tokens`. */
  host?: string;
  /** Port (default 0: an ephemeral port, see the returned `url`). */
  port?: number;
  /** Bearer tokens → callers. Required (non-empty) when `host` is not loopback; when given, every request needs one. */
  tokens?: Record<string, HttpTokenGrant>;
  /** Origins allowed besides loopback ones (`http://localhost:*`, `http://127.0.0.1:*`, `http://[::1]:*`); a request without Origin is allowed. */
  allowedOrigins?: string[];
  /** Host names clients may use for a non-loopback bind (default: any, the tokens guard it). A loopback bind only answers loopback names. */
  allowedHosts?: string[];
  /** How long close() lets calls in flight finish before their sandboxes are killed (default 10 s). */
  graceMs?: number;
  /** Largest request body (default 16 MiB). */
  maxBodyBytes?: number;
  /** Most sessions open at once over every principal (default 256); past it, a new session gets 503 with `Retry-After`. */
  maxSessions?: number;
  /**
   * Most sessions one principal may hold at once: a principal is one bearer token (whatever its
   * persona), or without tokens the single loopback caller. Default: an even share of
   * `maxSessions` among the tokens (`floor(maxSessions / tokens)`, at least 1; all of
   * `maxSessions` without tokens), so no token can keep another from opening its share. Past it,
   * the new session is refused with HTTP 429, `Retry-After`, and a JSON-RPC error naming the cap
   * and how to free a slot (DELETE a session, or idle expiry); open sessions are never evicted.
   */
  maxSessionsPerPrincipal?: number;
  /**
   * A session with no request open and none for this long is closed (default 30 minutes): a
   * client that went away without DELETE does not hold a slot forever. Its next request gets 404.
   */
  sessionIdleMs?: number;
  /** Server name and version in the initialize answer. */
  name?: string;
  version?: string;
  /** The project's toolsmith: `forge_request` and `forge_propose` for each caller's persona (see `ForgeMcpServerOptions.toolsmith`). */
  toolsmith?: ToolsmithSurface;
}

/** A running Streamable HTTP server. */
export interface HttpServerHandle {
  /** The MCP endpoint, e.g. `http://127.0.0.1:43117/mcp`. */
  url: string;
  /** Open sessions (their ids are also their forge session ids). */
  sessions(): string[];
  /**
   * Stops opening sessions (503) and refuses new calls in open ones (a `cancelled` tool result),
   * lets calls in flight finish within the grace period, then has the runner kill those still
   * running; once every call was answered, closes every session and the listener. The Forge stays open.
   * @param options.reason why, as the refusals and the answers of killed calls say it (default
   *   `the forge server is shutting down`)
   */
  close(options?: { reason?: string }): Promise<void>;
}

interface Session {
  server: Server;
  transport: NodeStreamableHTTPServerTransport;
  dispose(): void;
  /** Which token opened it (a digest, or `loopback` without tokens); every later request must carry the same one. */
  principal: string;
  /** Requests of this session being answered now (a notification stream counts while open). */
  open: number;
  /** When its last request ended (ms since the epoch). */
  lastSeen: number;
}

const LOOPBACK_NAMES = new Set(['localhost', '127.0.0.1', '[::1]', '::1']);
const PERSONA = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;
const MIN_TOKEN = 16;

/** True for `localhost`, 127.0.0.0/8 and ::1. */
export function isLoopback(host: string): boolean {
  const h = host.toLowerCase();
  if (LOOPBACK_NAMES.has(h)) return true;
  return isIP(h) === 4 && h.startsWith('127.');
}

/**
 * Serves MCP over Streamable HTTP at `http://host:port/mcp`; resolves once listening.
 *
 * Security: a loopback bind (the default) answers only requests whose Host header names loopback
 * and whose Origin, if any, is loopback or listed in `allowedOrigins` (403 otherwise) — DNS
 * rebinding protection. Any other bind requires `tokens` (refused with `tokens_required`
 * otherwise); then a request without a valid `Authorization: Bearer` token gets 401, and a
 * session answers only the token that opened it. Each session gets its own `Server` and its own
 * forge session id (the SDK transport's session id): its own session scope and breakers.
 *
 * Sessions are capped per principal (`maxSessionsPerPrincipal`, 429) and in total (`maxSessions`,
 * 503); a slot frees when its session is DELETEd, closed, or idle for `sessionIdleMs`.
 *
 * @throws ForgeMcpError `tokens_required`, `invalid_options` (also a cap or idle time that is not
 *   a positive integer, or a per-principal cap above `maxSessions`), `listen_failed`.
 */
export async function serveHttp(forge: Forge, options: ServeHttpOptions = {}): Promise<HttpServerHandle> {
  // Loaded here, not at import: a stdio server never needs the HTTP transport (~50 ms of start-up).
  const { NodeStreamableHTTPServerTransport: Transport, toNodeHandler, toWebRequest } = await import('@modelcontextprotocol/node');
  const { createMcpHandler, isLegacyRequest } = await import('@modelcontextprotocol/server');
  const host = options.host ?? '127.0.0.1';
  const loopback = isLoopback(host);
  const grants = checkTokens(options.tokens ?? {});
  if (!loopback && grants.size === 0)
    throw new ForgeMcpError(
      'tokens_required',
      `refusing to serve MCP over HTTP on ${host}: an address other than loopback needs bearer tokens, each mapped to a persona (tokens: {"<token>": {"persona": "…"}}); or bind 127.0.0.1`,
    );
  const allowedOrigins = new Set(options.allowedOrigins ?? []);
  for (const o of allowedOrigins)
    if (!/^https?:\/\/[^/\s]+$/.test(o))
      throw new ForgeMcpError(
        'invalid_options',
        `allowedOrigins: "${o}" must be a scheme and host with no path, like https://app.example.com`,
      );
  const allowedHosts = options.allowedHosts?.map((h) => h.toLowerCase());
  const maxBody = options.maxBodyBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const limits = resolveSessionLimits(options, grants.size);
  const inflight = new Inflight();
  const sessions = new Map<string, Session>();
  let closing: Promise<void> | undefined;
  /** Responses to POSTs of open sessions not yet ended: close() lets them finish writing. */
  const posting = new Set<ServerResponse>();
  // Tasks outlive the request that made them: they belong to the server, by principal.
  const tasks = new TaskStore();
  const listings = new Listings();

  // The 2026-07-28 era: stateless, one server instance per request, built for the request's
  // credential (never for a connection: there is none). The caller rides in authInfo.
  const modern = createMcpHandler(
    ({ authInfo }) => {
      const caller = (authInfo?.extra as { forge?: ModernCaller } | undefined)?.forge;
      if (!caller) throw new Error('forge mcp: a 2026-era request reached the handler without its caller');
      const built = buildServer(
        forge,
        {
          ctx: caller.ctx,
          era: 'modern',
          watch: false,
          tasks: { store: tasks, owner: caller.principal },
          views: listings.of(caller.principal, caller.ctx),
          ...naming,
        },
        inflight,
      );
      return built.server;
    },
    {
      legacy: 'reject',
      maxRequestBodySize: maxBody,
      onerror: (err) => {
        if (process.env.FORGE_MCP_DEBUG) process.emitWarning(`forge mcp: ${err.message}`);
      },
    },
  );
  const modernNode = toNodeHandler(modern, { maxRequestBodySize: maxBody });
  // List changes reach 2026-era clients on their subscriptions/listen streams.
  const unwatch = forge.on('toolsChanged', () => {
    listings.clear();
    modern.notify.toolsChanged();
  });

  const hostAllowed = (header: string | undefined): boolean => {
    if (!header) return false;
    const name = hostname(header);
    if (name === undefined) return false;
    if (loopback) return LOOPBACK_NAMES.has(name);
    return allowedHosts === undefined || allowedHosts.includes(name) || LOOPBACK_NAMES.has(name);
  };
  const originAllowed = (origin: string | undefined): boolean => {
    if (origin === undefined) return true;
    if (allowedOrigins.has(origin)) return true;
    try {
      const u = new URL(origin);
      return (u.protocol === 'http:' || u.protocol === 'https:') && LOOPBACK_NAMES.has(u.hostname.toLowerCase());
    } catch {
      return false;
    }
  };
  /** The caller of a request: the token's grant (digest as principal), or the anonymous loopback caller. */
  const authenticate = (req: IncomingMessage): { principal: string; who: string; ctx: CallContext } | undefined => {
    if (grants.size === 0)
      return {
        principal: 'loopback',
        who: 'the loopback caller (without tokens every local client is this one principal; give each client its own token to cap them apart)',
        ctx: {},
      };
    const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
    if (!m?.[1]) return undefined;
    const digest = sha256(m[1]);
    for (const [d, grant] of grants) {
      if (timingSafeEqual(d, digest)) {
        const ctx: CallContext = {
          persona: grant.persona,
          ...(grant.allowedTools !== undefined ? { allowedTools: grant.allowedTools } : {}),
        };
        return { principal: d.toString('hex'), who: `the token of persona "${grant.persona}"`, ctx };
      }
    }
    return undefined;
  };

  const drop = (id: string) => {
    const s = sessions.get(id);
    if (!s) return;
    sessions.delete(id);
    s.dispose();
  };

  /** For a 2026 tools/call: how its `Mcp-Param-*` headers disagree with its arguments, if they do. */
  const paramHeaders = async (body: unknown, principal: string, ctx: CallContext, req: IncomingMessage) => {
    const m = body as { method?: unknown; params?: { name?: unknown; arguments?: unknown } } | null;
    if (m?.method !== 'tools/call' || typeof m.params?.name !== 'string') return undefined;
    const name = m.params.name;
    // The caller's listing, shared with the instance that then serves the call (listed once).
    const listing = listings.of(principal, ctx);
    let views = listing.get();
    if (!views) {
      views = (await listViews(forge, ctx)).views;
      listing.set(views);
    }
    const declared = headerDeclarations(findView(views, name)?.record.input_schema);
    if (declared.length === 0) return undefined;
    return paramHeaderProblem(declared, m.params.arguments, (h) => {
      const v = req.headers[h];
      return Array.isArray(v) ? v.join(', ') : v;
    });
  };

  const naming = {
    ...(options.name ? { name: options.name } : {}),
    ...(options.version ? { version: options.version } : {}),
    ...(options.toolsmith ? { toolsmith: options.toolsmith } : {}),
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    // While it closes, only open sessions are served: a call there gets its refusal as a tool result.
    const open = req.headers['mcp-session-id'];
    if (closing && !(typeof open === 'string' && sessions.has(open)))
      return fail(res, 503, 'the forge server is shutting down: it opens no new sessions; try again once it is back');
    const path = (req.url ?? '/').split('?')[0];
    if (path !== '/mcp') return fail(res, 404, `not found: the MCP endpoint is /mcp`);
    if (!hostAllowed(req.headers.host)) return fail(res, 403, `Host header ${JSON.stringify(req.headers.host ?? '')} is not allowed`);
    const origin = req.headers.origin;
    if (!originAllowed(origin)) return fail(res, 403, `Origin ${JSON.stringify(origin)} is not allowed (see allowedOrigins)`);
    const caller = authenticate(req);
    if (!caller) {
      res.setHeader('WWW-Authenticate', 'Bearer realm="forge"');
      return fail(res, 401, 'a valid bearer token is required: send Authorization: Bearer <token>');
    }
    let body: unknown;
    if (req.method === 'POST') {
      const read = await readJson(req, maxBody);
      if (!read.ok) return fail(res, read.status, read.message, read.code);
      body = read.value;
      // The SDK would call it a parse error with id null; JSON-RPC wants -32602 with the id.
      const bad = paramsNotObject(body);
      if (bad) return fail(res, 400, bad.error.message, bad.error.code, bad.id);
    }
    // 2026-07-28 requests carry their protocol version and capabilities in `_meta` (or are
    // server/discover); everything else is the 2025 era, served with sessions.
    if (
      req.method === 'POST' &&
      !(typeof req.headers['mcp-session-id'] === 'string') &&
      !(legacyBody(body) ?? (await isLegacyRequest(await toWebRequest(req, body))))
    ) {
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
      const mismatch = await paramHeaders(body, caller.principal, modernCtx, req);
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
      posting.add(res);
      res.once('close', () => posting.delete(res));
      await modernNode(req, res, body);
      return;
    }
    const sid = req.headers['mcp-session-id'];
    if (typeof sid === 'string') {
      const s = sessions.get(sid);
      if (!s) return fail(res, 404, 'session not found: it was closed or never existed; initialize a new one');
      if (s.principal !== caller.principal) return fail(res, 403, 'this session belongs to another credential');
      s.open++;
      if (req.method === 'POST') {
        posting.add(res);
        res.once('close', () => posting.delete(res));
      }
      try {
        await s.transport.handleRequest(req, res, body);
        // A notification stream (GET) stays open after handleRequest returns: count it until it closes.
        if (!res.writableEnded) await new Promise<void>((r) => res.once('close', () => r()));
      } finally {
        s.open--;
        s.lastSeen = Date.now();
      }
      return;
    }
    if (req.method !== 'POST' || !isInitializeRequest(body))
      return fail(res, 400, 'bad request: no mcp-session-id header; the first request of a session must be initialize');
    // No await between this check and sessions.set below: concurrent initializes cannot overshoot a cap.
    const admitted = admitSession(sessions.values(), caller.principal, caller.who, limits);
    if (!admitted.ok) {
      res.setHeader('Retry-After', String(admitted.retryAfterS));
      return fail(res, admitted.status, admitted.message, -32000, requestId(body));
    }
    const id = randomUUID();
    const built = buildServer(forge, { ctx: { ...caller.ctx, session: id }, era: 'legacy', ownsSession: id, ...naming }, inflight);
    const transport = new Transport({
      sessionIdGenerator: () => id,
      onsessionclosed: (closed) => drop(closed),
      // Resumable streams: a client that lost its SSE stream reconnects with Last-Event-ID and
      // gets what it missed (within the store's bounds), told by the priming event when to retry.
      eventStore: new SessionEventStore(),
      retryInterval: 1000,
      maxRequestBodySize: maxBody,
    });
    built.server.onclose = () => drop(id);
    sessions.set(id, { ...built, transport, principal: caller.principal, open: 0, lastSeen: Date.now() });
    await built.server.connect(transport);
    await transport.handleRequest(req, res, body);
    // An initialize the transport refused leaves no session behind.
    if (transport.sessionId === undefined) {
      drop(id);
      await built.server.close().catch(() => {});
    }
  };

  const http = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) fail(res, 500, `forge mcp: ${(err as Error).message}`);
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException) =>
      reject(
        new ForgeMcpError('listen_failed', `cannot listen on ${host}:${options.port ?? 0}: ${err.code ?? err.message}`, { cause: err }),
      );
    http.once('error', onError);
    // A burst of clients connecting at once (a thousand calls from one agent host) queues in the
    // kernel's backlog (capped by net.core.somaxconn) rather than past Node's default of 511.
    http.listen({ port: options.port ?? 0, host, backlog: 4096 }, () => {
      http.off('error', onError);
      resolve();
    });
  });
  // Once listening, an error is one connection's (accept() out of descriptors: EMFILE): that
  // connection is refused and the server goes on. Without a listener it would end the process.
  let warnedAccept = 0;
  http.on('error', (err: NodeJS.ErrnoException) => {
    if (Date.now() - warnedAccept < 10_000) return;
    warnedAccept = Date.now();
    process.emitWarning(
      `forge mcp: a connection could not be accepted (${err.code ?? err.message}); it was refused and the server goes on — raise the open-files limit (ulimit -n) if this repeats`,
    );
  });
  // Connections past what the open-files limit leaves room for are closed at once (the client
  // sees the connection refused and may try again), rather than accepted into a process that
  // then cannot start a sandbox.
  const files = openFilesLimit();
  if (files !== undefined) http.maxConnections = Math.max(16, Math.floor(files / 2));
  // Idle sessions are closed by a sweep that never keeps the process alive.
  const sweep = setInterval(() => {
    const now = Date.now();
    for (const [id, s] of [...sessions]) {
      if (s.open === 0 && now - s.lastSeen >= limits.idleMs) {
        drop(id);
        void s.server.close().catch(() => {});
      }
    }
  }, limits.sweepMs);
  sweep.unref();
  const address = http.address();
  const port = typeof address === 'object' && address ? address.port : (options.port ?? 0);
  const urlHost = isIP(host) === 6 ? `[${host}]` : host;

  return {
    url: `http://${urlHost}:${port}/mcp`,
    sessions: () => [...sessions.keys()],
    close(o: { reason?: string } = {}) {
      closing ??= (async () => {
        clearInterval(sweep);
        // Still listening while calls drain: a client's next request gets an answer, not a refused connection.
        await inflight.drain(options.graceMs ?? 10_000, o.reason);
        const stopped = new Promise<void>((resolve) => http.close(() => resolve()));
        // Every answer was handed to its transport; let the streams carrying them finish writing.
        await settled(
          [...posting].map((r) => new Promise<void>((done) => (r.writableFinished ? done() : r.once('close', () => done())))),
          5000,
        );
        for (const [id, s] of [...sessions]) {
          drop(id);
          await s.server.close().catch(() => {});
        }
        unwatch();
        await modern.close().catch(() => {});
        http.closeAllConnections();
        await stopped;
      })();
      return closing;
    },
  };
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

function checkTokens(tokens: Record<string, HttpTokenGrant>): Map<Buffer, HttpTokenGrant> {
  const out = new Map<Buffer, HttpTokenGrant>();
  for (const [index, [token, grant]] of Object.entries(tokens).entries()) {
    // Named by a fingerprint, never by any of its characters (a message may reach a log).
    const shown = `#${index + 1} (sha256 ${sha256(token).toString('hex').slice(0, 8)})`;
    if (token.length < MIN_TOKEN || !/^[\x21-\x7e]+$/.test(token))
      throw new ForgeMcpError(
        'invalid_options',
        `tokens: token ${shown} must be at least ${MIN_TOKEN} printable characters without spaces`,
      );
    if (!grant || typeof grant.persona !== 'string' || !PERSONA.test(grant.persona))
      throw new ForgeMcpError(
        'invalid_options',
        `tokens: token ${shown} needs a persona of a letter, then letters, digits, _ or - (got ${JSON.stringify(grant?.persona)})`,
      );
    if (grant.allowedTools !== undefined && typeof grant.allowedTools !== 'string')
      throw new ForgeMcpError('invalid_options', `tokens: token ${shown}: allowedTools must be a comma list string`);
    out.set(sha256(token), grant);
  }
  return out;
}

/** Waits for `all`, at most `ms`. */
async function settled(all: Promise<void>[], ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.all(all), new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}

const sha256 = (s: string): Buffer => createHash('sha256').update(s).digest();

/** The host name of a Host header (`[::1]:8080` → `[::1]`, `Example.com:80` → `example.com`). */
function hostname(header: string): string | undefined {
  const h = header.trim().toLowerCase();
  if (h.startsWith('[')) {
    const end = h.indexOf(']');
    return end < 0 ? undefined : h.slice(0, end + 1);
  }
  const colon = h.indexOf(':');
  return colon < 0 ? h : h.slice(0, colon);
}

type ReadResult = { ok: true; value: unknown } | { ok: false; status: number; code: number; message: string };

async function readJson(req: IncomingMessage, limit: number): Promise<ReadResult> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit)
      return {
        ok: false,
        status: 413,
        code: -32600,
        message: `request body too large: over the limit of ${limit} bytes (maxBodyBytes; forge serve --max-message-bytes); send smaller messages or raise the limit`,
      };
    chunks.push(chunk);
  }
  try {
    return { ok: true, value: JSON.parse(Buffer.concat(chunks).toString('utf8')) };
  } catch {
    return { ok: false, status: 400, code: -32700, message: 'parse error: the body is not JSON' };
  }
}

/** A JSON-RPC error body with an HTTP status (the transport's own error shape), answering request `id` when known. */
function fail(res: ServerResponse, status: number, message: string, code = -32000, id: string | number | null = null): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id }));
}

/** The id of a JSON-RPC request body, or null. */
function requestId(body: unknown): string | number | null {
  const id = (body as { id?: unknown } | null)?.id;
  return typeof id === 'string' || typeof id === 'number' ? id : null;
}
