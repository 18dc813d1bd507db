import { createServer, type IncomingMessage, type Server as NodeHttpServer, type ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import { type Forge, openFilesLimit } from '@forge/runner';
import { isInitializeRequest } from '@modelcontextprotocol/server';
import { ForgeMcpError } from './errors.js';
import { HttpAccess, type HttpCaller, type HttpTokenGrant } from './httpAccess.js';
import { fail, readJson } from './httpJson.js';
import { ModernEntry } from './httpModern.js';
import { SessionTable } from './httpSessions.js';
import { type AuditTreeSource, serveTlog, TLOG_PREFIX } from './httpTlog.js';
import { Inflight } from './inflight.js';
import { DEFAULT_MAX_MESSAGE_BYTES, paramsNotObject } from './jsonrpc.js';
import { resolveSessionLimits } from './sessionLimits.js';
import type { ToolsmithSurface } from './toolsmithTools.js';

/** Options of {@link serveHttp}. */
export interface ServeHttpOptions {
  /** Address to bind (default `127.0.0.1`). Anything but loopback requires `tokens`. */
  host?: string;
  /**
   * Where the audit log's tree served under `/audit/log/` is read (default: the tiles beside the
   * file log, `forge.paths.auditLog`); a database store's own (`postgresTiles`).
   */
  auditTree?: AuditTreeSource;
  /**
   * Personas whose tokens may read the audit log's tree under `/audit/log/` (a monitor's, a
   * witness's). The tree is derived from every persona's calls, so with tokens it is served to
   * these alone (403 for any other); without tokens (loopback) the one local caller reads it.
   */
  auditReaders?: readonly string[];
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
  const sdk = { node: await import('@modelcontextprotocol/node'), server: await import('@modelcontextprotocol/server') };
  const host = options.host ?? '127.0.0.1';
  const access = new HttpAccess(host, options);
  const maxBody = options.maxBodyBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const limits = resolveSessionLimits(options, access.grants.size);
  const inflight = new Inflight();
  const naming = {
    ...(options.name ? { name: options.name } : {}),
    ...(options.version ? { version: options.version } : {}),
    ...(options.toolsmith ? { toolsmith: options.toolsmith } : {}),
  };
  const sessions = new SessionTable({ forge, inflight, maxBody, limits, naming, Transport: sdk.node.NodeStreamableHTTPServerTransport });
  const modern = new ModernEntry({ forge, inflight, maxBody, naming, sdk });
  const server: HttpServer = {
    access,
    sessions,
    modern,
    maxBody,
    auditLog: options.auditTree ?? forge.paths.auditLog,
    auditReaders: new Set(options.auditReaders ?? []),
    posting: new Set(),
    closing: undefined,
  };

  const http = createServer((req, res) => {
    answer(server, req, res).catch((err: unknown) => {
      if (!res.headersSent) fail(res, 500, `forge mcp: ${(err as Error).message}`);
      else res.destroy();
    });
  });
  // An idle connection is kept open longer than Node's 5 s: a client (undici) reuses one it
  // believes open up to a second before the server's advertised timeout, and on a loaded host
  // the two clocks drift further apart than that, so a request could land on a closing socket.
  http.keepAliveTimeout = 30_000;
  await listen(http, host, options.port ?? 0);
  sessions.startSweeping();
  const address = http.address();
  const port = typeof address === 'object' && address ? address.port : (options.port ?? 0);
  const urlHost = isIP(host) === 6 ? `[${host}]` : host;

  return {
    url: `http://${urlHost}:${port}/mcp`,
    sessions: () => sessions.ids(),
    close(o: { reason?: string } = {}) {
      server.closing ??= shutDown(server, http, inflight, options.graceMs ?? 10_000, o.reason);
      return server.closing;
    },
  };
}

/** One HTTP server's parts, as its request routing and shutdown use them. */
interface HttpServer {
  access: HttpAccess;
  sessions: SessionTable;
  modern: ModernEntry;
  maxBody: number;
  /** The tree served under /audit/log/ (httpTlog.ts): the file log's, or its store's. */
  auditLog: string | AuditTreeSource;
  /** Personas whose tokens may read it (with tokens; see ServeHttpOptions.auditReaders). */
  auditReaders: ReadonlySet<string>;
  /** Responses to POSTs of open sessions not yet ended: close() lets them finish writing. */
  posting: Set<ServerResponse>;
  /** Set once close() began. */
  closing: Promise<void> | undefined;
}

/** Routes one request: the checks every request passes, then the 2026 entry, an open session, or a new one. */
async function answer(server: HttpServer, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const { sessions, modern } = server;
  // While it closes, only open sessions are served: a call there gets its refusal as a tool result.
  const sid = req.headers['mcp-session-id'];
  if (server.closing && !(typeof sid === 'string' && sessions.has(sid)))
    return fail(res, 503, 'the forge server is shutting down: it opens no new sessions; try again once it is back');
  const caller = admit(server.access, req, res);
  if (!caller) return;
  const path = (req.url ?? '/').split('?')[0] as string;
  if (path.startsWith(TLOG_PREFIX)) {
    const persona = caller.ctx.persona;
    if (caller.principal !== 'loopback' && !(persona !== undefined && server.auditReaders.has(persona)))
      return fail(
        res,
        403,
        `the audit log's tree records every persona's calls: it is served to the tokens of the personas named as its readers (forge serve --audit-reader PERSONA), not to ${caller.who}`,
      );
    return serveTlog(server.auditLog, path, req, res);
  }
  let body: unknown;
  if (req.method === 'POST') {
    const read = await readJson(req, server.maxBody);
    if (!read.ok) return fail(res, read.status, read.message, read.code);
    body = read.value;
    // The SDK would call it a parse error with id null; JSON-RPC wants -32602 with the id.
    const bad = paramsNotObject(body);
    if (bad) return fail(res, 400, bad.error.message, bad.error.code, bad.id);
  }
  const track = (r: ServerResponse) => {
    server.posting.add(r);
    r.once('close', () => server.posting.delete(r));
  };
  if (await modern.takes(req, body)) return modern.serve(req, res, body, caller, track);
  if (typeof sid === 'string') return sessions.serve(sid, req, res, body, caller, track);
  if (req.method !== 'POST' || !isInitializeRequest(body))
    return fail(res, 400, 'bad request: no mcp-session-id header; the first request of a session must be initialize');
  return sessions.open(req, res, body, caller);
}

/** The caller of a request that names the endpoint, an allowed Host and Origin, and a valid token; else answers it (404, 403, 401). */
function admit(access: HttpAccess, req: IncomingMessage, res: ServerResponse): HttpCaller | undefined {
  const path = (req.url ?? '/').split('?')[0];
  if (path !== '/mcp' && !path?.startsWith(TLOG_PREFIX))
    return void fail(res, 404, `not found: the MCP endpoint is /mcp (and the audit log's tree is under ${TLOG_PREFIX})`);
  if (!access.hostAllowed(req.headers.host))
    return void fail(res, 403, `Host header ${JSON.stringify(req.headers.host ?? '')} is not allowed`);
  const origin = req.headers.origin;
  if (!access.originAllowed(origin)) return void fail(res, 403, `Origin ${JSON.stringify(origin)} is not allowed (see allowedOrigins)`);
  const caller = access.authenticate(req);
  if (!caller) {
    res.setHeader('WWW-Authenticate', 'Bearer realm="forge"');
    fail(res, 401, 'a valid bearer token is required: send Authorization: Bearer <token>');
  }
  return caller;
}

/** Listens on `host:port`; then an error is one connection's, and connections are capped by the open-files limit. */
async function listen(http: NodeHttpServer, host: string, port: number): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException) =>
      reject(new ForgeMcpError('listen_failed', `cannot listen on ${host}:${port}: ${err.code ?? err.message}`, { cause: err }));
    http.once('error', onError);
    // A burst of clients connecting at once (a thousand calls from one agent host) queues in the
    // kernel's backlog (capped by net.core.somaxconn) rather than past Node's default of 511.
    http.listen({ port, host, backlog: 4096 }, () => {
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
}

/** close(): calls in flight drain while still listening, answers finish writing, then sessions, the 2026 entry and the listener close. */
async function shutDown(server: HttpServer, http: NodeHttpServer, inflight: Inflight, graceMs: number, reason: string | undefined) {
  server.sessions.stopSweeping();
  // Still listening while calls drain: a client's next request gets an answer, not a refused connection.
  await inflight.drain(graceMs, reason);
  const stopped = new Promise<void>((resolve) => http.close(() => resolve()));
  // Every answer was handed to its transport; let the streams carrying them finish writing.
  await settled(
    [...server.posting].map((r) => new Promise<void>((done) => (r.writableFinished ? done() : r.once('close', () => done())))),
    5000,
  );
  await server.sessions.closeAll();
  await server.modern.close();
  http.closeAllConnections();
  await stopped;
}

/** Waits for `all`, at most `ms`. */
async function settled(all: Promise<void>[], ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.all(all), new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}
